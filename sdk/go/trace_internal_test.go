package spool

import (
	"context"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// laterProvider is a provider that records nothing until install: an app
// that calls otel.SetTracerProvider after Subscribe has started.
type laterProvider struct {
	embedded.TracerProvider
	installed atomic.Pointer[sdktrace.TracerProvider]
}

func (p *laterProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &laterTracer{p: p, name: name, opts: opts}
}

type laterTracer struct {
	embedded.Tracer
	p    *laterProvider
	name string
	opts []trace.TracerOption
}

func (t *laterTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if tp := t.p.installed.Load(); tp != nil {
		return tp.Tracer(t.name, t.opts...).Start(ctx, name, opts...)
	}
	return noop.NewTracerProvider().Tracer(t.name).Start(ctx, name, opts...)
}

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Deliveries that go without a span (the provider was found inert) run in
// the ctx the inert span would have given them: the message's remote span
// context, or none.
func TestInertHandlerSpanKeepsTheParent(t *testing.T) {
	tr := newHandlerTracer(noop.NewTracerProvider(), []string{"orders"})
	traced := &Message{Topic: "orders", Headers: map[string]string{HeaderTraceparent: testTraceparent}}
	plain := &Message{Topic: "orders"}
	for i := range 3 { // the first starts a span and finds it inert; the others skip
		ctx, span := tr.start(context.Background(), traced)
		sc := trace.SpanContextFromContext(ctx)
		if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() {
			t.Fatalf("delivery %d: handler ctx span context %v, want the message's remote parent", i, sc)
		}
		if !span.SpanContext().Equal(sc) || span.IsRecording() {
			t.Fatalf("delivery %d: span %v recording %v, want the inert parent", i, span.SpanContext(), span.IsRecording())
		}
		tr.end(span, nil)
		ctx, span = tr.start(context.Background(), plain)
		if trace.SpanContextFromContext(ctx).IsValid() || span.SpanContext().IsValid() {
			t.Fatalf("delivery %d without traceparent: span context %v, want none", i, trace.SpanContextFromContext(ctx))
		}
		tr.end(span, nil)
	}
	if n := tr.skip.Load(); n <= 0 || n > inertSkip {
		t.Fatalf("skip = %d after inert spans, want 1..%d", n, inertSkip)
	}
}

// An SDK installed after deliveries found the provider inert gets handler
// spans within inertSkip+1 deliveries, and then one for every delivery.
func TestHandlerSpansOnceAnSDKIsInstalled(t *testing.T) {
	p := &laterProvider{}
	tr := newHandlerTracer(p, []string{"orders"})
	m := &Message{Topic: "orders"}
	deliver := func(n int) {
		for range n {
			_, span := tr.start(context.Background(), m)
			tr.end(span, nil)
		}
	}
	deliver(10)
	rec := tracetest.NewSpanRecorder()
	p.installed.Store(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	deliver(inertSkip + 1)
	if n := len(rec.Ended()); n == 0 {
		t.Fatalf("no handler span in the %d deliveries after the SDK was installed", inertSkip+1)
	}
	before := len(rec.Ended())
	deliver(100)
	if n := len(rec.Ended()) - before; n != 100 {
		t.Fatalf("%d spans for 100 deliveries with an SDK, want 100", n)
	}
	if n := tr.skip.Load(); n > 0 {
		t.Fatalf("skip = %d with a recording SDK, want ≤ 0", n)
	}
}
