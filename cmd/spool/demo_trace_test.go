package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/spoolmq/spool/cmd/spool/demo"
)

type demoReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *demoReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// With --otlp-endpoint, an order is one trace from checkout to the email
// provider: checkout's span is the parent of the sidecar's publish and
// delivery spans and of the worker's handler span, whose child is the
// email-provider call.
func TestDemoOneTracePerOrder(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &demoReceiver{}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(l) }() // owned: stopped below
	defer srv.Stop()

	o := demo.DefaultOptions()
	o.Duration, o.Rate, o.FailRate, o.Outage, o.PoisonEvery = time.Second, 20, 0, 0, 0
	o.ProviderLatency = 5 * time.Millisecond
	o.DrainTimeout = 30 * time.Second
	o.AdminListen = "127.0.0.1:0"
	o.OTLPEndpoint = l.Addr().String()
	var out bytes.Buffer
	o.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := demo.Run(ctx, o); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	byTrace := map[string]map[string]*tracepb.Span{}
	for _, s := range r.spans {
		id := hex.EncodeToString(s.GetTraceId())
		if byTrace[id] == nil {
			byTrace[id] = map[string]*tracepb.Span{}
		}
		name := s.GetName()
		if len(name) > 9 && name[:9] == "checkout " {
			name = "checkout"
		}
		byTrace[id][name] = s
	}
	complete := 0
	for _, spans := range byTrace {
		co := spans["checkout"]
		pub, del, proc, email := spans["order-placed publish"], spans["order-placed deliver"], spans["order-placed process"], spans["email-provider send"]
		if co == nil || pub == nil || del == nil || proc == nil || email == nil {
			continue
		}
		for _, s := range []*tracepb.Span{pub, del, proc} {
			if !bytes.Equal(s.GetParentSpanId(), co.GetSpanId()) {
				t.Fatalf("%s's parent is %x, want checkout's span %x", s.GetName(), s.GetParentSpanId(), co.GetSpanId())
			}
		}
		if !bytes.Equal(email.GetParentSpanId(), proc.GetSpanId()) {
			t.Fatalf("the email call's parent is %x, want the handler's span %x", email.GetParentSpanId(), proc.GetSpanId())
		}
		complete++
	}
	if complete == 0 {
		t.Fatalf("no order has the whole trace (checkout, publish, deliver, process, email-provider send) among %d spans in %d traces", len(r.spans), len(byTrace))
	}
	t.Logf("%d of %d traces complete", complete, len(byTrace))
}
