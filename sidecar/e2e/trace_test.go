package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	spool "github.com/spoolmq/spool/sdk/go"
)

// The Go SDK carries the publisher's trace context through a real spoold:
// the handler's span has the publisher's trace id and the publisher's span
// as parent; a traceparent the app set itself is not overwritten, and
// every header reaches the handler untouched.
func TestGoSDKTraceContextThroughSpoold(t *testing.T) {
	n := startNode(t, config("10s", "key"))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := n.client(ctx)

	pctx, parent := tp.Tracer("checkout").Start(ctx, "checkout")
	if _, err := c.Publish(pctx, "orders", []byte("k"), []byte("traced"), spool.WithHeader("schema", "v2")); err != nil {
		t.Fatal(err)
	}
	const own = "00-11111111111111111111111111111111-2222222222222222-01"
	if _, err := c.Publish(pctx, "orders", []byte("k"), []byte("own"), spool.WithHeader("traceparent", own), spool.WithHeader("tracestate", "app=1")); err != nil {
		t.Fatal(err)
	}
	parent.End()

	type seen struct {
		sc      trace.SpanContext
		headers map[string]string
	}
	var mu sync.Mutex
	got := map[string]seen{}
	subCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(subCtx, "workers", []string{"orders"}, func(hctx context.Context, m *spool.Message) error {
			mu.Lock()
			defer mu.Unlock()
			got[string(m.Payload)] = seen{trace.SpanContextFromContext(hctx), m.Headers}
			return nil
		}, spool.WithTracerProvider(tp), spool.WithLogger(discardLogger()))
	}()
	eventually(t, 30*time.Second, "both messages handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	psc := parent.SpanContext()
	traced := got["traced"]
	if traced.headers["schema"] != "v2" || traced.headers["traceparent"] == "" {
		t.Fatalf("headers at the handler %v: want schema and traceparent", traced.headers)
	}
	var handlerSpan sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.SpanContext().SpanID() == traced.sc.SpanID() {
			handlerSpan = s
		}
	}
	if handlerSpan == nil {
		t.Fatalf("the handler's span %s was not recorded", traced.sc.SpanID())
	}
	if handlerSpan.SpanContext().TraceID() != psc.TraceID() || handlerSpan.Parent().SpanID() != psc.SpanID() || !handlerSpan.Parent().IsRemote() {
		t.Fatalf("handler span: trace %s parent %s; want trace %s parent %s (the publisher's span)",
			handlerSpan.SpanContext().TraceID(), handlerSpan.Parent().SpanID(), psc.TraceID(), psc.SpanID())
	}
	if handlerSpan.Name() != "orders process" || handlerSpan.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("handler span %q kind %v, want \"orders process\" consumer", handlerSpan.Name(), handlerSpan.SpanKind())
	}
	attrs := map[string]string{}
	for _, kv := range handlerSpan.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{"messaging.system": "spool", "messaging.destination.name": "orders", "messaging.consumer.group.name": "workers",
		"messaging.spool.attempt": "1", "messaging.spool.outcome": "ack"} {
		if attrs[k] != v {
			t.Fatalf("handler span attribute %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
	if attrs["messaging.message.id"] == "" {
		t.Fatalf("handler span has no messaging.message.id: %v", attrs)
	}
	ownSeen := got["own"]
	if ownSeen.headers["traceparent"] != own || ownSeen.headers["tracestate"] != "app=1" {
		t.Fatalf("the app's own traceparent became %q / %q", ownSeen.headers["traceparent"], ownSeen.headers["tracestate"])
	}
	if ownSeen.sc.TraceID().String() != "11111111111111111111111111111111" {
		t.Fatalf("the handler of a message with the app's own traceparent runs in trace %s", ownSeen.sc.TraceID())
	}
}

// otlpReceiver is an in-process OTLP/gRPC trace collector.
type otlpReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	addr  string
}

func startReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: l.Addr().String()}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(l) }() // owned: stopped at cleanup
	t.Cleanup(srv.Stop)
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) named(name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

func (r *otlpReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			v := kv.GetValue()
			if v.GetStringValue() != "" {
				return v.GetStringValue()
			}
			return fmt.Sprint(v.GetIntValue())
		}
	}
	return ""
}

// With tracing.otlp_endpoint, spoold exports a publish span per message and
// a delivery span per attempt, each a child of the message's traceparent,
// with the attempt's outcome. Without it (the environment naming the same
// collector changes nothing) it exports none.
func TestSpooldExportsSpans(t *testing.T) {
	r := startReceiver(t)
	cfg := `
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: workers
    max_attempts: 3
    visibility_timeout: 10s
    backoff: {base: 10ms, max: 50ms}
`
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+r.addr) // must not turn tracing on by itself
	off := startNode(t, cfg)
	on := startNode(t, cfg+"tracing:\n  otlp_endpoint: "+r.addr+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	pctx := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": "00-" + traceID + "-" + spanID + "-01"})
	for _, n := range []*node{off, on} {
		c := n.client(ctx)
		if _, err := c.Publish(pctx, "orders", []byte("k"), []byte("fail-once")); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		handled := map[int]bool{}
		subCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- c.Subscribe(subCtx, "workers", nil, func(_ context.Context, m *spool.Message) error {
				mu.Lock()
				defer mu.Unlock()
				handled[m.Attempt] = true
				if m.Attempt == 1 {
					return fmt.Errorf("try again")
				}
				return nil
			}, spool.WithLogger(discardLogger()))
		}()
		eventually(t, 30*time.Second, "attempt 2 acked", func() bool { mu.Lock(); defer mu.Unlock(); return handled[2] })
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		n.stop() // flushes the exporter, if any
	}

	pubs, dels := r.named("orders publish"), r.named("orders deliver")
	if len(pubs) != 1 || len(dels) != 2 || r.count() != 3 {
		t.Fatalf("%d publish spans, %d delivery spans, %d in all; want 1, 2, 3 (only the node with tracing exports)", len(pubs), len(dels), r.count())
	}
	for _, s := range append(pubs, dels...) {
		if hex.EncodeToString(s.GetTraceId()) != traceID || hex.EncodeToString(s.GetParentSpanId()) != spanID {
			t.Fatalf("span %q: trace %x parent %x, want trace %s parent %s", s.GetName(), s.GetTraceId(), s.GetParentSpanId(), traceID, spanID)
		}
		if spanAttr(s, "messaging.system") != "spool" || spanAttr(s, "messaging.destination.name") != "orders" || spanAttr(s, "messaging.message.id") == "" {
			t.Fatalf("span %q attributes %v", s.GetName(), s.GetAttributes())
		}
	}
	if o := spanAttr(pubs[0], "messaging.spool.outcome"); o != "stored" {
		t.Fatalf("publish span outcome %q, want stored", o)
	}
	outcomes := map[string]string{}
	for _, s := range dels {
		outcomes[spanAttr(s, "messaging.spool.attempt")] = spanAttr(s, "messaging.spool.outcome")
	}
	if outcomes["1"] != "retry" || outcomes["2"] != "ack" {
		t.Fatalf("delivery spans by attempt: %v, want 1: retry, 2: ack", outcomes)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
