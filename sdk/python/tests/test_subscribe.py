"""Subscribe against a real spoold: outcomes, leases, order, reconnects."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import spool
from conftest import orders_config
from harness import eventually
from spool.v1 import admin_pb2


@asynccontextmanager
async def running(addr: str, handler: Any, **kw: Any) -> AsyncIterator[spool.Stats]:
    """Runs a subscription of group workers to orders until the block ends."""
    stop = asyncio.Event()
    stats = spool.Stats()
    task = asyncio.create_task(
        spool.subscribe("workers", ["orders"], handler, addr=addr, stop=stop, handle_signals=False, stats=stats, **kw)
    )
    try:
        yield stats
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def publish_n(addr: str, n: int, key: Callable[[int], str] = lambda i: f"k{i}") -> list[str]:
    async with await spool.connect(addr) as c:
        res = await c.publish_batch("orders", [spool.OutMessage(payload=str(i), key=key(i)) for i in range(n)])
    return [r.id for r in res]


async def lag(s: Any) -> int:
    resp = await s.admin_stub().ListGroups(admin_pb2.ListGroupsRequest(group="workers"))
    return sum(p.lag_messages + p.in_flight for g in resp.groups for p in g.partitions)


async def test_ack(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    ids = await publish_n(s.addr, 50)
    seen: dict[str, int] = defaultdict(int)
    msgs: dict[str, spool.Message] = {}

    async def handle(m: spool.Message) -> None:
        seen[m.id] += 1
        msgs[m.id] = m

    async with running(s.addr, handle, concurrency=8) as stats:
        await eventually(lambda: len(seen) == len(ids), 20, "every message handled")
        await eventually(lambda: stats.acked == len(ids), 10, "every message acked")

        async def no_lag() -> bool:
            return await lag(s) == 0

        await eventually(no_lag, 10, "group has no lag")
    assert all(v == 1 for v in seen.values()), seen
    m = msgs[ids[7]]
    assert (m.topic, m.payload, m.key, m.attempt, m.group) == ("orders", b"7", b"k7", 1, "workers")
    assert m.fencing_token > 0 and m.lease_deadline is not None and m.publish_time is not None
    assert m.first_delivery_time is not None and m.last_error == ""
    assert m.offset >= 0 and 0 <= m.partition < 4


async def test_retry_with_growing_attempts(start_spoold: Any) -> None:
    s = start_spoold(orders_config(max_attempts=5))
    [mid] = await publish_n(s.addr, 1)
    attempts: list[tuple[int, str]] = []
    done = asyncio.Event()

    async def handle(m: spool.Message) -> None:
        attempts.append((m.attempt, m.last_error))
        if m.attempt == 1:
            raise ValueError("provider timed out")
        if m.attempt == 2:
            raise spool.Retry(after=0.05, error="still down")
        done.set()

    async with running(s.addr, handle) as stats:
        await asyncio.wait_for(done.wait(), 20)
        await eventually(lambda: stats.acked == 1, 10, "acked")
    assert [a for a, _ in attempts] == [1, 2, 3]
    assert attempts[1][1] == "ValueError: provider timed out"
    assert attempts[2][1] == "still down"
    assert stats.retried == 2


async def peek(s: Any) -> list[Any]:
    resp = await s.admin_stub().PeekDeadLetters(admin_pb2.PeekDeadLettersRequest(group="workers", topic="orders"))
    return list(resp.entries)


async def test_dead_letter_with_reason(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    [mid] = await publish_n(s.addr, 1)

    async def handle(m: spool.Message) -> None:
        raise spool.DeadLetter("malformed order")

    async with running(s.addr, handle, app_version="billing-1.2") as stats:
        await eventually(lambda: stats.dead_lettered == 1, 20, "dead-lettered")
        entries: list[Any] = []

        async def in_dlq() -> bool:
            entries[:] = await peek(s)
            return len(entries) == 1

        await eventually(in_dlq, 20, "the entry in the dead-letter topic")
    e = entries[0]
    assert e.reason == "malformed order"
    assert e.message.message_id == mid and e.message.payload == b"0"
    assert e.app_version == "billing-1.2"


async def test_release_does_not_count_an_attempt(start_spoold: Any, redis: Any) -> None:
    s = start_spoold(orders_config(redis=redis.addr))
    [mid] = await publish_n(s.addr, 1)
    attempts: list[int] = []
    done = asyncio.Event()

    async def handle(m: spool.Message) -> Any:
        attempts.append(m.attempt)
        if len(attempts) <= 2:
            return spool.Release()  # returned or raised: the same
        done.set()
        return None

    async with running(s.addr, handle) as stats:
        await asyncio.wait_for(done.wait(), 20)
        await eventually(lambda: stats.acked == 1, 10, "acked")
    assert attempts == [1, 1, 1]
    assert stats.released == 2


async def test_lease_is_extended_while_the_handler_runs(start_spoold: Any) -> None:
    s = start_spoold(orders_config(visibility="1s"))
    await publish_n(s.addr, 1)
    calls: list[int] = []

    async def handle(m: spool.Message) -> None:
        calls.append(m.attempt)
        await asyncio.sleep(2.5)  # the work: 2.5 visibility timeouts

    async with running(s.addr, handle) as stats:
        await eventually(lambda: stats.acked == 1, 20, "the slow handler acked")
        assert stats.settle_errors == 0
    assert calls == [1], "redelivered while the handler ran: the lease was not extended"
    assert stats.extended >= 3


async def test_blocking_handler_in_threads(start_spoold: Any) -> None:
    import threading
    import time as _time

    s = start_spoold(orders_config(visibility="1s"))
    ids = await publish_n(s.addr, 8)
    threads: set[str] = set()

    def handle(m: spool.Message) -> None:
        threads.add(threading.current_thread().name)
        _time.sleep(1.2)  # blocking work longer than the visibility timeout

    async with running(s.addr, handle, concurrency=4, blocking=True) as stats:
        await eventually(lambda: stats.acked == len(ids), 30, "every message acked")
    assert stats.retried == 0 and stats.settle_errors == 0
    assert len(threads) > 1 and all(t.startswith("spool-handler") for t in threads)


async def test_per_key_order_with_concurrency(start_spoold: Any) -> None:
    s = start_spoold(orders_config(ordering="key"))
    keys, per_key = 6, 8
    n = keys * per_key
    await publish_n(s.addr, n, key=lambda i: f"key{i % keys}")
    active: dict[bytes, int] = defaultdict(int)
    order: dict[bytes, list[int]] = defaultdict(list)
    overlap: list[bytes] = []
    max_running = 0
    running_now = 0

    async def handle(m: spool.Message) -> None:
        nonlocal running_now, max_running
        active[m.key] += 1
        running_now += 1
        max_running = max(max_running, running_now)
        if active[m.key] > 1:
            overlap.append(m.key)
        order[m.key].append(int(m.payload))
        await asyncio.sleep(0.01)
        active[m.key] -= 1
        running_now -= 1

    async with running(s.addr, handle, concurrency=8) as stats:
        await eventually(lambda: stats.acked == n, 30, "every message acked")
    assert not overlap, f"two messages of a key at once: {overlap}"
    for k, seqs in order.items():
        assert seqs == sorted(seqs), f"{k!r} out of order: {seqs}"
    assert max_running > 1, "keys did not run in parallel"


async def test_reconnect_after_spoold_restarts(start_spoold: Any, redis: Any) -> None:
    s = start_spoold(orders_config(redis=redis.addr))
    first = await publish_n(s.addr, 10)
    done: set[str] = set()

    async def handle(m: spool.Message) -> None:
        done.add(m.id)

    async with running(s.addr, handle, reconnect_backoff=(0.05, 0.5)) as stats:
        await eventually(lambda: done >= set(first), 20, "first messages handled")
        await asyncio.to_thread(s.restart)
        second = await publish_n(s.addr, 10, key=lambda i: f"after{i}")
        await eventually(lambda: done >= set(second), 30, "messages published after the restart handled")
        assert stats.reconnects >= 1


async def test_a_handler_cancelled_by_a_broken_stream_leaves_its_worker_running(start_spoold: Any) -> None:
    """Handlers run in the worker's task: the cancellation of one whose lease
    is lost must end the handler, not the worker (one worker here: had it
    ended, nothing after the restart would be handled)."""
    s = start_spoold(orders_config())
    [stuck] = await publish_n(s.addr, 1)
    started = asyncio.Event()
    cancelled: list[str] = []
    done: set[str] = set()

    async def handle(m: spool.Message) -> None:
        if m.id == stuck and not cancelled:
            started.set()
            try:
                await asyncio.Event().wait()  # until the SDK cancels it
            except asyncio.CancelledError:
                cancelled.append(m.id)
                raise
        done.add(m.id)

    async with running(s.addr, handle, concurrency=1, prefetch=0, reconnect_backoff=(0.05, 0.5)) as stats:
        await asyncio.wait_for(started.wait(), 20)
        await asyncio.to_thread(s.restart)
        await eventually(lambda: cancelled == [stuck], 20, "the running handler cancelled when the stream broke")
        after = await publish_n(s.addr, 3, key=lambda i: f"after{i}")
        await eventually(lambda: done >= {stuck, *after}, 30, "the same worker handling messages after the restart")
        assert stats.reconnects >= 1


async def test_subscription_refused_for_good(start_spoold: Any) -> None:
    s = start_spoold(orders_config())

    async def handle(m: spool.Message) -> None:
        pass

    try:
        await asyncio.wait_for(
            spool.subscribe("nobody", ["orders"], handle, addr=s.addr, handle_signals=False), 20
        )
    except spool.UnknownGroupError as e:
        assert e.reason == "UNKNOWN_GROUP"
        assert "check the group and topics" in str(e)
    else:
        raise AssertionError("subscribe to an unknown group returned")


def test_settlement_drops_a_queued_extension() -> None:
    """The sidecar applies a frame's settlements before its extends: a
    settled delivery's extension still queued must not go in the same frame
    (it would come back as a NOT_IN_FLIGHT settle error, docs/protocol.md)."""
    from spool import _subscribe
    from spool.v1 import message_pb2

    class Sub:
        stats = spool.Stats()

    s = _subscribe._Session(Sub(), None)  # type: ignore[arg-type]
    a = message_pb2.DeliveryRef(topic="orders", partition=0, offset=1, fencing_token=7)
    b = message_pb2.DeliveryRef(topic="orders", partition=0, offset=2, fencing_token=8)
    s.extend(a)
    s.extend(b)
    again = message_pb2.DeliveryRef(topic="orders", partition=0, offset=1, fencing_token=7)
    s.settle(again, _subscribe.Settlement(message_pb2.OUTCOME_ACK), return_credit=True)
    assert [e.ref for e in s.extends] == [b]
