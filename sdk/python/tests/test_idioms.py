"""The forms a Python user expects: `async with spool.connect()` with one
await, the async-iterator subscription, signals left to the application."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import grpc
import pytest

import spool
from conftest import orders_config
from harness import eventually
from spool.v1 import admin_pb2
from test_subscribe import publish_n


async def test_connect_in_async_with_needs_one_await(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    async with spool.connect(s.addr) as c:
        assert isinstance(c, spool.Client)
        r = await c.publish("orders", b"x", key="k")
        assert r.id
    assert c.channel.get_state() == grpc.ChannelConnectivity.SHUTDOWN, "the client is closed when the block ends"
    async with await spool.connect(s.addr) as c2:  # the older form still works
        await c2.publish("orders", b"y")
    c3 = await spool.connect(s.addr)
    await c3.close()


async def test_connect_in_async_with_fails_fast_without_a_sidecar() -> None:
    from harness import free_port

    with pytest.raises(spool.SidecarUnreachableError):
        async with spool.connect(f"127.0.0.1:{free_port()}", timeout=0.3):
            pass


async def test_async_for_settles_with_ack_and_nack(start_spoold: Any, redis: Any) -> None:
    s = start_spoold(orders_config(redis=redis.addr, max_attempts=3))
    async with spool.connect(s.addr) as c:
        await c.publish("orders", "ok", key="a", id="ok")
        await c.publish("orders", "retry-once", key="b", id="retry")
        await c.publish("orders", "poison", key="c", id="dead")
        seen: list[tuple[str, int]] = []
        stats = spool.Stats()
        # One at a time (credit 1), so that nothing else is in flight when
        # the block is left with "left" unsettled.
        async with c.subscription("workers", ["orders"], concurrency=1, prefetch=0, stats=stats) as sub:
            async for m in sub:
                seen.append((m.id, m.attempt))
                if m.id == "ok":
                    m.ack()
                elif m.id == "retry" and m.attempt == 1:
                    m.nack()
                elif m.id == "retry":
                    m.ack()
                    await c.publish("orders", "left", key="d", id="left")
                elif m.id == "dead":
                    m.nack(spool.DeadLetter("bad schema"))
                else:
                    break  # "left", not settled: leaving the block releases it
        assert stats.acked == 2 and stats.dead_lettered == 1 and stats.released == 1, stats
        assert sorted(seen) == [("dead", 1), ("left", 1), ("ok", 1), ("retry", 1), ("retry", 2)]

        # The released message comes back at attempt 1: no attempt was counted.
        async with c.subscription("workers", ["orders"]) as sub:
            async for m in sub:
                assert (m.id, m.attempt) == ("left", 1)
                m.ack()
                break
    resp = await s.admin_stub().PeekDeadLetters(admin_pb2.PeekDeadLettersRequest(group="workers", topic="orders", limit=10))
    assert [e.reason for e in resp.entries] == ["bad schema"]


async def test_async_for_ends_when_stop_is_set(start_spoold: Any) -> None:
    s = start_spoold(orders_config())
    await publish_n(s.addr, 3)
    stop = asyncio.Event()
    got = 0
    async with spool.connect(s.addr) as c:
        async with c.subscription("workers", ["orders"], stop=stop) as sub:
            async for m in sub:
                got += 1
                m.ack()
                stop.set()  # e.g. the application's own shutdown
    assert got >= 1


async def test_ack_outside_a_subscription_says_what_to_do() -> None:
    m = spool.Message(id="x", topic="t", partition=0, offset=0, key=b"", payload=b"")
    with pytest.raises(RuntimeError, match="a handler returns"):
        m.ack()


async def test_signals_are_the_applications_by_default(start_spoold: Any) -> None:
    """Before, subscribe replaced the application's own SIGTERM handler with
    its own while it ran (and removed it at the end)."""
    s = start_spoold(orders_config())
    await publish_n(s.addr, 1)
    loop = asyncio.get_running_loop()
    mine = asyncio.Event()
    stop = asyncio.Event()

    def on_term() -> None:
        mine.set()
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_term)
    try:
        handled = asyncio.Event()

        async def handle(m: spool.Message) -> None:
            handled.set()

        task = asyncio.create_task(spool.subscribe("workers", ["orders"], handle, addr=s.addr, stop=stop))
        await asyncio.wait_for(handled.wait(), 20)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(task, 20)
        assert mine.is_set(), "the application's SIGTERM handler did not run: the SDK took the signal"
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
