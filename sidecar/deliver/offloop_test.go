package deliver

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// slowOffsets is the in-memory log whose Offsets, once armed, takes 5 s
// (or until released): Kafka's two ListOffsets round trips to a slow
// broker, or a cluster node's NodeService.Fetch to a peer that does not
// answer.
type slowOffsets struct {
	*fakeEngine
	armed   atomic.Bool
	inside  atomic.Int32
	calls   atomic.Int32
	first   atomic.Bool // the first armed call has returned
	release chan struct{}
}

func (e *slowOffsets) Offsets(topic string, p int32) (int64, int64, error) {
	if e.armed.Load() {
		n := e.calls.Add(1)
		e.inside.Add(1)
		select {
		case <-e.release:
		case <-time.After(5 * time.Second):
		}
		e.inside.Add(-1)
		if n == 1 {
			e.first.Store(true)
		}
	}
	return e.fakeEngine.Offsets(topic, p)
}

// TestSlowOffsetsDoNotStallDelivery: the engine calls behind lag gauges
// and admin snapshots (Offsets, RecordTime) are made off the delivery loop.
// While the first slow Offsets call is still waiting, messages are
// delivered and acked and their positions committed; once it answers, the
// lag gauge and the snapshot report what they always did.
func TestSlowOffsetsDoNotStallDelivery(t *testing.T) {
	fe := newTestEngine()
	eng := &slowOffsets{fakeEngine: fe, release: make(chan struct{})}
	fe.publish(tTopic, 0, msg("m-0", []byte("v")))
	h := startGroupOn(t, eng, GroupConfig{CommitInterval: 10 * time.Millisecond, Subscriptions: []Subscription{testSub(tracker.Config{})}},
		slog.New(slog.DiscardHandler))
	released := false
	releaseAll := func() {
		if !released {
			released = true
			close(eng.release)
		}
	}
	t.Cleanup(releaseAll) // before the group stops (cleanups run last first)
	c := h.join(10, 10)
	ack := func(ds []*spoolv1.Delivery) {
		req := &spoolv1.SubscribeRequest{Credit: uint32(len(ds))}
		for _, d := range ds {
			req.Acks = append(req.Acks, &spoolv1.Ack{Ref: refOf(d)})
		}
		c.send(req)
	}
	ack(c.deliveries(1, 10*time.Second))

	eng.armed.Store(true)
	// An admin snapshot (the Tail polls one every 200 ms) while the log is slow.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type snapReply struct {
		s   Snapshot
		err error
	}
	snapped := make(chan snapReply, 1)
	go func() { // owned: awaited below
		s, err := h.g.Snapshot(ctx)
		snapped <- snapReply{s, err}
	}()
	await(t, 10*time.Second, "a slow Offsets call under way", func() bool { return eng.inside.Load() > 0 })

	fe.publish(tTopic, 0, msg("m-1", []byte("v")))
	ds := c.deliveries(1, 4*time.Second)
	if ds[0].GetMessageId() != "m-1" {
		t.Fatalf("delivered %s, want m-1", ds[0].GetMessageId())
	}
	ack(ds)
	await(t, 4*time.Second, "m-1's ack committed", func() bool { return fe.committed(tGroup, tTopic, 0) == 2 })
	if eng.first.Load() {
		t.Fatal("the first slow Offsets call returned before the delivery and ack went through: the loop waited for it")
	}

	// The slow calls answer: the snapshot and the lag gauges come through.
	fe.publish(tTopic, 0, msg("m-2", []byte("v")))
	releaseAll()
	r := <-snapped
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := r.s.Topics[0].Partitions[0]; got.End != 3 || got.LagMessages != got.End-got.Committed {
		t.Fatalf("snapshot taken while the log was slow: %+v", got)
	}
	if ds := c.deliveries(1, 10*time.Second); ds[0].GetMessageId() != "m-2" {
		t.Fatalf("delivered %s, want m-2", ds[0].GetMessageId())
	}
	await(t, 10*time.Second, "lag gauge counts m-2", func() bool {
		return testutil.ToFloat64(h.m.LagMessages.WithLabelValues(tGroup, tTopic, "0")) == 1
	})
	snap, err := h.g.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := PartitionSnapshot{Partition: 0, Committed: 2, End: 3, LagMessages: 1, InFlight: 1}
	got := snap.Topics[0].Partitions[0]
	got.LagMs = 0 // depends on the clock
	if snap.Consumers != 1 || got != want {
		t.Fatalf("snapshot = %d consumers, %+v; want 1, %+v", snap.Consumers, got, want)
	}
}
