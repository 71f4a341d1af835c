"""W3C trace context through messages, with an in-memory span exporter.

The app's OpenTelemetry SDK is the process-global provider (set once here):
publishing inside a span carries its context; the handler's span, in stream
and in callback mode, has the publisher's trace id and span as parent.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spool
from conftest import orders_config
from harness import eventually, free_port

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)  # once per process: the app's SDK
    return _EXPORTER


def _check_handler_span(exporter: InMemorySpanExporter, parent: trace.Span, handled: dict[str, Any], payload: str) -> None:
    sc = handled[payload]
    spans = [s for s in exporter.get_finished_spans() if s.context.span_id == sc.span_id]
    assert spans, f"the handler's span {sc.span_id:x} was not recorded"
    s = spans[0]
    psc = parent.get_span_context()
    assert s.context.trace_id == psc.trace_id, "the handler's span is in another trace than the publisher's"
    assert s.parent is not None and s.parent.span_id == psc.span_id and s.parent.is_remote, "its parent is not the publisher's span"
    assert s.name == "orders process" and s.kind == trace.SpanKind.CONSUMER
    a = dict(s.attributes or {})
    assert a["messaging.system"] == "spool" and a["messaging.destination.name"] == "orders"
    assert a["messaging.message.id"] and a["messaging.spool.attempt"] == 1 and a["messaging.spool.outcome"] == "ack"


async def test_trace_context_stream(start_spoold: Any, exporter: InMemorySpanExporter) -> None:
    s = start_spoold(orders_config())
    tracer = trace.get_tracer("checkout")
    own = "00-11111111111111111111111111111111-2222222222222222-01"
    async with await spool.connect(s.addr) as c:
        with tracer.start_as_current_span("checkout") as parent:
            await c.publish("orders", b"traced", key=b"k", headers={"schema": "v2"})
            await c.publish("orders", b"own", key=b"k", headers={"traceparent": own})
            async with c.publisher("orders") as p:
                await (await p.publish(b"piped", key=b"k"))
        handled: dict[str, Any] = {}
        headers: dict[str, dict[str, str]] = {}
        stop = asyncio.Event()

        async def handle(m: spool.Message) -> None:
            handled[m.payload.decode()] = trace.get_current_span().get_span_context()
            headers[m.payload.decode()] = dict(m.headers)

        task = asyncio.create_task(spool.subscribe("workers", ["orders"], handle, addr=s.addr, stop=stop, handle_signals=False))
        await eventually(lambda: len(handled) == 3, 20, "three messages handled")
        stop.set()
        await task
    _check_handler_span(exporter, parent, handled, "traced")
    _check_handler_span(exporter, parent, handled, "piped")
    assert headers["traced"]["schema"] == "v2"
    assert headers["own"]["traceparent"] == own, "the app's own traceparent was overwritten"
    assert f"{handled['own'].trace_id:032x}" == "11111111111111111111111111111111"


async def test_trace_context_callback(start_spoold: Any, exporter: InMemorySpanExporter) -> None:
    handled: dict[str, Any] = {}

    def handle(m: spool.Message) -> None:  # blocking: runs in a thread, in the span's context
        handled[m.payload.decode()] = trace.get_current_span().get_span_context()

    port = free_port()
    async with spool.HandlerServer(handle, f"127.0.0.1:{port}", blocking=True):
        s = start_spoold(
            f"""
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: mailer
    delivery: callback
    app_address: "127.0.0.1:{port}"
"""
        )
        async with await spool.connect(s.addr) as c:
            with trace.get_tracer("checkout").start_as_current_span("checkout") as parent:
                await c.publish_batch("orders", [spool.OutMessage(payload=b"traced", key=b"k")])
        await eventually(lambda: "traced" in handled, 20, "handled by the callback")
    _check_handler_span(exporter, parent, handled, "traced")
