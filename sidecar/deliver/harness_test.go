package deliver

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/metrics"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// harness runs one Group over a fakeEngine, inside a synctest bubble (or
// not), and lets a test act as a consumer.
type harness struct {
	t    *testing.T
	eng  *fakeEngine
	g    *Group
	m    *metrics.Metrics
	stop func()
}

const (
	tTopic = "orders"
	tDLQ   = "orders.dlq"
	tGroup = "billing"
)

func testSub(tc tracker.Config) Subscription {
	return Subscription{Topic: tTopic, DLQTopic: tDLQ, Tracker: tc}
}

func newTestEngine() *fakeEngine { return newFakeEngine(map[string]int32{tTopic: 1, tDLQ: 1}) }

func startGroup(t *testing.T, eng *fakeEngine, cfg GroupConfig) *harness {
	t.Helper()
	return startGroupLogging(t, eng, cfg, slog.New(slog.DiscardHandler))
}

// startGroupLogging is startGroup with the group's logger given.
func startGroupLogging(t *testing.T, eng *fakeEngine, cfg GroupConfig, logger *slog.Logger) *harness {
	t.Helper()
	h := startGroupOn(t, eng, cfg, logger)
	h.eng = eng
	return h
}

// startGroupOn runs a group over any engine (h.eng is then nil): a real
// embedded.Node where the log's own behaviour matters (whole batches read).
func startGroupOn(t *testing.T, eng Engine, cfg GroupConfig, logger *slog.Logger) *harness {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = tGroup
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = time.Second
	}
	if cfg.Ledger != nil && cfg.Owner == "" {
		cfg.Owner = "node-1"
	}
	m := metrics.New()
	g, err := NewGroup(cfg, eng, m, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	h := &harness{t: t, g: g, m: m}
	stopped := false
	h.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			t.Fatal("group did not stop")
		}
	}
	t.Cleanup(h.stop)
	return h
}

type tconsumer struct {
	h *harness
	c *consumer
}

// join connects a stream consumer that may hold maxInFlight deliveries and
// grants it credit.
func (h *harness) join(maxInFlight, credit int) *tconsumer {
	h.t.Helper()
	c := newConsumer("test", ModeStream, nil, maxInFlight)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.g.post(ctx, joinEvent{c}); err != nil {
		h.t.Fatal(err)
	}
	tc := &tconsumer{h: h, c: c}
	tc.send(&spoolv1.SubscribeRequest{Credit: uint32(credit)})
	return tc
}

func (tc *tconsumer) send(req *spoolv1.SubscribeRequest) {
	tc.h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tc.h.g.post(ctx, settleEvent{tc.c, req}); err != nil {
		tc.h.t.Fatal(err)
	}
}

// frame waits up to d for the next frame; nil if none came.
func (tc *tconsumer) frame(d time.Duration) *spoolv1.SubscribeResponse {
	select {
	case q := <-tc.c.out:
		return q.f
	case <-time.After(d):
		return nil
	}
}

// deliveries waits up to d for n deliveries (settle errors are skipped).
func (tc *tconsumer) deliveries(n int, d time.Duration) []*spoolv1.Delivery {
	tc.h.t.Helper()
	var out []*spoolv1.Delivery
	deadline := time.Now().Add(d)
	for len(out) < n {
		f := tc.frame(time.Until(deadline))
		if f == nil {
			tc.h.t.Fatalf("got %d deliveries in %v, want %d", len(out), d, n)
		}
		out = append(out, f.GetDeliveries()...)
	}
	return out
}

func refOf(d *spoolv1.Delivery) *spoolv1.DeliveryRef {
	return &spoolv1.DeliveryRef{Topic: d.GetTopic(), Partition: d.GetPartition(), Offset: d.GetOffset(), FencingToken: d.GetFencingToken()}
}

func msg(id string, value []byte) engine.Record {
	return engine.Record{ID: []byte(id), Value: value}
}

// await polls cond every 10 ms (fake time in a bubble) for up to d.
func await(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !awaitOr(d, cond) {
		t.Fatalf("not within %v: %s", d, what)
	}
}

// awaitOr is await that says whether cond came true, for a caller that
// reports what it saw instead.
func awaitOr(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // sleep-ok: polling a condition under fake time
	}
	return true
}

// queryEvent runs f on the loop: a test looking at the machine's state.
type queryEvent struct{ f func(g *Group, now time.Time) }

func (e queryEvent) apply(g *Group, now time.Time) { e.f(g, now) }

func header(r engine.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// query runs f on the loop and waits for it.
func (h *harness) query(f func(g *Group, now time.Time)) {
	h.t.Helper()
	done := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.g.post(ctx, queryEvent{func(g *Group, now time.Time) { f(g, now); close(done) }}); err != nil {
		h.t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		h.t.Fatal("query not run")
	}
}
