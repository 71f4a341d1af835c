"""Spool's Python SDK: consume and publish through the local sidecar (spoold).

    import asyncio, spool

    async def handle(m: spool.Message) -> None:
        print(m.attempt, m.payload)           # return = ACK; raise = RETRY

    asyncio.run(spool.subscribe("demo-app", ["demo"], handle, handle_signals=True))

docs/sdk-python.md is the guide; docs/protocol.md the protocol underneath.
"""

from spool._callback import DEFAULT_HANDLER_ADDRESS, HandlerServer, serve_handler
from spool._client import (
    CONNECT_BACKOFF_OPTIONS,
    KEEPALIVE_OPTIONS,
    DEFAULT_ADDR,
    DEFAULT_MAX_RECEIVE_BYTES,
    Acks,
    Client,
    Connecting,
    OutMessage,
    PublishResult,
    connect,
    subscribe,
)
from spool._errors import (
    DiskFullError,
    DrainError,
    FailedPreconditionError,
    FrameTooLargeError,
    InvalidArgumentError,
    MessageTooLargeError,
    NotFoundError,
    OutcomeUnknownError,
    SidecarUnreachableError,
    SpoolError,
    UnavailableError,
    UnknownGroupError,
    UnknownSubscriptionError,
    UnknownTopicError,
)
from spool._idempotent import IdempotentStats, idempotent
from spool._message import Message
from spool._outcome import DeadLetter, Outcome, Release, Retry, RetryDownstream
from spool._publisher import Publisher
from spool._subscription import Subscription
from spool._types import Handler, Stats, SubscribeOptions
from spool._version import VERSION

__all__ = [
    "Acks",
    "Client",
    "Connecting",
    "CONNECT_BACKOFF_OPTIONS",
    "KEEPALIVE_OPTIONS",
    "DEFAULT_ADDR",
    "DEFAULT_MAX_RECEIVE_BYTES",
    "DeadLetter",
    "DiskFullError",
    "DrainError",
    "FailedPreconditionError",
    "FrameTooLargeError",
    "Handler",
    "HandlerServer",
    "IdempotentStats",
    "InvalidArgumentError",
    "Message",
    "MessageTooLargeError",
    "NotFoundError",
    "OutMessage",
    "Outcome",
    "OutcomeUnknownError",
    "PublishResult",
    "Publisher",
    "Release",
    "Retry",
    "RetryDownstream",
    "SidecarUnreachableError",
    "SpoolError",
    "Stats",
    "SubscribeOptions",
    "Subscription",
    "UnavailableError",
    "UnknownGroupError",
    "UnknownSubscriptionError",
    "UnknownTopicError",
    "connect",
    "idempotent",
    "serve_handler",
    "DEFAULT_HANDLER_ADDRESS",
    "subscribe",
]

__version__ = VERSION
