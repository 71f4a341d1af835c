"""The connection to the local sidecar, and publishing."""

from __future__ import annotations

import asyncio
import datetime
import os
from types import TracebackType
from typing import Any, Generator, Iterable, Mapping, Sequence, Unpack

import grpc
import grpc.aio

from spool._errors import SidecarUnreachableError, SpoolError, from_rpc_error
from spool._publisher import Publisher
from spool._subscribe import run_subscription
from spool._subscription import Subscription
from spool._trace import inject
from spool._types import (
    DEFAULT_ADDR,
    DEFAULT_CONCURRENCY,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_MAX_RECEIVE_BYTES,
    Acks,
    Bytes,
    Handler,
    OutMessage,
    PublishResult,
    Stats,
    SubscribeOptions,
    acks_proto,
    to_bytes,
)
from spool.v1 import message_pb2, publisher_pb2, publisher_pb2_grpc, subscriber_pb2_grpc

__all__ = [
    "Client",
    "Connecting",
    "connect",
    "subscribe",
    "Acks",
    "PublishResult",
    "OutMessage",
    "DEFAULT_ADDR",
    "DEFAULT_MAX_RECEIVE_BYTES",
    "CONNECT_BACKOFF_OPTIONS",
    "KEEPALIVE_OPTIONS",
]

# The channel's connect backoff: how soon gRPC tries the sidecar again after
# a failed connect. gRPC's default grows to 120 s (1 s, x1.6), which kept an
# app away from a restarted sidecar for seconds after it was ready; the
# sidecar is local, so a retry every 500 ms costs nothing. With gRPC's +-20 %
# jitter the retries are at most 600 ms apart, and a subscription resumes as
# soon as the channel is ready (docs/sdk-python.md, "Reconnecting").
# ``grpc.min_reconnect_backoff_ms`` is gRPC core's bound on one connect
# attempt (default 20 s). Client(channel_options=...) with the same keys
# replaces them.
CONNECT_BACKOFF_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 5000),
)


# The channel's keepalive: after ``grpc.keepalive_time_ms`` (10 s) without a
# frame from the sidecar gRPC pings it, and closes the connection when the
# ping is not answered within 3 s (``grpc.http2.ping_timeout_ms``, 1 min by
# default: in grpcio 1.85 ``grpc.keepalive_timeout_ms`` alone closed nothing
# in 40 s), with or without a call in progress,
# and with no cap on pings between data frames:
# an app whose connection to spoold crosses a network notices a cut within
# 13 s instead of waiting out TCP's retransmissions, and a subscription
# reconnects (docs/sdk-python.md, "Noticing a cut connection"). spoold
# permits pings every 5 s. Client(channel_options=...) with the same keys
# replaces them.
KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 3_000),
    ("grpc.http2.ping_timeout_ms", 3_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


def resolve_addr(addr: str | None) -> str:
    """An empty address means $SPOOL_ADDR, else 127.0.0.1:7070."""
    return addr or os.environ.get("SPOOL_ADDR") or DEFAULT_ADDR


class Client:
    """A connection to the local sidecar; one per process is enough.

    ``addr`` is ``host:port`` or ``unix:///path``; None means $SPOOL_ADDR,
    else 127.0.0.1:7070. Create it inside a running event loop, or use
    :func:`connect`, which also waits until the sidecar answers.
    """

    def __init__(
        self,
        addr: str | None = None,
        *,
        max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        if not 64 << 10 <= max_receive_bytes <= 1 << 30:
            raise ValueError(
                f"spool: max_receive_bytes={max_receive_bytes}: use {64 << 10}..{1 << 30}, at least the "
                "sidecar's limits.max_message_bytes plus 1 MiB"
            )
        self.addr = resolve_addr(addr)
        self.max_receive_bytes = max_receive_bytes
        # gRPC Python has no per-call receive limit: it is the channel's, and
        # Subscribe states it to the sidecar in Start.max_receive_bytes.
        # Options given by the caller come last, and win.
        opts = [
            ("grpc.max_receive_message_length", max_receive_bytes),
            *CONNECT_BACKOFF_OPTIONS,
            *KEEPALIVE_OPTIONS,
            *channel_options,
        ]
        self._channel = grpc.aio.insecure_channel(self.addr, options=opts)
        self._pub = publisher_pb2_grpc.PublisherServiceStub(self._channel)
        self._sub = subscriber_pb2_grpc.SubscriberServiceStub(self._channel)

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    async def wait_ready(self, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        """Waits until the sidecar answers, so a missing sidecar shows at startup."""
        try:
            await asyncio.wait_for(self._channel.channel_ready(), timeout)
        except asyncio.TimeoutError:
            raise SidecarUnreachableError(
                f"spool: no sidecar answering at {self.addr} (nothing answered within {timeout:g}s): is "
                "spoold running there? start it with `spoold --dev`, or point SPOOL_ADDR at it",
                code=grpc.StatusCode.UNAVAILABLE,
            ) from None

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def publish(
        self,
        topic: str,
        payload: Bytes,
        *,
        key: Bytes | None = None,
        id: str = "",
        headers: Mapping[str, str] | None = None,
        acks: Acks = Acks.ALL,
        timeout: float | None = None,
        deliver_at: datetime.datetime | None = None,
        deliver_after: float | datetime.timedelta | None = None,
        deliver_in_key_order: bool = False,
    ) -> PublishResult:
        """Appends one message and returns once it is durable. It carries the
        current OpenTelemetry trace context (headers ``traceparent`` and
        ``tracestate``) unless ``headers`` has a traceparent.

        On an error the message may or may not be stored: publish it again
        with the same ``id``.

        ``deliver_at`` (an aware datetime) or ``deliver_after`` (seconds, or a
        timedelta) schedule the message (docs/scheduling.md): it is stored now
        and delivered no sooner than that time, outside its key's order unless
        ``deliver_in_key_order`` keeps it there.
        """
        m = OutMessage(
            payload=payload,
            key=key,
            id=id,
            headers=inject(headers),
            deliver_at=deliver_at,
            deliver_after=deliver_after,
            deliver_in_key_order=deliver_in_key_order,
        )
        return (await self._publish(topic, [m.proto()], acks, timeout))[0]

    async def publish_batch(
        self,
        topic: str,
        messages: Iterable[OutMessage],
        *,
        acks: Acks = Acks.ALL,
        timeout: float | None = None,
    ) -> list[PublishResult]:
        """Appends messages in one call (at most 10,000 by default); one result
        per message, in order, once all are durable. It fails or succeeds as a
        whole; after a failure some may be stored, so retry with the same ids."""
        pms = [m.proto() for m in messages]
        for pm in pms:  # the caller's trace context (pm.headers is a copy)
            traced = inject(pm.headers)
            pm.headers.clear()
            pm.headers.update(traced)
        if not pms:
            return []
        return await self._publish(topic, pms, acks, timeout)

    async def _publish(
        self, topic: str, msgs: list[message_pb2.PublishMessage], acks: Acks, timeout: float | None
    ) -> list[PublishResult]:
        if not topic:
            raise SpoolError("spool: publish: topic is empty: name the topic to publish to", reason="TOPIC_REQUIRED")
        req = publisher_pb2.PublishRequest(topic=topic, messages=msgs, acks=acks_proto(acks))
        try:
            resp = await self._pub.Publish(req, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e, f"publish to {topic!r}", self.addr) from None
        if len(resp.results) != len(msgs):
            raise SpoolError(
                f"spool: publish to {topic!r}: sidecar answered {len(resp.results)} results for {len(msgs)} "
                "messages: the sidecar and SDK disagree on the protocol; upgrade them together"
            )
        return [PublishResult(r.id, r.partition, r.offset) for r in resp.results]

    async def cancel_scheduled(
        self,
        topic: str,
        id: str,
        *,
        at: PublishResult | None = None,
        key: Bytes | None = None,
        timeout: float | None = None,
    ) -> None:
        """Cancels the scheduled message ``id`` of ``topic`` before its time
        (docs/scheduling.md): a group that reads the cancel before the message
        is due does not deliver it. ``at`` (the message's PublishResult) lets
        the sidecar read that one record; ``key`` narrows its search to the
        key's partition; without either it searches the whole topic. Raises
        NotFoundError (UNKNOWN_SCHEDULED_MESSAGE) or FailedPreconditionError
        (SCHEDULE_DUE). Cancelling twice is not an error."""
        req = publisher_pb2.CancelScheduledRequest(topic=topic, id=id, key=to_bytes(key))
        if at is not None:
            req.partition, req.offset = at.partition, at.offset
        try:
            await self._pub.CancelScheduled(req, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e, f"cancel scheduled {id!r} of {topic!r}", self.addr) from None

    def publisher(self, topic: str, *, max_in_flight: int = 1024, close_timeout: float = 30.0) -> Publisher:
        """A pipelined publisher to ``topic`` over one PublishStream."""
        return Publisher(self, topic, max_in_flight=max_in_flight, close_timeout=close_timeout)

    async def subscribe(
        self, group: str, topics: Sequence[str], handler: Handler, **options: Unpack[SubscribeOptions]
    ) -> None:
        """Consumes ``topics`` as ``group``, calling ``handler`` for each
        message, until stopped; see :func:`spool.subscribe` and
        :class:`spool.SubscribeOptions` for the options."""
        await run_subscription(self, group, topics, handler, **options)

    def subscription(self, group: str, topics: Sequence[str], **options: Unpack[SubscribeOptions]) -> Subscription:
        """The messages of ``topics`` for ``group`` as an async iterator, to
        settle with ``m.ack()`` / ``m.nack(outcome)``; use it in ``async with``.
        See :class:`spool.Subscription`."""
        return Subscription(self, group, topics, options)


class Connecting:
    """What :func:`connect` returns: ``await`` it for a :class:`Client`, or
    use it directly in ``async with`` (the client is closed at the end)."""

    def __init__(self, addr: str | None, timeout: float, max_receive_bytes: int) -> None:
        self._args = (addr, timeout, max_receive_bytes)
        self._client: Client | None = None

    async def _open(self) -> Client:
        addr, timeout, max_receive_bytes = self._args
        c = Client(addr, max_receive_bytes=max_receive_bytes)
        try:
            await c.wait_ready(timeout)
        except BaseException:
            await c.close()
            raise
        return c

    def __await__(self) -> Generator[Any, None, Client]:
        return self._open().__await__()

    async def __aenter__(self) -> Client:
        self._client = await self._open()
        return self._client

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._client is not None:
            await self._client.close()


def connect(
    addr: str | None = None,
    *,
    timeout: float = DEFAULT_CONNECT_TIMEOUT,
    max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES,
) -> Connecting:
    """Opens a Client and waits (up to ``timeout`` seconds) until the sidecar
    answers: ``async with spool.connect() as client:`` (closed at the end), or
    ``client = await spool.connect()``."""
    return Connecting(addr, timeout, max_receive_bytes)


async def subscribe(
    group: str,
    topics: Sequence[str],
    handler: Handler,
    *,
    addr: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    prefetch: int | None = None,
    blocking: bool = False,
    consumer_name: str = "",
    app_version: str = "",
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
    reconnect_backoff: tuple[float, float] = (0.1, 5.0),
    max_receive_bytes: int = DEFAULT_MAX_RECEIVE_BYTES,
    stop: asyncio.Event | None = None,
    handle_signals: bool = False,
    stats: Stats | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
) -> None:
    """Consumes ``topics`` (empty: every topic of the group) as consumer group
    ``group``, calling ``handler`` for each message, until ``stop`` is set (or
    SIGTERM/SIGINT arrives, with ``handle_signals=True``: opt-in, since the
    process's signals are the application's). It then drains: asks for no
    more messages, hands back those received but not started, waits for
    running handlers (up to ``drain_timeout`` seconds), sends their outcomes
    and returns.

    Returning normally acks; raise (or return) :class:`Retry`,
    :class:`RetryDownstream`, :class:`DeadLetter` or :class:`Release` for
    the other outcomes; any other exception retries with its text.

    When the stream breaks, it reconnects with exponential backoff and full
    jitter, forever. It raises only for an invalid call, a subscription the
    sidecar refuses for good (unknown group or topic), a delivery frame above
    the receive limit, or handlers that ignored the drain timeout.
    """
    client = await connect(addr, timeout=connect_timeout, max_receive_bytes=max_receive_bytes)
    try:
        await run_subscription(
            client,
            group,
            topics,
            handler,
            concurrency=concurrency,
            prefetch=prefetch,
            blocking=blocking,
            consumer_name=consumer_name,
            app_version=app_version,
            drain_timeout=drain_timeout,
            reconnect_backoff=reconnect_backoff,
            stop=stop,
            handle_signals=handle_signals,
            stats=stats,
        )
    finally:
        await client.close()
