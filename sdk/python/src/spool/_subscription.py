"""A subscription read with ``async for``, beside the handler form.

It is the handler form underneath: the handler it gives to the subscription
hands each message to the iterator and waits until the application settles
it (``m.ack()``, ``m.nack(...)``). So credit, lease extension (a message is
extended until it is settled), reconnects and the drain are the same. What
the application has not settled when it leaves ``async with`` is released:
delivered again, no attempt counted.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Sequence

from spool._message import Message
from spool._outcome import Release
from spool._subscribe import run_subscription
from spool._types import Sidecar, SubscribeOptions


__all__ = ["Subscription"]


class Subscription:
    """Messages of ``topics`` for consumer group ``group``, one at a time::

        async with client.subscription("billing", ["orders"], concurrency=8) as sub:
            async for m in sub:
                try:
                    await charge(m)
                except BadOrder as e:
                    m.nack(spool.DeadLetter(str(e)))
                else:
                    m.ack()

    Up to ``concurrency`` messages are handed out unsettled at once (settle
    them from other tasks to work on several); ``prefetch`` more wait
    received. Iteration ends when ``stop`` is set or (``handle_signals=True``)
    SIGTERM/SIGINT arrives; leaving ``async with`` drains: messages not
    settled are released, running settlements are sent.
    """

    def __init__(self, client: Sidecar, group: str, topics: Sequence[str], options: SubscribeOptions) -> None:
        if options.get("blocking"):
            raise TypeError("spool: subscription: blocking=True is for handlers; the async for loop runs in your task")
        self._client = client
        self._group = group
        self._topics = list(topics)
        self._options = options
        self._stop = options.get("stop") or asyncio.Event()
        self._ready: asyncio.Queue[tuple[Message, asyncio.Future[object]]] = asyncio.Queue()
        self._out: set[asyncio.Future[object]] = set()  # handed out, not settled
        self._closing = False  # hand out no more
        self._exiting = False  # the application left `async with`
        self._draining = False
        self._task: asyncio.Task[None] | None = None
        self._stop_wait: asyncio.Task[bool] | None = None

    async def __aenter__(self) -> Subscription:
        opts: SubscribeOptions = {**self._options, "stop": self._stop}
        self._task = asyncio.get_running_loop().create_task(
            run_subscription(self._client, self._group, self._topics, self._handle, on_drain=self._on_drain, **opts)
        )
        self._stop_wait = asyncio.get_running_loop().create_task(self._stop.wait())
        self._stop_wait.add_done_callback(lambda _: self._close_queue())
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._exiting = True
        if self._draining:
            self._release_out()
        # else the drain releases them, once it grants no more credit: a
        # release sent before would hand the message straight back to us.
        self._stop.set()
        assert self._task is not None and self._stop_wait is not None
        try:
            await self._task
        except Exception:
            if e is None:
                raise  # the subscription's own error, when the body raised none
        finally:
            self._stop_wait.cancel()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        if self._task is None:
            raise RuntimeError("spool: iterate a subscription inside `async with client.subscription(...) as sub`")
        while True:
            if self._closing or self._task.done():
                if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
                    raise self._task.exception()  # type: ignore[misc]
                raise StopAsyncIteration
            try:
                m, fut = self._ready.get_nowait()
            except asyncio.QueueEmpty:
                get = asyncio.get_running_loop().create_task(self._ready.get())
                assert self._stop_wait is not None
                await asyncio.wait({get, self._task, self._stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not get.done():
                    get.cancel()
                    continue
                m, fut = get.result()
            if fut.done():
                continue  # its stream broke meanwhile: the sidecar took it back
            if self._closing:
                _resolve(fut, Release())
                continue
            self._out.add(fut)
            fut.add_done_callback(self._out.discard)
            return m

    async def _handle(self, m: Message) -> object:
        if self._closing:
            return Release()
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        m._settle = lambda result: _resolve(fut, result)
        self._ready.put_nowait((m, fut))
        return await fut

    def _on_drain(self) -> None:
        self._draining = True
        self._close_queue()
        if self._exiting:
            self._release_out()

    def _release_out(self) -> None:
        for fut in list(self._out):
            _resolve(fut, Release())

    def _close_queue(self) -> None:
        """No more messages out: those waiting are released."""
        self._closing = True
        while True:
            try:
                _, fut = self._ready.get_nowait()
            except asyncio.QueueEmpty:
                return
            _resolve(fut, Release())


def _resolve(fut: asyncio.Future[object], result: object) -> None:
    if not fut.done():  # settled already, or its handler was cancelled (stream lost)
        fut.set_result(result)
