package spool

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Trace context through messages (docs/protocol.md, "Trace context"): a
// publish carries the caller's W3C trace context in the message headers
// traceparent and tracestate, and each handler runs in a consumer span
// continued from them. The SDK uses only the OpenTelemetry API: without an
// SDK installed (otel.SetTracerProvider) the spans are no-ops, and the
// propagator is always W3C TraceContext, whatever global propagator the app
// set, so that every Spool SDK reads what the others write.

// Header names of the W3C trace context carried by a message.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// tracerName is the instrumentation scope of the SDK's spans.
const tracerName = "github.com/spoolmq/spool/sdk/go"

// Attribute keys of the handler's span (OpenTelemetry messaging semantic
// conventions, plus Spool's own under messaging.spool.*).
const (
	attrSystem      = attribute.Key("messaging.system")
	attrOperation   = attribute.Key("messaging.operation.type")
	attrDestination = attribute.Key("messaging.destination.name")
	attrPartition   = attribute.Key("messaging.destination.partition.id")
	attrGroup       = attribute.Key("messaging.consumer.group.name")
	attrMessageID   = attribute.Key("messaging.message.id")
	attrAttempt     = attribute.Key("messaging.spool.attempt")
	attrOffset      = attribute.Key("messaging.spool.offset")
	attrOutcome     = attribute.Key("messaging.spool.outcome")
)

// injectTrace returns h with the trace context of ctx added, copying h
// (the caller's map is never changed) only when something is added. It adds
// nothing when ctx has no valid span context, or when h already has a
// traceparent (any case): a header the application set itself wins.
func injectTrace(ctx context.Context, h map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() || hasTraceparent(h) {
		return h
	}
	out := make(map[string]string, len(h)+2)
	for k, v := range h {
		out[k] = v
	}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(out))
	return out
}

func hasTraceparent(h map[string]string) bool {
	if len(h) == 0 {
		return false
	}
	if _, ok := h[HeaderTraceparent]; ok {
		return true
	}
	for k := range h {
		if strings.EqualFold(k, HeaderTraceparent) {
			return true
		}
	}
	return false
}

// WithTraceContext makes a Publisher's message carry the trace context of
// ctx (Publisher.Publish takes no ctx; Client.Publish and PublishBatch use
// their own ctx). Without it, a Publisher's messages carry none unless their
// headers have one.
func WithTraceContext(ctx context.Context) PublishOption {
	return func(o *outgoing) { o.m.Headers = injectTrace(ctx, o.m.Headers) }
}

// WithTracerProvider sets where the handler spans go (default: the global
// otel.GetTracerProvider() at the time Subscribe starts, which follows a
// provider set later).
func WithTracerProvider(tp trace.TracerProvider) SubscribeOption {
	return func(c *subscribeConfig) { c.tracerProvider = tp }
}

// handlerTracer starts the span each handler runs in. Its option slices and
// span names are built once.
//
// Without an OpenTelemetry SDK (the global provider before
// otel.SetTracerProvider, or a no-op provider) a span is inert: it records
// nothing and carries only its parent's span context. Starting one still
// allocates a span and a context (~0.4 µs a delivery), so when a delivery's
// span turns out inert the next inertSkip deliveries do without: their
// handler ctx is what the span's would have been (the message's remote span
// context, or the stream's ctx), and the span is the one already in it.
// Then one delivery starts a span again and looks. An app that installs an
// SDK after Subscribe has started gets its handler spans at most inertSkip
// deliveries later; one that installs it first never misses one.
type handlerTracer struct {
	tracer  trace.Tracer
	names   map[string]string // topic -> "<topic> process"
	child   []trace.SpanStartOption
	newRoot []trace.SpanStartOption
	skip    atomic.Int32 // deliveries that may go without starting a span
}

// inertSkip is how many deliveries go without starting a span after one
// found the provider inert.
const inertSkip = 1023

func newHandlerTracer(tp trace.TracerProvider, topics []string) *handlerTracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := &handlerTracer{
		tracer:  tp.Tracer(tracerName),
		names:   make(map[string]string, len(topics)),
		child:   []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)},
		newRoot: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot()},
	}
	for _, topic := range topics {
		t.names[topic] = spanName(topic)
	}
	return t
}

func spanName(topic string) string { return topic + " process" }

// start begins the handler's span: a child of the message's trace context
// when it carries one, else a new root (never a child of whatever span was
// current when Subscribe was called).
func (t *handlerTracer) start(ctx context.Context, m *Message) (context.Context, trace.Span) {
	opts := t.newRoot
	if m.Headers[HeaderTraceparent] != "" {
		pctx := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(m.Headers))
		if sc := trace.SpanContextFromContext(pctx); sc.IsValid() && sc.IsRemote() {
			ctx, opts = pctx, t.child
		}
	}
	if t.skip.Load() > 0 && t.skip.Add(-1) >= 0 {
		return ctx, trace.SpanFromContext(ctx)
	}
	name, ok := t.names[m.Topic]
	if !ok {
		name = spanName(m.Topic)
	}
	parent := trace.SpanContextFromContext(ctx)
	ctx, span := t.tracer.Start(ctx, name, opts...)
	if !span.IsRecording() && span.SpanContext().Equal(parent) {
		t.skip.Store(inertSkip) // inert: see handlerTracer
	}
	if span.IsRecording() {
		span.SetAttributes(
			attrSystem.String("spool"),
			attrOperation.String("process"),
			attrDestination.String(m.Topic),
			attrPartition.String(strconv.Itoa(int(m.Partition))),
			attrGroup.String(m.Group),
			attrMessageID.String(m.ID),
			attrAttempt.Int(m.Attempt),
			attrOffset.Int64(m.Offset),
		)
	}
	return ctx, span
}

// end records the handler's outcome and ends the span.
func (t *handlerTracer) end(span trace.Span, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(outcomeName(err)))
		var rel *ReleaseError
		if err != nil && !errors.As(err, &rel) {
			span.SetStatus(codes.Error, cleanText(err.Error()))
		}
	}
	span.End()
}

// outcomeName is the outcome a handler's result settles with, as the span
// attribute messaging.spool.outcome says it.
func outcomeName(err error) string {
	switch settlementFor(deliveryRef{}, err).outcome {
	case spoolv1.Outcome_OUTCOME_ACK:
		return "ack"
	case spoolv1.Outcome_OUTCOME_RELEASE:
		return "release"
	case spoolv1.Outcome_OUTCOME_DEAD_LETTER:
		return "dead_letter"
	default:
		return "retry"
	}
}
