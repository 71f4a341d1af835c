"""A pipelined publisher over PublishStream."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Mapping

import grpc
import grpc.aio

from spool._errors import SpoolError, from_inband, from_rpc_error
from spool._trace import inject
from spool._types import Acks, Bytes, OutMessage, PublishResult, Sidecar, acks_proto
from spool.v1 import message_pb2, publisher_pb2


__all__ = ["Publisher"]

MAX_BATCH_MESSAGES = 1000  # messages per request (sidecar limit: 10,000)
MAX_BATCH_BYTES = 1 << 20  # key + payload bytes per request


class _Stream:
    """One PublishStream and the requests awaiting an answer."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.waiting: dict[int, list[asyncio.Future[PublishResult]]] = {}
        self.broken = False
        self.recv_task: asyncio.Task[None] | None = None


class Publisher:
    """Pipelines publishes to one topic: :meth:`publish` returns a future at
    once (it waits only while ``max_in_flight`` messages are unconfirmed), and
    messages queued meanwhile go together in one request (at most 1,000
    messages or 1 MiB, one ``acks`` per request).

    If the stream breaks, unconfirmed messages fail (they may or may not be
    stored: publish them again with the same id) and the next publish opens a
    new stream. Close it (or use ``async with``) when done.
    """

    def __init__(self, client: Sidecar, topic: str, *, max_in_flight: int = 1024, close_timeout: float = 30.0) -> None:
        if not topic:
            raise ValueError("spool: publisher: topic is empty: name the topic to publish to")
        self._client = client
        self.topic = topic
        self._max_in_flight = max(1, max_in_flight)
        self._close_timeout = max(0.0, close_timeout)
        self._slots = asyncio.Semaphore(self._max_in_flight)
        self._queue: list[tuple[message_pb2.PublishMessage, Acks, asyncio.Future[PublishResult]]] = []
        self._outstanding: set[asyncio.Future[PublishResult]] = set()
        self._wake = asyncio.Event()
        self._closed = False
        self._stream: _Stream | None = None
        self._seq = 0
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())

    async def __aenter__(self) -> Publisher:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def publish(
        self,
        payload: Bytes,
        *,
        key: Bytes | None = None,
        id: str = "",
        headers: Mapping[str, str] | None = None,
        acks: Acks = Acks.ALL,
    ) -> asyncio.Future[PublishResult]:
        """Queues a message; the returned future resolves once it is durable."""
        if self._closed:
            raise SpoolError(f"spool: publish to {self.topic!r}: publisher closed")
        await self._slots.acquire()
        fut: asyncio.Future[PublishResult] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(self._done)
        self._outstanding.add(fut)
        m = OutMessage(payload=payload, key=key, id=id, headers=inject(headers)).proto()
        self._queue.append((m, acks, fut))
        self._wake.set()
        return fut

    def _done(self, fut: asyncio.Future[PublishResult]) -> None:
        self._outstanding.discard(fut)
        self._slots.release()

    async def close(self) -> None:
        """Waits for unconfirmed messages (at most the close timeout), then
        closes the stream. Raises SpoolError if the timeout cut some off."""
        if self._closed and self._sender.done():
            return
        self._closed = True
        self._wake.set()
        pending = set(self._outstanding)
        timed_out = 0
        if pending:
            _, still = await asyncio.wait(pending, timeout=self._close_timeout)
            timed_out = len(still)
        self._sender.cancel()
        await asyncio.gather(self._sender, return_exceptions=True)
        err = SpoolError(
            f"spool: publish to {self.topic!r}: publisher closed before the sidecar answered; "
            "the message may or may not be stored"
        )
        for _, _, fut in self._queue:
            _fail(fut, err)
        self._queue.clear()
        st = self._stream
        if st is not None:
            if not st.broken:
                try:
                    await st.call.done_writing()
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    pass
            self._break(st, err)
            if st.recv_task is not None:
                await asyncio.gather(st.recv_task, return_exceptions=True)
        if timed_out:
            raise SpoolError(
                f"spool: publisher to {self.topic!r}: {timed_out} messages unconfirmed after the close "
                f"timeout ({self._close_timeout:g}s); they failed and may or may not be stored: publish "
                "them again with the same id, or raise close_timeout"
            )

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0)  # let publishes made right now join this request
            while self._queue:
                n, size = 0, 0
                first_acks = self._queue[0][1]
                while n < len(self._queue) and n < MAX_BATCH_MESSAGES:
                    m, acks, _ = self._queue[n]
                    sz = len(m.key) + len(m.payload)
                    if n > 0 and (size + sz > MAX_BATCH_BYTES or acks != first_acks):
                        break
                    size += sz
                    n += 1
                batch = self._queue[:n]
                del self._queue[:n]
                await self._send_batch(batch, first_acks)

    async def _open(self) -> _Stream:
        call = self._client._pub.PublishStream()
        st = _Stream(call)
        st.recv_task = asyncio.get_running_loop().create_task(self._recv_loop(st))
        self._stream = st
        return st

    async def _send_batch(
        self, batch: list[tuple[message_pb2.PublishMessage, Acks, asyncio.Future[PublishResult]]], acks: Acks
    ) -> None:
        st = self._stream
        if st is None or st.broken:
            st = await self._open()
        self._seq += 1
        seq = self._seq
        st.waiting[seq] = [f for _, _, f in batch]
        req = publisher_pb2.PublishStreamRequest(
            sequence=seq, topic=self.topic, messages=[m for m, _, _ in batch], acks=acks_proto(acks)
        )
        try:
            await st.call.write(req)
        except grpc.aio.AioRpcError as e:
            self._break(st, from_rpc_error(e, f"publish to {self.topic!r}: stream to the sidecar broke", self._client.addr))
        except asyncio.InvalidStateError:
            # The stream has ended; its status is for the receiver, which
            # fails this batch with it (it is registered in st.waiting).
            if st.recv_task is not None:
                await asyncio.gather(st.recv_task, return_exceptions=True)

    async def _recv_loop(self, st: _Stream) -> None:
        what = f"publish to {self.topic!r}"
        try:
            while True:
                resp = await st.call.read()
                if resp is grpc.aio.EOF:
                    self._break(st, SpoolError(f"spool: {what}: the sidecar ended the stream; the message may or may not be stored: publish it again with the same id"))
                    return
                futs = st.waiting.pop(resp.sequence, None)
                if futs is None:
                    continue
                if resp.HasField("error"):
                    e = resp.error
                    err = from_inband(e.code, e.reason, e.message, what)
                    for f in futs:
                        _fail(f, err)
                    continue
                rs = resp.results
                for i, f in enumerate(futs):
                    if i >= len(rs):
                        _fail(f, SpoolError(f"spool: {what}: sidecar answered {len(rs)} results for {len(futs)} messages: upgrade the sidecar and SDK together"))
                    elif not f.done():
                        f.set_result(PublishResult(rs[i].id, rs[i].partition, rs[i].offset))
        except grpc.aio.AioRpcError as e:
            err = from_rpc_error(e, f"{what}: stream to the sidecar broke", self._client.addr)
            err.args = (f"{err.args[0]}: the message may or may not be stored; publish it again with the same id",)
            self._break(st, err)

    def _break(self, st: _Stream, err: SpoolError) -> None:
        if st.broken:
            return
        st.broken = True
        if self._stream is st:
            self._stream = None
        waiting, st.waiting = st.waiting, {}
        st.call.cancel()
        for futs in waiting.values():
            for f in futs:
                _fail(f, err)


def _fail(f: asyncio.Future[PublishResult], err: BaseException) -> None:
    if not f.done():
        f.set_exception(err)
        # A caller that only looks at some results must not get "exception
        # never retrieved" warnings for the others.
        f.add_done_callback(lambda x: x.exception())
