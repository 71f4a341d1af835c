"""Publish, PublishStream and errors against a real spoold."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import spool
from conftest import orders_config
from harness import free_port


async def test_publish_batch_with_ids_keys_headers(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    async with await spool.connect(s.addr) as c:
        res = await c.publish_batch(
            "orders",
            [
                spool.OutMessage(id="order-1", key="cust-1", payload=b"a", headers={"schema": "v2"}),
                spool.OutMessage(id="order-2", key=b"cust-2", payload="b"),
                spool.OutMessage(payload=b"c"),  # id chosen by the sidecar
            ],
        )
        assert [r.id for r in res[:2]] == ["order-1", "order-2"]
        assert res[2].id != "" and all(0 <= r.partition < 4 for r in res)
        one = await c.publish("orders", b"d", key="cust-1", id="order-3", acks=spool.Acks.LEADER)
        assert one.id == "order-3" and one.partition == res[0].partition  # same key, same partition
        assert one.offset > res[0].offset

    got: dict[str, spool.Message] = {}

    async def handle(m: spool.Message) -> None:
        got[m.id] = m

    stop = asyncio.Event()
    task = asyncio.create_task(spool.subscribe("workers", ["orders"], handle, addr=s.addr, stop=stop, handle_signals=False))
    from harness import eventually

    await eventually(lambda: len(got) == 4, 20, "all four delivered")
    stop.set()
    await asyncio.wait_for(task, 20)
    m = got["order-1"]
    assert (m.key, m.payload, m.headers) == (b"cust-1", b"a", {"schema": "v2"})
    assert got["order-2"].payload == b"b"


async def test_unknown_topic_is_a_typed_error(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    async with await spool.connect(s.addr) as c:
        with pytest.raises(spool.UnknownTopicError) as ei:
            await c.publish("nope", b"x")
    e = ei.value
    assert e.reason == "UNKNOWN_TOPIC" and isinstance(e, spool.NotFoundError)
    assert not e.retryable and "'nope'" in str(e) and "UNKNOWN_TOPIC" in str(e)


async def test_oversize_message_is_a_typed_error(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    big = b"x" * (1 << 20) + b"x"  # above limits.max_message_bytes, 1 MiB by default
    async with await spool.connect(s.addr) as c:
        with pytest.raises(spool.MessageTooLargeError) as ei:
            await c.publish_batch("orders", [spool.OutMessage(payload=b"ok"), spool.OutMessage(payload=big)])
        e = ei.value
        assert e.reason == "MESSAGE_TOO_LARGE" and isinstance(e, spool.InvalidArgumentError)
        assert e.metadata.get("index") == "1"
        # The same refusal in band on a PublishStream: the stream stays open.
        async with c.publisher("orders") as p:
            bad = await p.publish(big)
            good = await p.publish(b"fine", id="after-bad")
            with pytest.raises(spool.MessageTooLargeError):
                await bad
            assert (await good).id == "after-bad"


async def test_nothing_answering_says_is_spoold_running() -> None:
    addr = f"127.0.0.1:{free_port()}"
    with pytest.raises(spool.SidecarUnreachableError) as ei:
        await spool.connect(addr, timeout=0.5)
    assert "is spoold running" in str(ei.value)
    c = spool.Client(addr)
    with pytest.raises(spool.SidecarUnreachableError) as ei2:
        await c.publish("orders", b"x", id="a")
    assert ei2.value.reason == "" and ei2.value.retryable and "is spoold running" in str(ei2.value)
    await c.close()


async def test_streaming_publisher(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    n = 3000
    async with await spool.connect(s.addr) as c:
        async with c.publisher("orders", max_in_flight=256) as p:
            futs = [await p.publish(f"m{i}", key=f"k{i % 10}", id=f"id-{i}", acks=spool.Acks.LEADER if i % 2 else spool.Acks.ALL) for i in range(n)]
            res = await asyncio.gather(*futs)
    assert [r.id for r in res] == [f"id-{i}" for i in range(n)]
    per_key: dict[int, list[int]] = {}
    for i, r in enumerate(res):
        per_key.setdefault(i % 10, []).append(r.offset)
    for offs in per_key.values():
        assert offs == sorted(offs), "a key's messages out of publish order"


async def test_publisher_survives_a_sidecar_restart(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    async with await spool.connect(s.addr) as c:
        p = c.publisher("orders")
        assert (await (await p.publish(b"before", id="b"))).id == "b"
        await asyncio.to_thread(s.restart)
        # The old stream is gone: the first publish may fail with the
        # stream's status, then a new stream is opened.
        for attempt in range(50):
            try:
                r = await (await p.publish(b"after", id="a"))
                break
            except spool.SpoolError as e:
                assert e.retryable or "stream" in str(e), e
        else:
            raise AssertionError("publisher did not recover after the restart")
        assert r.id == "a"
        await p.close()


async def test_scheduled_publish_is_delivered_at_its_time(start_spoold: Any) -> None:
    """deliver_after and deliver_at reach the sidecar (docs/scheduling.md):
    the message waits for its time; times the sidecar cannot keep are typed
    errors; a naive datetime is refused before anything is sent."""
    import datetime
    import time

    s = start_spoold(orders_config())
    async with await spool.connect(s.addr) as c:
        sent = time.time()
        await c.publish("orders", b"later", key="k", id="later", deliver_after=1.0)
        with pytest.raises(spool.InvalidArgumentError) as ei:
            await c.publish("orders", b"x", deliver_at=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=400))
        assert ei.value.reason == "INVALID_SCHEDULE"
        with pytest.raises(spool.InvalidArgumentError, match="without a delivery time"):
            await c.publish("orders", b"x", deliver_in_key_order=True)
        await c.publish("orders", b"kept", key="k2", id="kept", deliver_after=1.0, deliver_in_key_order=True)
        with pytest.raises(ValueError, match="no time zone"):
            await c.publish("orders", b"x", deliver_at=datetime.datetime.now())
        gone = await c.publish("orders", b"gone", key="k", id="gone", deliver_after=60)
        await c.cancel_scheduled("orders", "gone", at=gone)
        await c.cancel_scheduled("orders", "gone", key="k")  # twice is fine
        with pytest.raises(spool.NotFoundError) as nf:
            await c.cancel_scheduled("orders", "never-published")
        assert nf.value.reason == "UNKNOWN_SCHEDULED_MESSAGE"

    got: dict[str, float] = {}

    async def handle(m: spool.Message) -> None:
        got[m.id] = time.time()

    stop = asyncio.Event()
    task = asyncio.create_task(spool.subscribe("workers", ["orders"], handle, addr=s.addr, stop=stop, handle_signals=False))
    from harness import eventually

    await eventually(lambda: "later" in got and "kept" in got, 20, "the scheduled messages delivered")
    assert "gone" not in got
    stop.set()
    await asyncio.wait_for(task, 20)
    assert got["later"] >= sent + 1.0, f"delivered {sent + 1.0 - got['later']:.3f}s early"
