package deliver

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/tracing"
	"github.com/spoolmq/spool/sidecar/tracker"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// With a Tracer, each delivery attempt is one span, a child of the
// message's traceparent, with its outcome; a message without one gets a
// root span. The headers reach the consumer unchanged.
func TestDeliverySpansPerAttempt(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	eng := newTestEngine()
	h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{})}, Tracer: tracing.Tracer(tp)})
	eng.publish(tTopic, 0,
		engine.Record{ID: []byte("traced"), Value: []byte("a"), Headers: []engine.Header{
			{Key: "traceparent", Value: []byte(testTraceparent)}, {Key: "tracestate", Value: []byte("vendor=x")}, {Key: "k", Value: []byte("v")}}},
		msg("plain", []byte("b")))
	c := h.join(10, 10)
	ds := c.deliveries(2, 10*time.Second)
	want := map[string]string{"traceparent": testTraceparent, "tracestate": "vendor=x", "k": "v"}
	for k, v := range want {
		if got := ds[0].GetHeaders()[k]; got != v {
			t.Fatalf("header %s = %q at the consumer, want %q (passed through untouched)", k, got, v)
		}
	}
	c.send(&spoolv1.SubscribeRequest{Nacks: []*spoolv1.Nack{{Ref: refOf(ds[0]), Outcome: spoolv1.Outcome_OUTCOME_RETRY, Error: "boom"}},
		Acks: []*spoolv1.Ack{{Ref: refOf(ds[1])}}, Credit: 2})
	again := c.deliveries(1, 10*time.Second)
	c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(again[0])}}})
	await(t, 10*time.Second, "three attempt spans", func() bool { return len(exp.GetSpans()) == 3 })

	parent, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		id, outcome string
		attempt     int64
	}
	var seen []got
	for _, s := range exp.GetSpans() {
		a := attrs(s.Attributes)
		seen = append(seen, got{a["messaging.message.id"].AsString(), a["messaging.spool.outcome"].AsString(), a["messaging.spool.attempt"].AsInt64()})
		if s.Name != "orders deliver" || a["messaging.system"].AsString() != "spool" || a["messaging.consumer.group.name"].AsString() != tGroup {
			t.Fatalf("span %q with %v", s.Name, s.Attributes)
		}
		if s.EndTime.Before(s.StartTime) {
			t.Fatalf("span ends %v before it starts %v", s.EndTime, s.StartTime)
		}
		switch a["messaging.message.id"].AsString() {
		case "traced":
			if s.SpanContext.TraceID() != parent || s.Parent.SpanID().String() != "00f067aa0ba902b7" || !s.Parent.IsRemote() {
				t.Fatalf("span of the traced message: trace %s parent %s, want trace %s parent 00f067aa0ba902b7", s.SpanContext.TraceID(), s.Parent.SpanID(), parent)
			}
		case "plain":
			if s.Parent.IsValid() {
				t.Fatalf("a message without traceparent got a span with parent %s, want a root", s.Parent.SpanID())
			}
		}
	}
	// A frame's acks are applied before its nacks.
	wantSeen := []got{{"plain", "ack", 1}, {"traced", "retry", 1}, {"traced", "ack", 2}}
	for i := range wantSeen {
		if seen[i] != wantSeen[i] {
			t.Fatalf("spans %+v, want %+v", seen, wantSeen)
		}
	}
	if st := exp.GetSpans()[1].Status; st.Description != "boom" {
		t.Fatalf("the retried attempt's status %+v, want an error with the handler's text", st)
	}
}

// A lease that expires ends its attempt's span with lease_expired.
func TestDeliverySpanOfExpiredLease(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	eng := newTestEngine()
	h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{VisibilityTimeout: 100 * time.Millisecond})}, Tracer: tracing.Tracer(tp)})
	eng.publish(tTopic, 0, engine.Record{ID: []byte("slow"), Value: []byte("a"), Headers: []engine.Header{{Key: "traceparent", Value: []byte(testTraceparent)}}})
	c := h.join(10, 10)
	c.deliveries(1, 10*time.Second)
	await(t, 10*time.Second, "a lease_expired span", func() bool {
		for _, s := range exp.GetSpans() {
			if attrs(s.Attributes)["messaging.spool.outcome"].AsString() == OutcomeLeaseExpired {
				return strings.HasSuffix(s.Parent.SpanID().String(), "0ba902b7")
			}
		}
		return false
	})
}

func attrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := make(map[string]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}
