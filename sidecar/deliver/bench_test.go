package deliver

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/metrics"
	"github.com/spoolmq/spool/sidecar/tracing"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// BenchmarkDeliverAck measures the delivery loop alone: one op is one
// message fetched from the (in-memory) log, sent to a stream consumer and
// acked, settlements coalesced per frame as the SDKs do. Each message
// carries a traceparent header, so the cost of tracing (off unless
// GroupConfig.Tracer is set) shows in the allocations.
//
//	go test -run '^$' -bench DeliverAck -benchmem ./sidecar/deliver/
//
// tracing=on records every attempt's span into a no-op exporter (the SDK's
// cost, without the export).
func BenchmarkDeliverAck(b *testing.B) {
	b.Run("tracing=off", func(b *testing.B) { benchDeliverAck(b, GroupConfig{}) })
	// ledger=memory claims and completes every message in the in-process
	// ledger: the machine's and the pipeline's share of the ledger's cost,
	// without Redis.
	b.Run("ledger=memory", func(b *testing.B) {
		benchDeliverAck(b, GroupConfig{Ledger: ledger.NewMemory(nil), Owner: "n1"})
	})
	b.Run("tracing=on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		benchDeliverAck(b, GroupConfig{Tracer: tracing.Tracer(tp)})
	})
}

func benchDeliverAck(b *testing.B, cfg GroupConfig) {
	eng := newTestEngine()
	recs := make([]engine.Record, b.N)
	for i := range recs {
		recs[i] = engine.Record{ID: []byte("m-" + itoa(i)), Value: make([]byte, 100),
			Headers: []engine.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
	}
	for len(recs) > 0 { // the log takes batches of up to 4 MiB
		n := min(len(recs), 10000)
		eng.publish(tTopic, 0, recs[:n]...)
		recs = recs[n:]
	}
	cfg.Name = tGroup
	cfg.Subscriptions = []Subscription{testSub(tracker.Config{MaxInFlight: 256})}
	benchAckAll(b, cfg, eng)
}

// benchAckAll runs the group over eng and the benchmark's loop: a stream
// consumer with 256 credit acks b.N deliveries, settlements coalesced per
// frame as the SDKs do.
func benchAckAll(b *testing.B, cfg GroupConfig, eng Engine) {
	g, err := NewGroup(cfg, eng, metrics.New(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	c := newConsumer("bench", ModeStream, nil, 256)
	post := func(ev event) {
		if err := g.post(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	post(joinEvent{c})
	post(settleEvent{c, &spoolv1.SubscribeRequest{Credit: 256}})
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for acked := 0; acked < b.N; {
		var f *spoolv1.SubscribeResponse
		select {
		case q := <-c.out:
			f = q.f
		case <-timeout.C:
			b.Fatalf("%d of %d acked after a minute", acked, b.N)
		}
		ds := f.GetDeliveries()
		if len(ds) == 0 {
			continue
		}
		req := &spoolv1.SubscribeRequest{Acks: make([]*spoolv1.Ack, len(ds)), Credit: uint32(len(ds))}
		for i, d := range ds {
			req.Acks[i] = &spoolv1.Ack{Ref: refOf(d)}
		}
		post(settleEvent{c, req})
		acked += len(ds)
	}
	b.StopTimer()
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var buf [20]byte
	n := len(buf)
	for ; i > 0; i /= 10 {
		n--
		buf[n] = byte('0' + i%10)
	}
	return string(buf[n:])
}

// slowReads is the in-memory log with every read taking a round trip's
// time, as a broker backend's (or a peer's) reads do.
type slowReads struct {
	*fakeEngine
	rtt time.Duration
}

func (e slowReads) Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error) {
	time.Sleep(e.rtt) // sleep-ok: a read's round trip, the latency being measured
	return e.fakeEngine.Fetch(topic, p, offset, maxBytes, dst)
}

// BenchmarkDeliverRemoteReads is BenchmarkDeliverAck over 8 partitions
// whose reads each take 1 ms (a broker's round trip): reads made on the
// delivery loop (readers=0, the embedded log's way) against reads on the
// group's readers (delivery.reads_in_flight).
//
//	go test -run '^$' -bench DeliverRemoteReads -benchmem ./sidecar/deliver/
func BenchmarkDeliverRemoteReads(b *testing.B) {
	for _, readers := range []int{0, 8} {
		b.Run("readers="+itoa(readers), func(b *testing.B) {
			const parts = 8
			eng := newFakeEngine(map[string]int32{tTopic: parts, tDLQ: 1})
			for p := range int32(parts) {
				n := b.N/parts + 1
				for i := 0; i < n; i += 2000 {
					batch := make([]engine.Record, min(2000, n-i))
					for j := range batch {
						batch[j] = engine.Record{ID: []byte("m-" + itoa(int(p)) + "-" + itoa(i+j)), Value: make([]byte, 1024)}
					}
					eng.publish(tTopic, p, batch...)
				}
			}
			cfg := GroupConfig{Name: tGroup, ReadsInFlight: readers, Subscriptions: []Subscription{testSub(tracker.Config{MaxInFlight: 256})}}
			benchAckAll(b, cfg, slowReads{eng, time.Millisecond})
		})
	}
}
