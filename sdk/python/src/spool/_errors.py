"""Errors: every status spoold sends carries a google.rpc.ErrorInfo with a
stable reason (docs/errors.md). SpoolError exposes it; subclasses name the
reasons an application handles on purpose.

A status without a reason was made by gRPC on this side (nothing answered at
the address, a frame above the receive limit): that is how the SDK tells "the
sidecar said no" from "nothing answered".
"""

from __future__ import annotations

from typing import Mapping

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

__all__ = [
    "SpoolError",
    "InvalidArgumentError",
    "MessageTooLargeError",
    "NotFoundError",
    "UnknownTopicError",
    "UnknownGroupError",
    "UnknownSubscriptionError",
    "FailedPreconditionError",
    "UnavailableError",
    "SidecarUnreachableError",
    "DiskFullError",
    "OutcomeUnknownError",
    "FrameTooLargeError",
    "DrainError",
]

DOMAIN = "spool.dev"

# Reasons for which sending the same request again can succeed
# (sidecar/apierr Reason.Retryable, docs/errors.md).
RETRYABLE_REASONS = frozenset(
    {
        "DISK_FULL",
        "SHUTTING_DOWN",
        "NOT_LEADER",
        "LEDGER_UNAVAILABLE",
        "NO_LEADER",
        "TOPIC_NOT_PLACED",
        "OUTCOME_UNKNOWN",
        "DEADLINE_EXCEEDED",
    }
)


class SpoolError(Exception):
    """An error of the sidecar or of the connection to it.

    reason is the sidecar's ErrorInfo reason ("" when gRPC on this side made
    the status: nothing answered, for example); code is the gRPC status code;
    details is the sidecar's own message; metadata is ErrorInfo's metadata
    (``index`` of the message of a batch, ``limit``).
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str = "",
        code: grpc.StatusCode | None = None,
        details: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = code
        self.details = details
        self.metadata: dict[str, str] = dict(metadata or {})

    @property
    def retryable(self) -> bool:
        """Whether sending the same request again (same message ids) can succeed."""
        if self.reason:
            return self.reason in RETRYABLE_REASONS
        return self.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class InvalidArgumentError(SpoolError):
    """The request breaks a rule or a limit (INVALID_ARGUMENT): fix it, do not retry it."""


class MessageTooLargeError(InvalidArgumentError):
    """MESSAGE_TOO_LARGE: key + payload + headers over limits.max_message_bytes."""


class NotFoundError(SpoolError):
    """A topic, group or subscription spoold's config does not declare (NOT_FOUND)."""


class UnknownTopicError(NotFoundError):
    """UNKNOWN_TOPIC: declare the topic under ``topics`` in spoold's config, or fix the name."""


class UnknownGroupError(NotFoundError):
    """UNKNOWN_GROUP: no subscription of spoold's config has this group."""


class UnknownSubscriptionError(NotFoundError):
    """UNKNOWN_SUBSCRIPTION: the group does not subscribe to this topic."""


class FailedPreconditionError(SpoolError):
    """A valid request the sidecar's state does not allow (FAILED_PRECONDITION)."""


class UnavailableError(SpoolError):
    """The sidecar cannot do it now (UNAVAILABLE with a reason): retry later, same ids."""


class SidecarUnreachableError(UnavailableError):
    """Nothing answered at the address (UNAVAILABLE without a reason): is spoold running?"""


class DiskFullError(SpoolError):
    """DISK_FULL: nothing of the request is stored; retry with the same ids once space returns."""


class OutcomeUnknownError(SpoolError):
    """OUTCOME_UNKNOWN: the publish may or may not be stored; retry with the same ids."""


class FrameTooLargeError(SpoolError):
    """A delivery frame above this client's receive limit: reconnecting would get it again."""


class DrainError(SpoolError):
    """Handlers did not return after the drain timeout cancelled them."""


_BY_REASON: dict[str, type[SpoolError]] = {
    "MESSAGE_TOO_LARGE": MessageTooLargeError,
    "UNKNOWN_TOPIC": UnknownTopicError,
    "UNKNOWN_GROUP": UnknownGroupError,
    "UNKNOWN_SUBSCRIPTION": UnknownSubscriptionError,
    "DISK_FULL": DiskFullError,
    "OUTCOME_UNKNOWN": OutcomeUnknownError,
}

_BY_CODE: dict[grpc.StatusCode, type[SpoolError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
}

_CODE_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def error_class(reason: str, code: grpc.StatusCode | None) -> type[SpoolError]:
    """The most specific SpoolError subclass for a reason and code."""
    if reason in _BY_REASON:
        return _BY_REASON[reason]
    if code is grpc.StatusCode.UNAVAILABLE and not reason:
        return SidecarUnreachableError
    if code is not None and code in _BY_CODE:
        return _BY_CODE[code]
    return SpoolError


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo of a gRPC error (sync or aio), or None."""
    try:
        st = rpc_status.from_call(err)  # type: ignore[arg-type]
    except (ValueError, AttributeError):
        return None  # trailer disagrees with the call, or not a call
    if st is None:
        return None
    for detail in st.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None


def status_parts(err: grpc.RpcError) -> tuple[grpc.StatusCode | None, str]:
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    return code, details or ""


def reason_of(err: BaseException) -> str:
    if isinstance(err, SpoolError):
        return err.reason
    if isinstance(err, grpc.RpcError):
        info = error_info(err)
        return info.reason if info is not None else ""
    return ""


def from_rpc_error(err: grpc.RpcError, what: str, addr: str) -> SpoolError:
    """A SpoolError that says what failed, who answered and what to do.

    what names the operation (``publish to "orders"``).
    """
    code, details = status_parts(err)
    info = error_info(err)
    reason = info.reason if info is not None else ""
    metadata = dict(info.metadata) if info is not None else {}
    cls = error_class(reason, code)
    status = f"{code.name if code else 'UNKNOWN'}: {details}"
    if code is grpc.StatusCode.UNAVAILABLE and not reason:
        msg = (
            f"spool: {what}: no sidecar answering at {addr} ({status}): is spoold running there? "
            "start it with `spoold --dev`, or point SPOOL_ADDR at it; when publishing, retry "
            "with the same message ids"
        )
    elif code is grpc.StatusCode.UNAVAILABLE or reason in RETRYABLE_REASONS:
        msg = f"spool: {what}: the sidecar at {addr} cannot do it now ({reason}): {status}: retry later with the same message ids"
    elif code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        msg = f"spool: {what}: {status}: the message may or may not be stored; retry with the same message ids"
    elif reason:
        msg = f"spool: {what}: the sidecar refused it ({reason}): {details}"
    else:
        msg = f"spool: {what}: {status}"
    return cls(msg, reason=reason, code=code, details=details, metadata=metadata)


def from_inband(code: int, reason: str, message: str, what: str) -> SpoolError:
    """A SpoolError from a PublishStreamResponse.error (answered in band)."""
    c = _CODE_BY_NUMBER.get(code)
    cls = error_class(reason, c)
    if cls is SidecarUnreachableError:
        cls = UnavailableError  # the sidecar answered
    return cls(f"spool: {what}: the sidecar refused it ({reason}): {message}", reason=reason, code=c, details=message)
