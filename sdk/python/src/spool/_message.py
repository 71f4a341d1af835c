"""The message handed to a handler."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from spool._outcome import Outcome
    from spool.v1 import message_pb2


def _time(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None


@dataclass(slots=True)
class Message:
    """One delivery. It belongs to the handler until the handler returns; a
    message from a :class:`spool.Subscription` (``async for``) until
    :meth:`ack` or :meth:`nack`."""

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
    headers: dict[str, str] = field(default_factory=dict)
    #: When the message was appended to the log.
    publish_time: datetime | None = None
    #: When the message was first delivered to this group.
    first_delivery_time: datetime | None = None
    #: When this delivery's lease ends as first granted; the SDK extends it
    #: while the handler runs.
    lease_deadline: datetime | None = None
    #: Deliveries to this group so far, 1 on the first.
    attempt: int = 1
    #: Error text of the previous failed attempt ("" on the first).
    last_error: str = ""
    #: Grows strictly with each (re)delivery of the message in its group:
    #: store it with your writes and refuse writes with an older token.
    fencing_token: int = 0
    #: Consumer group of the delivery.
    group: str = ""
    # Set by a Subscription: hands the outcome to the SDK.
    _settle: Callable[[object], None] | None = field(default=None, repr=False, compare=False)

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
        return cls(
            id=d.message_id,
            topic=d.topic,
            partition=d.partition,
            offset=d.offset,
            key=d.key,
            payload=d.payload,
            headers=dict(d.headers),
            publish_time=_time(d.publish_time_ms),
            first_delivery_time=_time(d.first_delivery_time_ms),
            lease_deadline=_time(d.lease_deadline_ms),
            attempt=d.attempt,
            last_error=d.last_error,
            fencing_token=d.fencing_token,
            group=d.group,
        )
