package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// scheduleConfig has a topic kept a week (the default retention) and one
// kept a minute, each with a subscription.
const scheduleConfig = `
topics:
  - name: orders
    partitions: 2
  - name: brief
    partitions: 1
    retention: 1m
subscriptions:
  - topic: orders
    group: verify
    visibility_timeout: 10s
    ordering: key
`

// arrivals records each delivery's message id and when the app got it.
type arrivals struct {
	mu  sync.Mutex
	ids []string
	at  []time.Time
}

func (a *arrivals) add(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids = append(a.ids, id)
	a.at = append(a.at, time.Now())
}

// first returns when id was first delivered.
func (a *arrivals) first(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.ids {
		if x == id {
			return a.at[i], true
		}
	}
	return time.Time{}, false
}

// each calls f for every delivery so far.
func (a *arrivals) each(f func(id string, at time.Time)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.ids {
		f(x, a.at[i])
	}
}

// subscribeArrivals runs an app on n that acks everything, one message at a
// time (so the order it sees is the order the sidecar sent).
func subscribeArrivals(t *testing.T, n *node, group, topic string) *arrivals {
	t.Helper()
	a := &arrivals{}
	c := n.client(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- c.Subscribe(ctx, group, []string{topic}, func(_ context.Context, m *spool.Message) error {
			a.add(m.ID)
			return nil
		}, spool.WithConcurrency(1), spool.WithPrefetch(0), spool.WithLogger(quiet), spool.WithReconnectBackoff(50*time.Millisecond, 200*time.Millisecond))
	}()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// checkNotEarly fails the test for any delivery of a scheduled id before
// its time.
func checkNotEarly(t *testing.T, a *arrivals, due map[string]time.Time) {
	t.Helper()
	a.each(func(id string, at time.Time) {
		if d, ok := due[id]; ok && at.Before(d) {
			t.Errorf("%s delivered at %s, %v before its time %s", id, at.Format("15:04:05.000"), d.Sub(at), d.Format("15:04:05.000"))
		}
	})
}

// A scheduled message is stored at once and delivered at its time — not
// before, within a second after — outside its key's order (the key's later
// message is delivered first), two of one key due at the same time in
// offset order; one that comes due while its sidecar is down (SIGKILL) is
// delivered once it is up again.
func TestScheduledDeliveryAtItsTime(t *testing.T) {
	n := startNode(t, scheduleConfig)
	c := n.client(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := []byte("customer-7")
	at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	due := map[string]time.Time{"s1": at, "s2": at}
	for _, m := range []struct {
		id   string
		opts []spool.PublishOption
	}{
		{"s1", []spool.PublishOption{spool.WithDeliverAt(at)}},
		{"n1", nil},
		{"s2", []spool.PublishOption{spool.WithDeliverAt(at)}},
	} {
		if _, err := c.Publish(ctx, "orders", key, []byte(m.id), append(m.opts, spool.WithID(m.id))...); err != nil {
			t.Fatalf("publish %s: %v", m.id, err)
		}
	}
	sent := time.Now()
	if _, err := c.Publish(ctx, "orders", key, []byte("s3"), spool.WithID("s3"), spool.WithDeliverAfter(time.Second)); err != nil {
		t.Fatalf("publish s3: %v", err)
	}
	due["s3"] = sent.Add(time.Second)
	// In its key's order, as asked: the key's later message waits for it.
	other := []byte("customer-8")
	if _, err := c.Publish(ctx, "orders", other, []byte("o1"), spool.WithID("o1"), spool.WithDeliverAt(at), spool.WithDeliverInKeyOrder()); err != nil {
		t.Fatalf("publish o1: %v", err)
	}
	if _, err := c.Publish(ctx, "orders", other, []byte("o2"), spool.WithID("o2")); err != nil {
		t.Fatalf("publish o2: %v", err)
	}
	due["o1"], due["o2"] = at, at

	a := subscribeArrivals(t, n, "verify", "orders")
	eventually(t, 10*time.Second, "s1, s2, s3 delivered", func() bool {
		for id := range due {
			if _, ok := a.first(id); !ok {
				return false
			}
		}
		return true
	})
	checkNotEarly(t, a, due)
	n1, _ := a.first("n1")
	s1, _ := a.first("s1")
	s2, _ := a.first("s2")
	if !n1.Before(at) {
		t.Errorf("n1 (the key's message after scheduled s1) delivered at %s, not before s1's time %s: held back by it", n1.Format("15:04:05.000"), at.Format("15:04:05.000"))
	}
	for id, d := range due {
		if got, _ := a.first(id); got.Sub(d) > time.Second {
			t.Errorf("%s delivered %v after its time, more than a second", id, got.Sub(d))
		}
	}
	o1, _ := a.first("o1")
	if o2, _ := a.first("o2"); o2.Before(o1) {
		t.Errorf("o2 delivered at %s before o1 (%s), which was published before it in its key's order", o2.Format("15:04:05.000"), o1.Format("15:04:05.000"))
	}
	if !s1.Before(s2) {
		t.Errorf("s1 and s2 (one key, one time) delivered s1 at %s, s2 at %s: want offset order", s1.Format("15:04:05.000"), s2.Format("15:04:05.000"))
	}

	// Due while the sidecar is down: delivered once it is up, never skipped.
	sent = time.Now()
	if _, err := c.Publish(ctx, "orders", key, []byte("s4"), spool.WithID("s4"), spool.WithDeliverAfter(time.Second)); err != nil {
		t.Fatalf("publish s4: %v", err)
	}
	due["s4"] = sent.Add(time.Second)
	n.kill()
	eventually(t, 5*time.Second, "s4's time passing while spoold is down", func() bool { return time.Now().After(due["s4"]) })
	n.start()
	eventually(t, 10*time.Second, "s4 delivered after the restart", func() bool { _, ok := a.first("s4"); return ok })
	checkNotEarly(t, a, due)
}

// Delivery times that cannot be kept are refused with a reason, and
// nothing of the request is stored.
func TestScheduledPublishRefusals(t *testing.T) {
	n := startNode(t, scheduleConfig)
	pub := n.publisherClient()
	now := time.Now()
	year := 365 * 24 * time.Hour
	for _, tc := range []struct {
		name   string
		topic  string
		m      *spoolv1.PublishMessage
		code   codes.Code
		reason string
		says   string
	}{
		{"both", "orders", &spoolv1.PublishMessage{DeliverAtMs: now.Add(time.Minute).UnixMilli(), DeliverAfterMs: 60_000}, codes.InvalidArgument, "INVALID_SCHEDULE", "both set"},
		{"negative delay", "orders", &spoolv1.PublishMessage{DeliverAfterMs: -5}, codes.InvalidArgument, "INVALID_SCHEDULE", "negative"},
		{"delay under a second", "orders", &spoolv1.PublishMessage{DeliverAfterMs: 500}, codes.InvalidArgument, "INVALID_SCHEDULE", "1s to 8760h"},
		{"more than a year ahead", "orders", &spoolv1.PublishMessage{DeliverAtMs: now.Add(year + time.Hour).UnixMilli()}, codes.InvalidArgument, "INVALID_SCHEDULE", "more than the horizon"},
		{"key order without a time", "orders", &spoolv1.PublishMessage{DeliverInKeyOrder: true}, codes.InvalidArgument, "INVALID_SCHEDULE", "without a delivery time"},
		{"past the topic's retention", "brief", &spoolv1.PublishMessage{DeliverAfterMs: 120_000}, codes.FailedPrecondition, "SCHEDULE_PAST_RETENTION", "retention of 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := &spoolv1.PublishMessage{Payload: []byte("fine")}
			_, err := pub.Publish(context.Background(), &spoolv1.PublishRequest{Topic: tc.topic, Messages: []*spoolv1.PublishMessage{ok, tc.m}})
			st := status.Convert(err)
			if st.Code() != tc.code || reason(st) != tc.reason || !strings.Contains(st.Message(), tc.says) || !strings.Contains(st.Message(), "message 1") {
				t.Fatalf("got %v %s %q; want %v %s, naming message 1 and saying %q", st.Code(), reason(st), st.Message(), tc.code, tc.reason, tc.says)
			}
		})
	}
	topics, err := n.adminClient().ListTopics(context.Background(), &spoolv1.ListTopicsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range topics.GetTopics() {
		for _, p := range tp.GetPartitions() {
			if p.GetEndOffset() != 0 {
				t.Fatalf("topic %s partition %d has %d messages after refused publishes", tp.GetName(), p.GetPartition(), p.GetEndOffset())
			}
		}
	}
}

// Three nodes; scheduled messages (one per partition and more) published
// through one sidecar whose app is the group's only consumer. Before they
// are due, the bootstrap node (controller and partition leader) is killed
// with SIGKILL and started again, then the owning sidecar too. Every
// scheduled message is delivered — none lost by the kills, none before its
// time — and the plain messages published with them are delivered too.
func TestClusterScheduledSurviveKills(t *testing.T) {
	start := time.Now()
	sc := startCluster(t, 3, "  produce_timeout: 3s\n")
	awaitPlaced(t, sc.nodes[1])
	owner := sc.nodes[1]
	a := subscribeArrivals(t, owner, "verify", "orders")
	c := owner.client(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.Now().Add(2 * time.Second)
	due := map[string]time.Time{}
	var plain []string
	for k := range 8 {
		key := []byte(fmt.Sprintf("k%d", k))
		id := fmt.Sprintf("sched-%d", k)
		if _, err := c.Publish(ctx, "orders", key, []byte(id), spool.WithID(id), spool.WithDeliverAt(at)); err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		due[id] = at.Truncate(time.Millisecond)
		id = fmt.Sprintf("plain-%d", k)
		if _, err := c.Publish(ctx, "orders", key, []byte(id), spool.WithID(id)); err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		plain = append(plain, id)
	}
	if time.Now().After(at) {
		t.Fatalf("publishing took past the messages' time (%v): the kills would not come before it", time.Since(start))
	}
	sc.nodes[0].kill() // SIGKILL
	sc.nodes[0].start()
	owner.kill()
	owner.start()
	t.Logf("both kills and restarts done %v after the messages' time", time.Since(at).Round(time.Millisecond))
	eventually(t, 60*time.Second, "every scheduled and plain message delivered", func() bool {
		for id := range due {
			if _, ok := a.first(id); !ok {
				return false
			}
		}
		for _, id := range plain {
			if _, ok := a.first(id); !ok {
				return false
			}
		}
		return true
	})
	checkNotEarly(t, a, due)
	last := time.Time{}
	for id := range due {
		if got, _ := a.first(id); got.After(last) {
			last = got
		}
	}
	t.Logf("last scheduled message delivered %v after its time; total %v", last.Sub(at).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// A scheduled message cancelled before its time is not delivered: one the
// group holds already (cancelled after the app subscribed) and one whose
// cancel the group reads together with it (cancelled before). The key's
// message due just after them is delivered, so their time has passed. A
// cancel once the time has come is refused with SCHEDULE_DUE.
func TestScheduledCancelledIsNotDelivered(t *testing.T) {
	n := startNode(t, scheduleConfig)
	c := n.client(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := []byte("customer-9")
	at := time.Now().Add(1500 * time.Millisecond)
	publish := func(id string, at time.Time) spool.PublishResult {
		t.Helper()
		res, err := c.Publish(ctx, "orders", key, []byte(id), spool.WithID(id), spool.WithDeliverAt(at))
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		return res
	}
	publish("cancelled-early", at)
	if err := c.CancelScheduled(ctx, "orders", "cancelled-early", spool.CancelKey(key)); err != nil {
		t.Fatalf("cancel before subscribing: %v", err)
	}
	late := publish("cancelled-late", at)
	publish("kept", at.Add(100*time.Millisecond))
	a := subscribeArrivals(t, n, "verify", "orders")
	eventually(t, 5*time.Second, "the group holding the scheduled messages", func() bool {
		return metricValue(t, n, `spool_scheduled_messages{group="verify",topic="orders"}`) >= 2
	})
	if err := c.CancelScheduled(ctx, "orders", "cancelled-late", spool.CancelAt(late.Partition, late.Offset)); err != nil {
		t.Fatalf("cancel after subscribing: %v", err)
	}
	eventually(t, 10*time.Second, "kept delivered", func() bool { _, ok := a.first("kept"); return ok })
	for _, id := range []string{"cancelled-early", "cancelled-late"} {
		if got, ok := a.first(id); ok {
			t.Errorf("%s delivered at %s although cancelled", id, got.Format("15:04:05.000"))
		}
	}
	err := c.CancelScheduled(ctx, "orders", "kept", spool.CancelKey(key))
	if spool.Reason(err) != "SCHEDULE_DUE" {
		t.Fatalf("cancel of a delivered message: %v; want reason SCHEDULE_DUE", err)
	}
}
