"""Subscribe: the handler loop over a SubscriberService stream.

One Subscribe call owns ``concurrency`` worker tasks, shared by the
successive streams (sessions) of the call, so the concurrency bound holds
across reconnects. A session has a receiver task, which checks each frame of
deliveries against the credit granted and queues them for the workers, and
a sender task, which coalesces everything queued since its last frame
(settlements, extensions, credit) into one frame. Everything runs on the
event loop; blocking handlers run in a thread pool and hand their result
back to the loop. The protocol is docs/protocol.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import grpc
import grpc.aio

from spool._backoff import Backoff
from spool._errors import DrainError, FrameTooLargeError, SpoolError, from_rpc_error, reason_of
from spool._message import Message
from spool._types import DEFAULT_CONCURRENCY, DEFAULT_DRAIN_TIMEOUT, Handler, Sidecar, Stats
from spool._outcome import Outcome, Retry, Settlement, exception_text, settlement_for
from spool._trace import handler_span, handler_tracer, record_outcome
from spool.v1 import message_pb2, subscriber_pb2

__all__ = ["run_subscription"]

CLOSE_STREAM_TIMEOUT = 5.0  # wait for the sidecar to end the stream after the half-close
ABANDON_GRACE = 1.0  # wait for handlers after cancelling them at the drain timeout
MIN_EXTEND_EVERY = 0.005
MAX_CONCURRENCY = 1 << 16
MAX_CREDIT = 1 << 20

# Codes that reconnecting will not change: a refusal of the request itself.
PERMANENT_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)

log = logging.getLogger("spool")


async def run_subscription(
    client: Sidecar,
    group: str,
    topics: Sequence[str],
    handler: Handler,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    prefetch: int | None = None,
    blocking: bool = False,
    consumer_name: str = "",
    app_version: str = "",
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
    reconnect_backoff: tuple[float, float] = (0.1, 5.0),
    stop: asyncio.Event | None = None,
    handle_signals: bool = False,
    stats: Stats | None = None,
    on_drain: Callable[[], None] | None = None,
) -> None:
    """The subscription on ``client``. ``on_drain`` is called when the drain
    begins, once no more credit is granted (a Subscription releases what it
    holds then)."""
    if not group:
        raise ValueError("spool: subscribe: group is empty: name the consumer group declared in the sidecar's subscriptions")
    if isinstance(topics, str):
        raise TypeError(f"spool: subscribe: topics must be a list of names, not the string {topics!r}: pass [{topics!r}]")
    if not callable(handler):
        raise TypeError("spool: subscribe: handler is not callable: pass an async def handler(message)")
    if blocking and inspect.iscoroutinefunction(handler):
        raise TypeError("spool: subscribe: blocking=True runs the handler in a thread, but it is an async function: drop blocking=True")
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"spool: subscribe: concurrency={concurrency}: use 1..{MAX_CONCURRENCY}")
    pf = concurrency if prefetch is None else max(0, prefetch)
    if concurrency + pf > MAX_CREDIT:
        raise ValueError(f"spool: subscribe: prefetch={prefetch}: concurrency + prefetch must be at most {MAX_CREDIT}")
    if drain_timeout < 0:
        raise ValueError(f"spool: subscribe: drain_timeout={drain_timeout}: use 0 (do not wait) or a positive number of seconds")
    base, mx = reconnect_backoff
    if base <= 0 or mx < base:
        raise ValueError(f"spool: subscribe: reconnect_backoff={reconnect_backoff}: base must be positive and max at least base")

    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    installed: list[signal.Signals] = []
    if handle_signals and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass
    sub = _Subscriber(
        client,
        group,
        list(topics),
        handler,
        concurrency=concurrency,
        credit=concurrency + pf,
        blocking=blocking,
        consumer_name=consumer_name,
        app_version=app_version,
        drain_timeout=drain_timeout,
        backoff=Backoff(base, mx),
        stats=stats if stats is not None else Stats(),
        on_drain=on_drain,
    )
    try:
        await sub.run(stop)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


class _Subscriber:
    def __init__(
        self,
        client: Sidecar,
        group: str,
        topics: list[str],
        handler: Handler,
        *,
        concurrency: int,
        credit: int,
        blocking: bool,
        consumer_name: str,
        app_version: str,
        drain_timeout: float,
        backoff: Backoff,
        stats: Stats,
        on_drain: Callable[[], None] | None,
    ) -> None:
        self.client = client
        self.on_drain = on_drain
        self.group = group
        self.topics = topics
        self.handler = handler
        self.tracer = handler_tracer()
        self.concurrency = concurrency
        self.credit = credit
        self.blocking = blocking
        self.consumer_name = consumer_name
        self.app_version = app_version
        self.drain_timeout = drain_timeout
        self.backoff = backoff
        self.stats = stats
        self.work: asyncio.Queue[tuple[_Session, message_pb2.Delivery, _LeaseKeeper] | None] = asyncio.Queue()
        self.draining = False
        self.running: set[asyncio.Task[Any]] = set()  # workers running a handler
        self.handler_cancels: set[asyncio.Task[Any]] = set()  # of those, the ones whose handler is cancelled
        self.executor = ThreadPoolExecutor(concurrency, thread_name_prefix="spool-handler") if blocking else None
        self.loop = asyncio.get_running_loop()

    async def run(self, stop: asyncio.Event) -> None:
        workers = [self.loop.create_task(self._worker()) for _ in range(self.concurrency)]
        stop_wait = self.loop.create_task(stop.wait())
        live: _Session | None = None
        run_err: BaseException | None = None
        attempt = opened = 0
        try:
            while not stop.is_set():
                err: BaseException | None
                s: _Session | None = None
                try:
                    s = await self._open()
                except grpc.aio.AioRpcError as e:
                    err = e
                else:
                    opened += 1
                    if opened > 1:
                        self.stats.reconnects += 1
                    broken_wait = self.loop.create_task(s.broken.wait())
                    await asyncio.wait({broken_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                    broken_wait.cancel()
                    if stop.is_set() and not s.dead:
                        live = s  # drain through the live stream
                        break
                    err = s.err
                    await s.close()
                    if s.started:
                        attempt = 0
                if isinstance(err, FrameTooLargeError):
                    run_err = err
                    log.error("spool: subscribe stopped: %s", err)
                    break
                if isinstance(err, grpc.aio.AioRpcError) and err.code() in PERMANENT_CODES:
                    e2 = from_rpc_error(err, f"subscribe group {self.group!r}", self.client.addr)
                    e2.args = (f"{e2.args[0]}: check the group and topics against the sidecar's subscriptions",)
                    run_err = e2
                    break
                if stop.is_set():
                    break
                d = self.backoff.next(attempt)
                attempt += 1
                unreachable = isinstance(err, grpc.aio.AioRpcError) and err.code() == grpc.StatusCode.UNAVAILABLE and not reason_of(err)
                if unreachable:
                    msg = "spool: no sidecar answering at %s; reconnecting in %.2fs (is spoold running? deliveries in progress will be redelivered): %s"
                else:
                    msg = "spool: subscribe stream to the sidecar at %s broke; reconnecting in %.2fs (deliveries in progress will be redelivered): %s"
                log.warning(msg, self.client.addr, d, _describe(err))
                await self._wait_reconnect(stop_wait, d, unreachable)
        except asyncio.CancelledError:
            # Cancelled rather than stopped: no drain, but leave nothing running.
            if live is not None:
                await live.close()
            for w in workers:
                w.cancel()
            for t in list(self.running):
                t.cancel()
            stop_wait.cancel()
            self._shutdown_executor()
            raise
        stop_wait.cancel()
        drain_err = await self._drain(live, workers)
        if run_err is not None:
            raise run_err
        if drain_err is not None:
            raise drain_err

    async def _wait_reconnect(self, stop_wait: asyncio.Task[Any], d: float, unreachable: bool) -> None:
        """Waits d seconds before the next attempt, or less: until stop, or,
        when no sidecar answered, until the channel is ready again. The
        backoff paces attempts at a sidecar that does not answer, and one
        that comes back is used as soon as gRPC has connected to it. A
        channel that is ready already (the sidecar answered) waits the full
        d, so that attempts never spin."""
        waits: set[asyncio.Future[Any]] = {stop_wait}
        ready: asyncio.Task[None] | None = None
        channel = self.client.channel
        if unreachable and channel.get_state() != grpc.ChannelConnectivity.READY:
            ready = self.loop.create_task(channel.channel_ready())
            waits.add(ready)
        try:
            await asyncio.wait(waits, timeout=d, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if ready is not None:
                ready.cancel()

    async def _open(self) -> _Session:
        call = self.client._sub.Subscribe()
        first = subscriber_pb2.SubscribeRequest(
            start=subscriber_pb2.Start(
                group=self.group,
                topics=self.topics,
                # What runs plus what is prefetched; the credit enforces the same.
                max_in_flight=self.credit,
                consumer_name=self.consumer_name,
                app_version=self.app_version,
                max_receive_bytes=self.client.max_receive_bytes,
            ),
            credit=self.credit,
        )
        s = _Session(self, call)
        s.available = self.credit  # counted before the write: see _Session.available
        try:
            await call.write(first)
        except asyncio.InvalidStateError:
            call.cancel()
            raise await _status_error(call) from None
        except grpc.aio.AioRpcError:
            call.cancel()
            raise
        s.start()
        return s

    async def _drain(self, live: _Session | None, workers: list[asyncio.Task[None]]) -> BaseException | None:
        self.draining = True
        if live is not None:
            live.stop_credit()
        if self.on_drain is not None:
            self.on_drain()
        self._release_queued()
        for _ in workers:
            self.work.put_nowait(None)
        err: BaseException | None = None
        _, pending = await asyncio.wait(workers, timeout=self.drain_timeout)
        if pending:
            log.warning(
                "spool: drain timeout (%gs) passed with %d handlers running; cancelling them", self.drain_timeout, len(self.running)
            )
            for t in list(self.running):
                self.cancel_handler(t)
            _, pending = await asyncio.wait(pending, timeout=ABANDON_GRACE)
            if pending:
                err = DrainError(
                    f"spool: drain: {len(pending)} handlers still running after the drain timeout cancelled them; they "
                    "were abandoned and their messages will be redelivered when the lease ends: make handlers "
                    "return when cancelled"
                )
                log.error("%s", err)
                for w in pending:
                    w.cancel()
        self._release_queued()
        if live is not None:
            await live.finish()
        self._shutdown_executor()
        return err

    def _shutdown_executor(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    def _release_queued(self) -> None:
        while True:
            try:
                it = self.work.get_nowait()
            except asyncio.QueueEmpty:
                return
            if it is not None:
                it[2].cancel()
                it[0].release(it[1])

    async def _worker(self) -> None:
        while True:
            it = await self.work.get()
            if it is None:
                return
            s, d, keeper = it
            if s.dead:
                keeper.cancel()
                continue  # the stream broke: the sidecar released the delivery already
            if self.draining:
                keeper.cancel()
                s.release(d)
                continue
            await self._process(s, d, keeper)

    async def _process(self, s: _Session, d: message_pb2.Delivery, keeper: _LeaseKeeper) -> None:
        """Runs the handler in this worker's task (a task per message cost
        about a fifth of a delivery's CPU). While it runs the worker is in
        ``running``: cancel_handler cancels the handler, not the worker."""
        ref = keeper.ref
        me = asyncio.current_task()
        assert me is not None
        s.running.add(me)
        self.running.add(me)
        result: object
        try:
            result = await self._call(Message.from_delivery(d))
        except asyncio.CancelledError:
            if me not in self.handler_cancels or me.cancelling() > 1:
                raise  # the worker itself is cancelled
            result = Retry(error="handler cancelled (the lease was lost or the drain timeout passed)")
        finally:
            keeper.cancel()
            s.running.discard(me)
            self.running.discard(me)
            if me in self.handler_cancels:
                self.handler_cancels.discard(me)
                me.uncancel()  # handled here: the worker goes on
        s.settle(ref, settlement_for(result), return_credit=True)

    def cancel_handler(self, worker: asyncio.Task[Any]) -> None:
        """Cancels the handler a worker is running (its lease is lost, or the
        drain timeout passed); the worker goes on to the next delivery."""
        if worker not in self.handler_cancels:
            self.handler_cancels.add(worker)
            worker.cancel()

    async def _call(self, m: Message) -> object:
        with handler_span(m, self.tracer) as span:
            result = await self._call_handler(m)
            st = settlement_for(result)
            record_outcome(span, st.outcome, st.error)
            return result

    async def _call_handler(self, m: Message) -> object:
        try:
            if self.executor is not None:
                # The thread runs in this task's context: the handler's span.
                return await self.loop.run_in_executor(self.executor, contextvars.copy_context().run, self.handler, m)
            r = self.handler(m)
            if inspect.isawaitable(r):
                r = await r
            return r
        except Outcome as o:
            return o
        except Exception as e:
            self.stats.handler_errors += 1
            log.debug("spool: handler failed; the message will be retried: %s", exception_text(e), exc_info=True)
            return e


class _Session:
    """One Subscribe stream."""

    def __init__(self, sub: _Subscriber, call: Any) -> None:
        self.sub = sub
        self.call = call
        self.stats = sub.stats
        self.started = False
        self.visibility_s = 0.0
        # Credit handed to the transport minus deliveries received. Credit
        # queued but not yet written does not count: the sidecar cannot have
        # used it. It is added just before the write, so a delivery sent
        # against that credit is never seen before it is counted.
        self.available = 0
        self.dead = False
        self.err: BaseException | None = None
        self.broken = asyncio.Event()
        self.no_credit = False
        self.closing = False
        self.wake = asyncio.Event()
        self.acks: list[subscriber_pb2.Ack] = []
        self.nacks: list[subscriber_pb2.Nack] = []
        self.extends: list[subscriber_pb2.Extend] = []
        self.pending_credit = 0
        self.running: set[asyncio.Task[Any]] = set()  # workers running a handler of this stream
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = self.sub.loop
        self.tasks = [loop.create_task(self._recv_loop()), loop.create_task(self._send_loop())]

    def fail(self, err: BaseException) -> None:
        """Marks the stream broken: settlements are dropped from now on and
        handlers still running for it are cancelled (their lease is gone)."""
        if self.dead:
            return
        self.dead, self.err = True, err
        self.broken.set()
        for t in list(self.running):
            self.sub.cancel_handler(t)
        self.call.cancel()

    async def close(self) -> None:
        self.fail(SpoolError("closed"))
        current = asyncio.current_task()
        for t in self.tasks:
            if t is not current:
                t.cancel()
        await asyncio.gather(*(t for t in self.tasks if t is not current), return_exceptions=True)

    async def finish(self) -> None:
        """Flushes what is queued, half-closes, waits (bounded) for the sidecar
        to end the stream, then closes."""
        self.closing = True
        self.wake.set()
        try:
            await asyncio.wait_for(self.broken.wait(), CLOSE_STREAM_TIMEOUT)
        except asyncio.TimeoutError:
            log.warning("spool: the sidecar did not end the stream %gs after the drain; closing it", CLOSE_STREAM_TIMEOUT)
        await self.close()

    def stop_credit(self) -> None:
        self.no_credit = True
        self.pending_credit = 0

    def settle(self, ref: message_pb2.DeliveryRef, st: Settlement, *, return_credit: bool) -> None:
        if self.dead:
            self.stats.dropped += 1
            return
        if return_credit and not self.no_credit:
            self.pending_credit += 1
        # An extension of the same delivery still queued would go in the same
        # frame, and the sidecar applies settlements first: it would refuse the
        # extension (NOT_IN_FLIGHT, docs/protocol.md). Extensions are few.
        if self.extends:
            self.extends = [e for e in self.extends if e.ref != ref]
        if st.outcome == message_pb2.OUTCOME_ACK:
            self.acks.append(subscriber_pb2.Ack(ref=ref))
            self.stats.acked += 1
        else:
            self.nacks.append(
                subscriber_pb2.Nack(
                    ref=ref,
                    outcome=st.outcome,  # type: ignore[arg-type]
                    retry_after_ms=st.retry_after_ms,
                    reason=st.reason,
                    error=st.error,
                    downstream=st.downstream,
                )
            )
            if st.outcome == message_pb2.OUTCOME_RETRY:
                self.stats.retried += 1
            elif st.outcome == message_pb2.OUTCOME_DEAD_LETTER:
                self.stats.dead_lettered += 1
            else:
                self.stats.released += 1
        self.wake.set()

    def release(self, d: message_pb2.Delivery) -> None:
        """Hands back a delivery that was never started, without credit."""
        ref = message_pb2.DeliveryRef(topic=d.topic, partition=d.partition, offset=d.offset, fencing_token=d.fencing_token)
        self.settle(ref, Settlement(message_pb2.OUTCOME_RELEASE), return_credit=False)

    def extend(self, ref: message_pb2.DeliveryRef) -> None:
        if self.dead:
            return
        self.extends.append(subscriber_pb2.Extend(ref=ref, extend_by_ms=0))
        self.stats.extended += 1
        self.wake.set()

    async def _recv_loop(self) -> None:
        sub = self.sub
        try:
            while True:
                resp = await self.call.read()
                if resp is grpc.aio.EOF:
                    self.fail(SpoolError("the sidecar ended the stream"))
                    return
                if resp.HasField("started"):
                    self.visibility_s = resp.started.visibility_timeout_ms / 1000
                    self.started = True
                for se in resp.settle_errors:
                    self.stats.settle_errors += 1
                    log.warning(
                        "spool: the sidecar rejected a settlement (the message may be redelivered; handlers should "
                        "be idempotent): %s: %s (topic %s partition %d offset %d fencing token %d)",
                        se.reason, se.message, se.ref.topic, se.ref.partition, se.ref.offset, se.ref.fencing_token,
                    )
                ds = resp.deliveries
                if not ds:
                    continue
                self.stats.delivered += len(ds)
                # The sidecar sent this frame against the credit it had then:
                # take it for the whole frame before any delivery starts.
                within = min(max(self.available, 0), len(ds))
                self.available -= within
                for i, d in enumerate(ds):
                    if i >= within:
                        log.warning(
                            "spool: the sidecar sent more deliveries than the credit granted; handing the excess "
                            "back (topic %s partition %d offset %d)", d.topic, d.partition, d.offset,
                        )
                        self.release(d)
                    elif sub.draining:
                        self.release(d)
                    else:
                        # The lease runs from now, also while the delivery
                        # waits for a worker (prefetched): keep it from here.
                        ref = message_pb2.DeliveryRef(
                            topic=d.topic, partition=d.partition, offset=d.offset, fencing_token=d.fencing_token
                        )
                        sub.work.put_nowait((self, d, _LeaseKeeper(sub.loop, self, ref, d.lease_deadline_ms)))
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and not reason_of(e):
                self.fail(
                    FrameTooLargeError(
                        f"spool: subscribe group {sub.group!r}: the sidecar at {sub.client.addr} sent a delivery frame "
                        f"larger than this client's receive limit of {sub.client.max_receive_bytes} bytes "
                        f"({e.details()}): raise max_receive_bytes above the sidecar's limits.max_message_bytes "
                        "plus 1 MiB; reconnecting would only get the same frame again",
                        code=e.code(),
                    )
                )
            else:
                self.fail(e)
        except asyncio.CancelledError:
            self.fail(SpoolError("the stream was cancelled"))
            raise

    async def _send_loop(self) -> None:
        try:
            while True:
                if not self.closing:
                    await self.wake.wait()
                self.wake.clear()
                # One pass of the loop lets handlers finishing right now join
                # this frame: under load frames carry many settlements.
                await asyncio.sleep(0)
                while not self.dead:
                    if not (self.acks or self.nacks or self.extends or self.pending_credit):
                        break
                    req = subscriber_pb2.SubscribeRequest(
                        acks=self.acks, nacks=self.nacks, extends=self.extends, credit=self.pending_credit
                    )
                    self.available += self.pending_credit  # before the write: see available
                    self.acks, self.nacks, self.extends, self.pending_credit = [], [], [], 0
                    await self.call.write(req)
                if self.dead:
                    return
                if self.closing:
                    await self.call.done_writing()
                    return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # AioRpcError, InvalidStateError: the stream ended
            self.fail(e if isinstance(e, grpc.aio.AioRpcError) else SpoolError(f"send: the stream ended ({e!r})"))


class _LeaseKeeper:
    """Extends a running delivery's lease at 2/3 of it, then every 2/3 of the
    visibility timeout, until cancelled (the handler returned)."""

    __slots__ = ("loop", "s", "ref", "every", "handle")

    def __init__(self, loop: asyncio.AbstractEventLoop, s: _Session, ref: message_pb2.DeliveryRef, deadline_ms: int) -> None:
        self.loop, self.s, self.ref = loop, s, ref
        self.handle: asyncio.TimerHandle | None = None
        vis = s.visibility_s
        if deadline_ms > 0:
            lease = deadline_ms / 1000 - time.time()
            at = max(lease * 2 / 3, 0.0)
            if vis <= 0:
                vis = max(lease, 0.0)  # visibility timeout unknown: assume an extension grants as much again
        elif vis > 0:
            at = vis * 2 / 3
        else:
            return  # no lease information: nothing to extend
        self.every = max(vis * 2 / 3, MIN_EXTEND_EVERY)
        self.handle = loop.call_later(at, self._fire)

    def _fire(self) -> None:
        if self.s.dead:
            return
        self.s.extend(self.ref)
        self.handle = self.loop.call_later(self.every, self._fire)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()


async def _status_error(call: Any) -> grpc.aio.AioRpcError:
    code = await call.code()
    return grpc.aio.AioRpcError(
        code, await call.initial_metadata(), await call.trailing_metadata(), await call.details()
    )


def _describe(err: BaseException | None) -> str:
    if isinstance(err, grpc.aio.AioRpcError):
        r = reason_of(err)
        return f"{err.code().name}{' (' + r + ')' if r else ''}: {err.details()}"
    return str(err)
