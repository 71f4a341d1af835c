"""Keepalive against a real spoold: a cut connection is noticed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import spool
from conftest import orders_config
from harness import eventually


class CutProxy:
    """Forwards TCP connections to ``target`` until :meth:`cut`: then the
    connections open at that moment stop forwarding both ways without
    closing (what arrives is read and dropped, as a network that loses every
    packet would, past the kernel's acknowledgements). Later connections are
    forwarded as before."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.addr = ""
        self._cuts: list[list[bool]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = "127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        host, port = self.target.rsplit(":", 1)
        ur, uw = await asyncio.open_connection(host, int(port))
        cut = [False]
        self._cuts.append(cut)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(32 << 10):
                    if not cut[0]:
                        dst.write(data)
                        await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                if not cut[0]:  # a cut passes no close either
                    dst.close()

        self._tasks += [asyncio.create_task(pipe(r, uw)), asyncio.create_task(pipe(ur, w))]

    def cut(self) -> None:
        for c in self._cuts:
            c[0] = True

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def test_a_cut_connection_is_noticed_within_the_keepalive(start_spoold: Any) -> None:
    """Through a proxy that stops forwarding without closing, the SDK's
    keepalive (KEEPALIVE_OPTIONS: a ping after 10 s without a frame, 3 s for
    its answer) closes the dead connection and the subscription reconnects
    within 13 s of the cut (before: nothing noticed it)."""
    s = start_spoold(orders_config())
    proxy = CutProxy(s.addr)
    await proxy.start()
    done: set[str] = set()

    async def handle(m: spool.Message) -> None:
        done.add(m.id)

    stop = asyncio.Event()
    stats = spool.Stats()
    client = spool.Client(proxy.addr)
    task = asyncio.create_task(
        client.subscribe("workers", ["orders"], handle, stop=stop, stats=stats, reconnect_backoff=(0.05, 0.5))
    )
    try:
        async with await spool.connect(s.addr) as direct:
            [first] = await direct.publish_batch("orders", [spool.OutMessage(payload=b"before", key="k")])
        await eventually(lambda: first.id in done, 20, "the message published before the cut handled")
        cut = time.monotonic()
        proxy.cut()
        await eventually(lambda: stats.reconnects >= 1, 10 + 3 + 2, "the subscription reconnected after the cut")
        print(f"reconnected {time.monotonic() - cut:.1f} s after the cut")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await client.close()
        await proxy.close()
