"""The message handed to a handler."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from spool._outcome import Outcome
    from spool.v1 import message_pb2


def _time(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None


_UNSET: object = object()


class Message:
    """One delivery. It belongs to the handler until the handler returns; a
    message from a :class:`spool.Subscription` (``async for``) until
    :meth:`ack` or :meth:`nack`.

    The fields are plain attributes but the three times, which are made into
    ``datetime`` on first use (three ``datetime.fromtimestamp`` per delivery
    were 7 % of the Python consumer's CPU)."""

    __slots__ = (
        "id", "topic", "partition", "offset", "key", "payload", "headers", "attempt", "last_error",
        "fencing_token", "group", "_publish_time", "_first_delivery_time", "_lease_deadline", "_settle",
    )

    #: Message id, stable across redeliveries: dedupe on it.
    id: str
    topic: str
    partition: int
    offset: int
    #: Partitioning key as published (may be empty).
    key: bytes
    #: Message body as published.
    payload: bytes
    #: Application headers as published.
    headers: dict[str, str]
    #: Deliveries to this group so far, 1 on the first.
    attempt: int
    #: Error text of the previous failed attempt ("" on the first).
    last_error: str
    #: Grows strictly with each (re)delivery of the message in its group:
    #: store it with your writes and refuse writes with an older token.
    fencing_token: int
    #: Consumer group of the delivery.
    group: str

    def __init__(
        self,
        id: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes,
        payload: bytes,
        headers: dict[str, str] | None = None,
        publish_time: datetime | None = None,
        first_delivery_time: datetime | None = None,
        lease_deadline: datetime | None = None,
        attempt: int = 1,
        last_error: str = "",
        fencing_token: int = 0,
        group: str = "",
    ) -> None:
        self.id, self.topic, self.partition, self.offset = id, topic, partition, offset
        self.key, self.payload, self.headers = key, payload, {} if headers is None else headers
        self._publish_time: datetime | int | None = publish_time
        self._first_delivery_time: datetime | int | None = first_delivery_time
        self._lease_deadline: datetime | int | None = lease_deadline
        self.attempt, self.last_error, self.fencing_token, self.group = attempt, last_error, fencing_token, group
        # Set by a Subscription: hands the outcome to the SDK.
        self._settle: Callable[[object], None] | None = None

    @property
    def publish_time(self) -> datetime | None:
        """When the message was appended to the log."""
        v = self._publish_time
        if isinstance(v, int):
            v = self._publish_time = _time(v)
        return v

    @publish_time.setter
    def publish_time(self, v: datetime | None) -> None:
        self._publish_time = v

    @property
    def first_delivery_time(self) -> datetime | None:
        """When the message was first delivered to this group."""
        v = self._first_delivery_time
        if isinstance(v, int):
            v = self._first_delivery_time = _time(v)
        return v

    @first_delivery_time.setter
    def first_delivery_time(self, v: datetime | None) -> None:
        self._first_delivery_time = v

    @property
    def lease_deadline(self) -> datetime | None:
        """When this delivery's lease ends as first granted; the SDK extends
        it while the handler runs."""
        v = self._lease_deadline
        if isinstance(v, int):
            v = self._lease_deadline = _time(v)
        return v

    @lease_deadline.setter
    def lease_deadline(self, v: datetime | None) -> None:
        self._lease_deadline = v

    def _fields(self) -> tuple[object, ...]:
        return (
            self.id, self.topic, self.partition, self.offset, self.key, self.payload, self.headers, self.publish_time,
            self.first_delivery_time, self.lease_deadline, self.attempt, self.last_error, self.fencing_token, self.group,
        )

    def __repr__(self) -> str:
        names = ("id", "topic", "partition", "offset", "key", "payload", "headers", "publish_time", "first_delivery_time",
                 "lease_deadline", "attempt", "last_error", "fencing_token", "group")
        return "Message(" + ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields())) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def ack(self) -> None:
        """Done: never delivered to this group again (``async for`` form)."""
        self._settled(None)

    def nack(self, outcome: Outcome | None = None) -> None:
        """Not done (``async for`` form): :class:`spool.Retry` by default, or
        the outcome given (``Retry(after=5)``, ``RetryDownstream(...)``,
        ``DeadLetter("bad schema")``, ``Release()``)."""
        from spool._outcome import Outcome, Retry

        if outcome is not None and not isinstance(outcome, Outcome):
            raise TypeError(f"spool: nack({outcome!r}): pass spool.Retry, RetryDownstream, DeadLetter or Release")
        self._settled(outcome if outcome is not None else Retry(error="nack"))

    def _settled(self, result: object) -> None:
        if self._settle is None:
            raise RuntimeError(
                "spool: ack()/nack() settle the messages of a Subscription (async for m in sub); "
                "a handler returns (ACK) or raises an outcome instead"
            )
        self._settle(result)

    @classmethod
    def from_delivery(cls, d: message_pb2.Delivery) -> Message:
        m = cls(d.message_id, d.topic, d.partition, d.offset, d.key, d.payload, dict(d.headers))
        # Milliseconds, made into datetimes on first use.
        m._publish_time = d.publish_time_ms or None
        m._first_delivery_time = d.first_delivery_time_ms or None
        m._lease_deadline = d.lease_deadline_ms or None
        m.attempt, m.last_error, m.fencing_token, m.group = d.attempt, d.last_error, d.fencing_token, d.group
        return m
