package deliver

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// gatedReads is the in-memory log whose reads of gated partitions wait
// until the gate is closed: a broker that answers one partition slowly.
type gatedReads struct {
	*fakeEngine
	gates map[int32]chan struct{}
}

func (e gatedReads) Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error) {
	if g, ok := e.gates[p]; ok && topic == tTopic {
		<-g
	}
	return e.fakeEngine.Fetch(topic, p, offset, maxBytes, dst)
}

// TestReadsOffTheLoop: with readers (delivery.reads_in_flight, a broker
// backend or a cluster), a read that does not come back holds up only its
// own partition: the others' messages are delivered and acked meanwhile,
// and the slow partition's come once its read answers. Reads made on the
// loop (readers=0) would hold up everything behind the first.
func TestReadsOffTheLoop(t *testing.T) {
	eng := newFakeEngine(map[string]int32{tTopic: 2, tDLQ: 1})
	for p := range int32(2) {
		for i := range 5 {
			eng.publish(tTopic, p, msg(fmt.Sprintf("m-%d-%d", p, i), []byte("v")))
		}
	}
	gate := make(chan struct{})
	h := startGroupOn(t, gatedReads{eng, map[int32]chan struct{}{0: gate}},
		GroupConfig{ReadsInFlight: 2, Subscriptions: []Subscription{testSub(tracker.Config{})}}, slog.New(slog.DiscardHandler))
	c := h.join(100, 100)
	ds := c.deliveries(5, 10*time.Second)
	req := &spoolv1.SubscribeRequest{}
	for _, d := range ds {
		if d.GetPartition() != 1 {
			t.Fatalf("delivered %s of partition %d while its read is held up", d.GetMessageId(), d.GetPartition())
		}
		req.Acks = append(req.Acks, &spoolv1.Ack{Ref: refOf(d)})
	}
	c.send(req)
	await(t, 10*time.Second, "partition 1's acks committed", func() bool { return eng.committed(tGroup, tTopic, 1) == 5 })
	close(gate)
	for _, d := range c.deliveries(5, 10*time.Second) {
		if d.GetPartition() != 0 {
			t.Fatalf("delivered %s of partition %d, want partition 0's", d.GetMessageId(), d.GetPartition())
		}
	}
}

// TestReadAnsweredWhileDraining: a read that answers after the group began
// to drain delivers nothing more, and the group stops once it returned.
func TestReadAnsweredWhileDraining(t *testing.T) {
	eng := newFakeEngine(map[string]int32{tTopic: 1, tDLQ: 1})
	eng.publish(tTopic, 0, msg("m-0", []byte("v")))
	gate := make(chan struct{})
	draining := &logSignal{prefix: "draining", ch: make(chan struct{})}
	h := startGroupOn(t, gatedReads{eng, map[int32]chan struct{}{0: gate}},
		GroupConfig{ReadsInFlight: 1, Subscriptions: []Subscription{testSub(tracker.Config{})}}, slog.New(draining))
	c := h.join(100, 100)
	await(t, 10*time.Second, "the read under way", func() bool {
		return testutil.ToFloat64(h.m.DeliveryReadsInFlight.WithLabelValues(tGroup)) == 1
	})
	stopped := make(chan struct{})
	go func() { h.stop(); close(stopped) }()
	select {
	case <-draining.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the group did not begin to drain")
	}
	close(gate)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the group did not stop after its read answered")
	}
	for {
		select {
		case q := <-c.c.out:
			if f := q.f; len(f.GetDeliveries()) > 0 {
				t.Fatalf("delivered %v after the drain began", f.GetDeliveries())
			}
			continue
		default:
		}
		break
	}
}

// logSignal is a slog handler that closes ch at the first record whose
// message starts with prefix.
type logSignal struct {
	prefix string
	ch     chan struct{}
	once   sync.Once
}

func (l *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, l.prefix) {
		l.once.Do(func() { close(l.ch) })
	}
	return nil
}
func (l *logSignal) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSignal) WithGroup(string) slog.Handler      { return l }

// armedReads is the in-memory log whose reads, once armed, wait until
// released.
type armedReads struct {
	*fakeEngine
	mu      sync.Mutex
	armed   bool
	release chan struct{}
}

func (e *armedReads) Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error) {
	e.mu.Lock()
	armed := e.armed && topic == tTopic
	e.mu.Unlock()
	if armed {
		<-e.release
	}
	return e.fakeEngine.Fetch(topic, p, offset, maxBytes, dst)
}

// TestReadAnsweredAfterRevocation: in a cluster, a read of a partition that
// answers after the partition was revoked and handed over delivers
// nothing of it here: the new owner delivers those messages.
func TestReadAnsweredAfterRevocation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fe := newFakeEngine(map[string]int32{tTopic: 2, tDLQ: 1})
		eng := &armedReads{fakeEngine: fe, release: make(chan struct{})}
		co := newInProcCoord()
		cfg := clusterGroup(co, 50*time.Millisecond)
		cfg.ReadsInFlight = 2
		h := startGroupOn(t, eng, cfg, slog.New(slog.DiscardHandler))
		c := h.join(16, 16)
		await(t, 10*time.Second, "member a owns both partitions", func() bool { return len(co.assignment(memberA).Owned) == 2 })
		eng.mu.Lock()
		eng.armed = true
		eng.mu.Unlock()
		fe.publish(tTopic, 0, msg("p0-0", nil))
		fe.publish(tTopic, 1, msg("p1-0", nil))
		await(t, 10*time.Second, "both partitions' reads under way", func() bool {
			return testutil.ToFloat64(h.m.DeliveryReadsInFlight.WithLabelValues(tGroup)) == 2
		})
		co.apply(t, engine.GroupCommand{Join: &engine.GroupJoin{Member: "b/" + tTopic, Session: "sb", Node: 2,
			Topics: []engine.GroupTopic{{Name: tTopic, Partitions: 2}}, SessionTimeoutMs: 300_000}})
		rev := co.assignment(memberA).Revoking
		if len(rev) != 1 {
			t.Fatalf("revoking %v, want one partition", rev)
		}
		revoked := rev[0].Partition
		await(t, 10*time.Second, "the revoked partition handed over", func() bool { return len(co.assignment(memberA).Revoking) == 0 })
		close(eng.release)
		ds := c.deliveries(1, 10*time.Second)
		time.Sleep(5 * time.Second) // sleep-ok: fake time; the loop has long been idle
		for f := c.frame(0); f != nil; f = c.frame(0) {
			ds = append(ds, f.GetDeliveries()...)
		}
		for _, d := range ds {
			if d.GetPartition() == revoked {
				t.Fatalf("delivered %s of partition %d, handed over while its read was under way", d.GetMessageId(), revoked)
			}
		}
		if len(ds) != 1 {
			t.Fatalf("%d deliveries, want the kept partition's one", len(ds))
		}
	})
}
