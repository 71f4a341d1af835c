"""Callback mode: spoold calls the app's HandlerService."""

from __future__ import annotations

import asyncio
import inspect
from collections import defaultdict
from typing import Any

import grpc
import grpc.aio
import pytest

import spool
from harness import eventually, free_port
from spool.v1 import admin_pb2, message_pb2


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


TOKEN = "0123456789abcdef0123456789abcdef-python"


async def _handle_call(port: int, metadata: tuple[tuple[str, str], ...] | None) -> Any:
    from spool.v1 import handler_pb2, handler_pb2_grpc, message_pb2

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = handler_pb2_grpc.HandlerServiceStub(ch)
        req = handler_pb2.HandleRequest(delivery=message_pb2.Delivery(topic="orders", message_id="m1", payload=b"x", attempt=1))
        return await stub.Handle(req, metadata=metadata, timeout=10)


async def test_callback_token_refuses_other_callers() -> None:
    """With a token, a Handle call without it or with another is refused
    (UNAUTHENTICATED) before the handler runs; spoold's is answered."""
    ran: list[str] = []

    async def handle(m: spool.Message) -> None:
        ran.append(m.id)

    async with spool.HandlerServer(handle, "127.0.0.1:0", token=TOKEN) as server:
        for md in (None, (("authorization", "Bearer wrong-token-0123456789abcdef0123456789"),), (("authorization", TOKEN),)):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await _handle_call(server.port, md)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, md
            assert TOKEN not in (e.value.details() or "")
        assert ran == [], "the handler ran for a refused call"
        resp = await _handle_call(server.port, (("authorization", f"Bearer {TOKEN}"),))
        assert resp.outcome == message_pb2.OUTCOME_ACK
        assert ran == ["m1"]


async def test_callback_default_address_is_loopback() -> None:
    """The default address is loopback, on a port none of spoold's (app
    7070, admin 7071, cluster 7072, probe 7073); an address without a host
    is loopback too."""
    host, _, port = spool.DEFAULT_HANDLER_ADDRESS.rpartition(":")
    assert host == "127.0.0.1" and int(port) == 7080
    assert inspect.signature(spool.HandlerServer).parameters["address"].default == spool.DEFAULT_HANDLER_ADDRESS
    assert inspect.signature(spool.serve_handler).parameters["address"].default == spool.DEFAULT_HANDLER_ADDRESS

    async def handle(m: spool.Message) -> None:
        pass

    async with spool.HandlerServer(handle, ":0") as server:
        assert server.address == f"127.0.0.1:{server.port}"
        resp = await _handle_call(server.port, None)
        assert resp.outcome == message_pb2.OUTCOME_ACK


async def test_callback_mode_with_token(start_spoold: Any, tmp_path: Any) -> None:
    """spoold's app_token_file and the server's token: the deliveries go through."""
    acked: set[bytes] = set()

    async def handle(m: spool.Message) -> None:
        acked.add(m.key)

    token_file = tmp_path / "callback-token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    async with spool.HandlerServer(handle, f"127.0.0.1:{port}", token=TOKEN):
        s = start_spoold(
            f"""
topics:
  - name: orders
    partitions: 1
subscriptions:
  - topic: orders
    group: mailer
    delivery: callback
    app_address: "127.0.0.1:{port}"
    app_token_file: "{token_file}"
"""
        )
        async with await spool.connect(s.addr) as c:
            await c.publish_batch("orders", [spool.OutMessage(key=k, payload=k) for k in (b"a", b"b")])
        await eventually(lambda: acked == {b"a", b"b"}, 20, "both acked")
