package spool_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

// Every way to publish carries the caller's trace context, never changes
// the caller's header map, never overwrites a traceparent the app set, and
// adds nothing outside a span. (The trace through a real spoold, to the
// handler's span: sidecar/e2e TestGoSDKTraceContextThroughSpoold.)
func TestPublishCarriesTraceContext(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	ctx, span := tp.Tracer("test").Start(ctxT(t), "parent")
	defer span.End()
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"

	if _, err := e.client.Publish(ctx, "orders", nil, []byte("publish")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Publish(context.Background(), "orders", nil, []byte("no span")); err != nil {
		t.Fatal(err)
	}
	own := map[string]string{"TraceParent": "00-11111111111111111111111111111111-2222222222222222-01"}
	if _, err := e.client.Publish(ctx, "orders", nil, []byte("own"), spool.WithHeaders(own)); err != nil {
		t.Fatal(err)
	}
	batchHeaders := map[string]string{"a": "b"}
	if _, err := e.client.PublishBatch(ctx, "orders", []spool.OutMessage{{Payload: []byte("batch"), Headers: batchHeaders}}); err != nil {
		t.Fatal(err)
	}
	if len(batchHeaders) != 1 {
		t.Fatalf("PublishBatch changed the caller's headers: %v", batchHeaders)
	}
	p := e.client.Publisher(ctxT(t), "orders")
	if _, err := p.Publish(nil, []byte("publisher"), spool.WithTraceContext(ctx)).Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(nil, []byte("publisher no ctx")).Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, m := range e.side.Record().Published {
		got[string(m.GetPayload())] = m.GetHeaders()
	}
	for payload, tp := range map[string]string{"publish": want, "no span": "", "batch": want, "publisher": want, "publisher no ctx": ""} {
		if got[payload]["traceparent"] != tp {
			t.Errorf("%s: traceparent %q, want %q", payload, got[payload]["traceparent"], tp)
		}
	}
	if h := got["own"]; len(h) != 1 || h["TraceParent"] != own["TraceParent"] {
		t.Errorf("the app's own traceparent: headers became %v", h)
	}
	if got["batch"]["a"] != "b" {
		t.Errorf("batch headers %v lost the app's", got["batch"])
	}
}
