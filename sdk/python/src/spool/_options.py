"""The types a subscription is described with: the handler, its options and
its counters. Imported by the client and the subscription; imports neither."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable, TypedDict, Union

from spool._message import Message

__all__ = ["Handler", "Stats", "SubscribeOptions"]

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
