package publish

import (
	"context"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/metrics"
	"github.com/spoolmq/spool/sidecar/tracing"
)

// With a Tracer, each stored message gets a publish span, a child of its
// traceparent (a root without one), ended with its offset; the headers are
// stored untouched. A refused request records none.
func TestPublishSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	s, err := New(Config{Engine: node(t), Metrics: metrics.New(), Tracer: tracing.Tracer(tp)})
	if err != nil {
		t.Fatal(err)
	}
	const tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp, st := publish(t, s, "orders",
		&spoolv1.PublishMessage{Id: "a", Key: []byte("k"), Headers: map[string]string{"traceparent": tp1, "tracestate": "v=1"}},
		&spoolv1.PublishMessage{Id: "b", Key: []byte("k")})
	if st != nil {
		t.Fatal(st.Err())
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, sp := range spans {
		a := map[string]string{}
		for _, kv := range sp.Attributes {
			a[string(kv.Key)] = kv.Value.String()
		}
		if sp.Name != "orders publish" || a["messaging.system"] != "spool" || a["messaging.spool.outcome"] != "stored" {
			t.Fatalf("span %q %v", sp.Name, a)
		}
		if want := resp.GetResults()[i]; a["messaging.message.id"] != want.GetId() || a["messaging.spool.offset"] != itoa64(want.GetOffset()) {
			t.Fatalf("span %d: %v, want id %s offset %d", i, a, want.GetId(), want.GetOffset())
		}
	}
	if p := spans[0].Parent; !p.IsRemote() || p.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || p.SpanID().String() != "00f067aa0ba902b7" || p.TraceState().String() != "v=1" {
		t.Fatalf("span of a traced message has parent %+v, want the traceparent's", p)
	}
	if spans[1].Parent.IsValid() {
		t.Fatalf("span of a message without traceparent has a parent")
	}
	exp.Reset()
	if _, st := publish(t, s, "orders", &spoolv1.PublishMessage{Headers: map[string]string{"traceparent": tp1, "spool-x": "1"}}); st == nil {
		t.Fatal("a reserved header was accepted")
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("a refused request recorded %d spans", n)
	}
	_ = tp.Shutdown(context.Background())
}

func itoa64(i int64) string { return strconv.FormatInt(i, 10) }
