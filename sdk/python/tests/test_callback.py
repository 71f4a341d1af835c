"""Callback mode: spoold calls the app's HandlerService."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import spool
from harness import eventually, free_port
from spool.v1 import admin_pb2


async def test_callback_mode(start_spoold: Any) -> None:
    attempts: dict[bytes, list[int]] = defaultdict(list)
    acked: set[bytes] = set()

    async def handle(m: spool.Message) -> None:
        attempts[m.key].append(m.attempt)
        if m.key == b"flaky" and m.attempt == 1:
            raise ConnectionError("provider timed out")
        if m.key == b"later" and m.attempt == 1:
            raise spool.Retry(after=0.05, error="not yet")
        if m.key == b"released" and len(attempts[m.key]) == 1:
            raise spool.Release()
        if m.key == b"bad":
            raise spool.DeadLetter("malformed order")
        acked.add(m.key)

    port = free_port()
    async with spool.HandlerServer(handle, f"127.0.0.1:{port}") as server:
        assert server.port == port
        s = start_spoold(
            f"""
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: mailer
    delivery: callback
    app_address: "127.0.0.1:{port}"
    max_attempts: 3
    backoff: {{base: 20ms, max: 100ms, multiplier: 2}}
"""
        )
        keys = [b"a", b"flaky", b"later", b"released", b"bad"]
        async with await spool.connect(s.addr) as c:
            await c.publish_batch("orders", [spool.OutMessage(key=k, payload=k) for k in keys])
        await eventually(lambda: acked == {b"a", b"flaky", b"later", b"released"}, 20, "all but bad acked")

        entries: list[Any] = []

        async def in_dlq() -> bool:
            resp = await s.admin_stub().PeekDeadLetters(admin_pb2.PeekDeadLettersRequest(group="mailer", topic="orders"))
            entries[:] = resp.entries
            return len(entries) == 1

        await eventually(in_dlq, 20, "bad dead-lettered")
    assert entries[0].reason == "malformed order"
    assert attempts[b"flaky"] == [1, 2]
    assert attempts[b"later"] == [1, 2]
    assert attempts[b"released"] == [1, 1], "a release counted an attempt"
    assert attempts[b"bad"] == [1]
