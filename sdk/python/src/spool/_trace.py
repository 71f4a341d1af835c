"""W3C trace context through messages (docs/protocol.md, "Trace context").

A publish carries the caller's OpenTelemetry context in the message headers
``traceparent`` and ``tracestate``; each handler runs in a consumer span
"<topic> process" continued from them. Only the OpenTelemetry API is used:
without an SDK installed the span is a no-op, and the handler still runs in
the message's context (so a publish from the handler continues the trace).
The propagator is W3C TraceContext itself, whatever global propagator the
app set, so every Spool SDK reads what the others write.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.status import Status, StatusCode

if TYPE_CHECKING:
    from ._message import Message

__all__ = ["HEADER_TRACEPARENT", "HEADER_TRACESTATE", "inject", "handler_span"]

HEADER_TRACEPARENT = "traceparent"
HEADER_TRACESTATE = "tracestate"
_SCOPE = "spool"
_PROPAGATOR = TraceContextTextMapPropagator()


def inject(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Returns a copy of ``headers`` with the current trace context added,
    unless there is none or the headers have a traceparent (any case): a
    header the application set itself wins."""
    out = dict(headers or {})
    if not trace.get_current_span().get_span_context().is_valid:
        return out
    if any(k.lower() == HEADER_TRACEPARENT for k in out):
        return out
    _PROPAGATOR.inject(out)
    return out


def outcome_name(outcome: int) -> str:
    from .v1 import message_pb2

    return {
        message_pb2.OUTCOME_ACK: "ack",
        message_pb2.OUTCOME_RETRY: "retry",
        message_pb2.OUTCOME_DEAD_LETTER: "dead_letter",
        message_pb2.OUTCOME_RELEASE: "release",
    }.get(outcome, "retry")


def handler_tracer() -> trace.Tracer:
    """The tracer of handler spans, taken once per subscription or handler
    server (looking it up per message was 9% of a busy consumer's CPU). With
    the global provider it is a proxy: a provider the app sets later is
    still used."""
    return trace.get_tracer(_SCOPE)


@contextmanager
def handler_span(m: Message, tracer: trace.Tracer) -> Iterator[trace.Span]:
    """Runs the body in the consumer span of ``m`` (a child of its trace
    context, a new root without one), made current. ``record(outcome, error)``
    on the yielded span's holder sets the outcome."""
    parent = otel_context.Context()  # never a child of whatever was current
    if m.headers.get(HEADER_TRACEPARENT):
        parent = _PROPAGATOR.extract(m.headers, context=parent)
    span = tracer.start_span(
        f"{m.topic} process",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": "spool",
            "messaging.operation.type": "process",
            "messaging.destination.name": m.topic,
            "messaging.destination.partition.id": str(m.partition),
            "messaging.consumer.group.name": m.group,
            "messaging.message.id": m.id,
            "messaging.spool.attempt": m.attempt,
            "messaging.spool.offset": m.offset,
        },
    )
    # A no-op tracer returns an invalid span: keep the message's context
    # current then, so the trace still propagates without an SDK.
    ctx = trace.set_span_in_context(span, parent) if span.get_span_context().is_valid else parent
    token = otel_context.attach(ctx)
    try:
        yield span
    finally:
        otel_context.detach(token)
        span.end()


def record_outcome(span: trace.Span, outcome: int, error: str) -> None:
    if not span.is_recording():
        return
    name = outcome_name(outcome)
    span.set_attribute("messaging.spool.outcome", name)
    if name in ("retry", "dead_letter"):
        span.set_status(Status(StatusCode.ERROR, error))
