"""The types shared by the client, the publisher and the subscription: what a
publish takes and returns, the handler, the subscription's options and
counters, the defaults, and the connection the publisher and the subscription
are given (Sidecar). The client is on top: it imports the publisher and the
subscription, which import this module and never the client."""

from __future__ import annotations

import asyncio
import datetime
import enum
import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol, TypedDict, Union

import grpc.aio

from spool._message import Message
from spool.v1 import message_pb2, publisher_pb2

__all__ = ["Handler", "Stats", "SubscribeOptions", "Acks", "PublishResult", "OutMessage", "Sidecar"]

DEFAULT_ADDR = "127.0.0.1:7070"
#: The largest delivery frame a client accepts by default: 64 MiB (the largest
#: limits.max_message_bytes spoold allows) plus 1 MiB for the other fields.
DEFAULT_MAX_RECEIVE_BYTES = 65 << 20
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_CONCURRENCY = 64
DEFAULT_DRAIN_TIMEOUT = 30.0



class Sidecar(Protocol):
    """What the publisher and the subscription use of a Client."""

    addr: str
    max_receive_bytes: int

    @property
    def channel(self) -> grpc.aio.Channel: ...

    @property
    def _pub(self) -> Any: ...

    @property
    def _sub(self) -> Any: ...


class Acks(enum.IntEnum):
    """When a publish returns (docs/semantics.md, "Replication")."""

    #: Once committed on a quorum of the partition's replicas (the default).
    ALL = publisher_pb2.ACKS_ALL
    #: Once on the partition leader's disk: faster, and lossy in a cluster.
    LEADER = publisher_pb2.ACKS_LEADER


@dataclass(frozen=True, slots=True)
class PublishResult:
    """Where a published message was stored (it is durable)."""

    id: str
    partition: int
    offset: int


Bytes = bytes | bytearray | memoryview | str


def to_bytes(b: Bytes | None) -> bytes:
    if b is None:
        return b""
    if isinstance(b, str):
        return b.encode("utf-8")
    return bytes(b)


@dataclass(slots=True)
class OutMessage:
    """One message of a batch. ``id`` is optional (the sidecar generates one);
    set it to make a retried publish deduplicable."""

    payload: Bytes
    key: Bytes | None = None
    id: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Scheduled delivery (docs/scheduling.md): delivered no sooner than this
    #: time (timezone-aware), or this many seconds after the sidecar receives
    #: the publish (1 s to 365 days). Set at most one.
    deliver_at: datetime.datetime | None = None
    deliver_after: float | datetime.timedelta | None = None
    #: Keep the scheduled message in its key's order: the key's later
    #: messages wait for it. Only with deliver_at or deliver_after.
    deliver_in_key_order: bool = False

    def proto(self) -> message_pb2.PublishMessage:
        at_ms, after_ms = schedule_ms(self.deliver_at, self.deliver_after)
        return message_pb2.PublishMessage(
            id=self.id,
            key=to_bytes(self.key),
            payload=to_bytes(self.payload),
            headers=dict(self.headers),
            deliver_at_ms=at_ms,
            deliver_after_ms=after_ms,
            deliver_in_key_order=self.deliver_in_key_order,
        )


def schedule_ms(
    deliver_at: datetime.datetime | None, deliver_after: float | datetime.timedelta | None
) -> tuple[int, int]:
    """The publish's deliver_at_ms and deliver_after_ms. A naive datetime is
    refused: its time zone would be a guess. The sidecar checks the rest (the
    horizon, the topic's retention) and answers INVALID_SCHEDULE or
    SCHEDULE_PAST_RETENTION."""
    at_ms = after_ms = 0
    if deliver_at is not None:
        if deliver_at.tzinfo is None or deliver_at.utcoffset() is None:
            raise ValueError(
                "deliver_at has no time zone: pass an aware datetime, for example datetime.now(timezone.utc) + timedelta(hours=1)"
            )
        at_ms = math.ceil(deliver_at.timestamp() * 1000)
    if deliver_after is not None:
        secs = deliver_after.total_seconds() if isinstance(deliver_after, datetime.timedelta) else float(deliver_after)
        after_ms = math.ceil(secs * 1000)
    return at_ms, after_ms


def acks_proto(acks: Acks) -> Any:
    # ALL goes as UNSPECIFIED: the same, and what a sidecar older than the field expects.
    return publisher_pb2.ACKS_LEADER if acks == Acks.LEADER else publisher_pb2.ACKS_UNSPECIFIED


#: A handler takes a Message; it is an async function (or returns an
#: awaitable), or a plain function run in a thread pool with blocking=True.
Handler = Callable[[Message], Union[Awaitable[object], object]]


@dataclass
class Stats:
    """What a subscription did; read it any time (for example for metrics)."""

    delivered: int = 0  # deliveries received
    acked: int = 0
    retried: int = 0  # handler errors included
    dead_lettered: int = 0
    released: int = 0  # handed back unstarted (drain), by the handler, or beyond credit
    dropped: int = 0  # settlements dropped because their stream broke
    extended: int = 0  # lease extensions sent
    settle_errors: int = 0  # settlements the sidecar rejected
    reconnects: int = 0  # streams opened after the first
    handler_errors: int = 0  # handlers that raised something other than an outcome


class SubscribeOptions(TypedDict, total=False):
    """The keyword options of ``Client.subscribe`` and ``Client.subscription``
    (docs/sdk-python.md, "Subscribe options")."""

    #: Handlers running at once (default 64).
    concurrency: int
    #: Deliveries received ahead, beyond those running (default = concurrency).
    prefetch: int | None
    #: Run a plain function in a thread pool of ``concurrency`` threads.
    blocking: bool
    #: Name in the sidecar's logs and metrics, e.g. the pod name.
    consumer_name: str
    #: Recorded in dead-letter entries.
    app_version: str
    #: Seconds the drain waits for running handlers (default 30).
    drain_timeout: float
    #: Reconnect delay in seconds (base, max), exponential with full jitter.
    reconnect_backoff: tuple[float, float]
    #: Setting it drains and returns.
    stop: asyncio.Event | None
    #: Drain on SIGTERM/SIGINT (default False; only from the main thread).
    handle_signals: bool
    #: Counters to read.
    stats: Stats | None
