"""Outcomes a handler raises (or returns) to say what happened.

Returning normally (None) acks. ``Retry``, ``RetryDownstream``,
``DeadLetter`` and ``Release`` may be raised or returned; any other
exception retries with its text.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from spool.v1 import message_pb2

__all__ = ["Outcome", "Retry", "RetryDownstream", "DeadLetter", "Release"]

#: Error text and reasons sent to the sidecar are cut to this many bytes.
MAX_ERROR_TEXT_BYTES = 4096


def _seconds(after: float | timedelta | None) -> float:
    if after is None:
        return 0.0
    if isinstance(after, timedelta):
        return after.total_seconds()
    return float(after)


def _text(error: object) -> str:
    if error is None:
        return ""
    if isinstance(error, BaseException):
        return exception_text(error)
    return str(error)


def exception_text(e: BaseException) -> str:
    """The error text of an exception: ``Type: message``."""
    text = str(e)
    name = type(e).__name__
    return f"{name}: {text}" if text else name


class Outcome(Exception):
    """Base of the outcomes a handler can raise or return."""


class Retry(Outcome):
    """Deliver again no sooner than ``after`` (seconds or timedelta; None or 0:
    the subscription's backoff). ``error`` (text or exception) is shown to the
    next attempt as ``Message.last_error``."""

    def __init__(self, after: float | timedelta | None = None, error: object = None) -> None:
        self.after = _seconds(after)
        self.error = _text(error)
        self.downstream = ""
        super().__init__(self._describe())

    def _describe(self) -> str:
        s = "retry"
        if self.downstream:
            s += f" (downstream {self.downstream})"
        if self.after > 0:
            s += f" after {self.after:g}s"
        if self.error:
            s += f": {self.error}"
        return s


class RetryDownstream(Retry):
    """Retry for a failure of a named dependency (for example "email-provider"):
    feeds that downstream's circuit breaker in the sidecar, which pauses the
    subscription while it is open (no attempts burned)."""

    def __init__(self, downstream: str, after: float | timedelta | None = None, error: object = None) -> None:
        super().__init__(after, error)
        self.downstream = downstream
        self.args = (self._describe(),)


class DeadLetter(Outcome):
    """Poison: move the message to the subscription's dead-letter topic now."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"dead letter: {reason}")


class Release(Outcome):
    """Hand the message back as never started: delivered again at once,
    without counting an attempt."""

    def __init__(self) -> None:
        super().__init__("release")


def clean_text(s: str) -> str:
    """Valid UTF-8 (a proto string must be) and at most 4 KiB."""
    b = s.encode("utf-8", "replace")
    if len(b) <= MAX_ERROR_TEXT_BYTES:
        return b.decode("utf-8", "replace")
    return b[:MAX_ERROR_TEXT_BYTES].decode("utf-8", "ignore") + "…"


@dataclass(slots=True)
class Settlement:
    """What a handler's result becomes on the wire."""

    outcome: int
    retry_after_ms: int = 0
    reason: str = ""
    error: str = ""
    downstream: str = ""


def settlement_for(result: object) -> Settlement:
    """Maps a handler's result (its return value or the exception it raised)."""
    if isinstance(result, Release):
        return Settlement(message_pb2.OUTCOME_RELEASE)
    if isinstance(result, DeadLetter):
        return Settlement(message_pb2.OUTCOME_DEAD_LETTER, reason=clean_text(result.reason), error=clean_text(str(result)))
    if isinstance(result, Retry):
        ms = 0
        if result.after > 0:
            ms = min(max(int(result.after * 1000), 1), 2**32 - 1)
        return Settlement(
            message_pb2.OUTCOME_RETRY,
            retry_after_ms=ms,
            error=clean_text(result.error or str(result)),
            downstream=clean_text(result.downstream),
        )
    if isinstance(result, BaseException):
        return Settlement(message_pb2.OUTCOME_RETRY, error=clean_text(exception_text(result)))
    return Settlement(message_pb2.OUTCOME_ACK)
