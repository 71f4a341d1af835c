package deliver

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// Under every kind of fault, with ordering key: messages come more than
// once (duplicates, redeliveries after a lost ack) but each key's offsets
// arrive in order, every message is finished, no fault counts an attempt
// and nothing is dead-lettered.
func TestFaultsKeepKeyOrderAndLoseNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		led  func() ledger.Ledger
	}{
		{"no ledger", func() ledger.Ledger { return nil }},
		{"memory ledger", func() ledger.Ledger { return ledger.NewMemory(nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { faultsKeepKeyOrder(t, tc.led()) })
		})
	}
}

func faultsKeepKeyOrder(t *testing.T, led ledger.Ledger) {
	const count = 60
	eng := newTestEngine()
	for i := range count {
		r := msg(fmt.Sprintf("m-%d", i), []byte(fmt.Sprint(i)))
		r.Key = []byte(fmt.Sprintf("k%d", i%4))
		eng.publish(tTopic, 0, r)
	}
	sc := testSub(tracker.Config{Ordering: tracker.OrderKey, MaxAttempts: 1, VisibilityTimeout: time.Minute})
	sc.Faults = &Faults{Duplicate: 0.3, LoseAck: 0.3, Delay: 0.3, DelayMax: 50 * time.Millisecond, Seed: 7}
	h := startGroup(t, eng, GroupConfig{Ledger: led, Subscriptions: []Subscription{sc}})
	c := h.join(100, 100)

	last := map[string]int64{} // per key, the last offset received
	times := map[int64]int{}
	for {
		f := c.frame(10 * time.Second)
		if f == nil {
			break // nothing more to deliver
		}
		for _, d := range f.GetDeliveries() {
			k := string(d.GetKey())
			if prev, ok := last[k]; ok && d.GetOffset() < prev {
				t.Fatalf("key %s: offset %d delivered after %d", k, d.GetOffset(), prev)
			}
			if d.GetAttempt() != 1 {
				t.Fatalf("offset %d at attempt %d: a fault counted an attempt", d.GetOffset(), d.GetAttempt())
			}
			last[k] = d.GetOffset()
			times[d.GetOffset()]++
			c.send(&spoolv1.SubscribeRequest{Credit: 1, Acks: []*spoolv1.Ack{{Ref: refOf(d)}}})
		}
	}
	again := 0
	for o := range int64(count) {
		if times[o] == 0 {
			t.Fatalf("offset %d never delivered", o)
		}
		if times[o] > 1 {
			again++
		}
	}
	if again == 0 {
		t.Fatal("no message delivered more than once: no fault reached the consumer")
	}
	h.query(func(g *Group, _ time.Time) {
		if n := g.mc.subs[0].parts[0].tr.Window(); n != 0 {
			t.Errorf("%d messages unfinished after every delivery was acked", n)
		}
	})
	if n := len(eng.records(tDLQ, 0)); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
	for _, kind := range []string{"duplicate", "lose_ack", "delay"} {
		if v := counterValue(t, h.m.FaultsInjected.WithLabelValues(tGroup, tTopic, kind)); v == 0 {
			t.Errorf("spool_faults_injected_total{kind=%q} = 0", kind)
		}
	}
}

// The draws replay: the same seed gives the same faults.
func TestFaultsReplayFromTheirSeed(t *testing.T) {
	draw := func(seed uint64) []bool {
		f := newFaulter(&Faults{Duplicate: 0.3, Seed: seed})
		out := make([]bool, 64)
		for i := range out {
			out[i] = f.fires(f.cfg.Duplicate)
		}
		return out
	}
	if a, b := fmt.Sprint(draw(1)), fmt.Sprint(draw(1)); a != b {
		t.Fatalf("seed 1 drew %s then %s", a, b)
	}
	if a, b := fmt.Sprint(draw(1)), fmt.Sprint(draw(2)); a == b {
		t.Fatalf("seeds 1 and 2 drew the same faults %s", a)
	}
	var none *faulter
	if none.fires(1) {
		t.Fatal("no faults configured, yet one fired")
	}
}

// An early lease expiry ends the lease within its first quarter, whatever
// deadline the app was told: the message is delivered again, and the
// attempt counts as any expiry does.
func TestEarlyLeaseExpiryRedeliversWithinTheFirstQuarter(t *testing.T) {
	// The first draw of a delivery is its lease's (the other kinds are
	// off): pick a seed whose first draw fires.
	seed := uint64(0)
	for !newFaulter(&Faults{EarlyLeaseExpiry: 0.5, Seed: seed}).fires(0.5) {
		seed++
	}
	synctest.Test(t, func(t *testing.T) {
		eng := newTestEngine()
		eng.publish(tTopic, 0, msg("m-1", []byte("x")))
		sc := testSub(tracker.Config{MaxAttempts: 5, VisibilityTimeout: time.Minute})
		sc.Tracker.Backoff.Base, sc.Tracker.Backoff.Max = time.Millisecond, time.Millisecond
		sc.Faults = &Faults{EarlyLeaseExpiry: 0.5, Seed: seed}
		h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{sc}})
		c := h.join(10, 10)
		start := time.Now()
		first := c.deliveries(1, time.Second)[0]
		if told := time.UnixMilli(first.GetLeaseDeadlineMs()).Sub(start); told < 59*time.Second {
			t.Fatalf("the app was told a lease of %v, want the full minute", told)
		}
		again := c.deliveries(1, 16*time.Second)[0] // not answered: the lease ends early
		if again.GetOffset() != first.GetOffset() || again.GetAttempt() != 2 {
			t.Fatalf("redelivered offset %d attempt %d, want offset %d attempt 2", again.GetOffset(), again.GetAttempt(), first.GetOffset())
		}
		if took := time.Since(start); took > 15*time.Second+time.Second {
			t.Fatalf("redelivered after %v, want within the lease's first quarter (15s)", took)
		}
		if v := counterValue(t, h.m.FaultsInjected.WithLabelValues(tGroup, tTopic, "early_lease_expiry")); v != 1 {
			t.Fatalf("spool_faults_injected_total{kind=early_lease_expiry} = %v, want 1", v)
		}
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(again)}}})
	})
}
