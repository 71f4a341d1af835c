package deliver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/spoolmq/spool/internal/testredis"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// releaseNeverCounts releases one message 100 times with max_attempts 3:
// every delivery must be attempt 1 and nothing may be dead-lettered.
func releaseNeverCounts(t *testing.T, eng *fakeEngine, led ledger.Ledger) {
	eng.publish(tTopic, 0, msg("m-1", []byte("hello")))
	h := startGroup(t, eng, GroupConfig{Ledger: led, Subscriptions: []Subscription{testSub(tracker.Config{MaxAttempts: 3})}})
	c := h.join(10, 1)
	for i := range 100 {
		d := c.deliveries(1, time.Minute)[0]
		if d.GetAttempt() != 1 {
			t.Fatalf("delivery %d after %d releases: attempt %d, want 1 (a release is not an attempt)", i+1, i, d.GetAttempt())
		}
		c.send(&spoolv1.SubscribeRequest{Credit: 1, Nacks: []*spoolv1.Nack{{Ref: refOf(d), Outcome: spoolv1.Outcome_OUTCOME_RELEASE}}})
	}
	d := c.deliveries(1, time.Minute)[0]
	c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(d)}}})
	if n := len(eng.records(tDLQ, 0)); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

// Defect 2: with the ledger on, a claim could overtake the release before it
// (two goroutines), and the claim script counted an attempt.
func TestReleaseNeverCountsAnAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		led  func() ledger.Ledger
	}{
		{"no ledger", func() ledger.Ledger { return nil }},
		{"memory ledger", func() ledger.Ledger { return ledger.NewMemory(nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { releaseNeverCounts(t, newTestEngine(), tc.led()) })
		})
	}
}

// The same against a real redis-server (real time, real round trips).
func TestReleaseNeverCountsAnAttemptRedis(t *testing.T) {
	srv := testredis.Start(t)
	r, err := ledger.NewRedis(ledger.RedisOptions{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	releaseNeverCounts(t, newTestEngine(), r)
}

// Defect 2, second half: a message whose ledger attempts are used up is
// dead-lettered, and the ledger's entry must become dead under the token of
// the grant that was dead-lettered (it stayed in_progress: the write reused
// an older token).
func TestLedgerDeadWriteCarriesTheLastGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		led := ledger.NewMemory(nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		past := time.Now().Add(-time.Hour)
		for range 3 { // three attempts made elsewhere, each lease expired
			if _, err := led.Claim(ctx, tGroup, "node-0", time.Now(), 0, []ledger.Claim{{ID: "m-1", Lease: past}}); err != nil {
				t.Fatal(err)
			}
		}
		eng := newTestEngine()
		eng.publish(tTopic, 0, msg("m-1", []byte("x")))
		h := startGroup(t, eng, GroupConfig{Ledger: led, Subscriptions: []Subscription{testSub(tracker.Config{MaxAttempts: 3})}})
		h.join(10, 10)
		await(t, time.Minute, "dead letter published", func() bool { return len(eng.records(tDLQ, 0)) == 1 })
		await(t, time.Minute, "offset committed", func() bool { return eng.committed(tGroup, tTopic, 0) == 1 })
		synctest.Wait()
		res, err := led.Claim(ctx, tGroup, "node-2", time.Now(), 0, []ledger.Claim{{ID: "m-1", Lease: time.Now().Add(time.Minute)}})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Status != ledger.Dead {
			t.Fatalf("ledger entry after the dead letter: %v (token %d, attempts %d), want dead", res[0].Status, res[0].Token, res[0].Attempts)
		}
	})
}

// Defect 1: thousands of dead letters at once, with an engine that answers
// Produce on the caller's goroutine: nothing may block.
func TestDeadLetterBurstDoesNotBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1500
		eng := newTestEngine()
		for i := range n {
			eng.publish(tTopic, 0, msg(fmt.Sprint("m-", i), []byte("x")))
		}
		h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{WindowMessages: 2 * n, MaxInFlight: 2 * n})}})
		c := h.join(2*n, 2*n)
		ds := c.deliveries(n, time.Minute)
		req := &spoolv1.SubscribeRequest{}
		for _, d := range ds {
			req.Nacks = append(req.Nacks, &spoolv1.Nack{Ref: refOf(d), Outcome: spoolv1.Outcome_OUTCOME_DEAD_LETTER, Reason: "bad"})
		}
		c.send(req)
		await(t, time.Minute, "all dead-lettered and committed", func() bool {
			return len(eng.records(tDLQ, 0)) == n && eng.committed(tGroup, tTopic, 0) == n
		})
	})
}

// Defect 4: a multi-MiB error text must not make the dead-letter record
// larger than the log accepts (it was retried forever; the partition
// stalled).
func TestHugeRetryErrorDoesNotStallThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newTestEngine()
		eng.publish(tTopic, 0, msg("m-1", []byte("x")))
		h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{MaxAttempts: 1})}})
		c := h.join(10, 10)
		d := c.deliveries(1, time.Minute)[0]
		huge := strings.Repeat("e", 5<<20)
		c.send(&spoolv1.SubscribeRequest{Nacks: []*spoolv1.Nack{{Ref: refOf(d), Outcome: spoolv1.Outcome_OUTCOME_RETRY, Error: huge}}})
		await(t, time.Minute, "dead letter written and offset committed", func() bool {
			return len(eng.records(tDLQ, 0)) == 1 && eng.committed(tGroup, tTopic, 0) == 1
		})
		if got := header(eng.records(tDLQ, 0)[0], HeaderDLQLastError); len(got) > MaxErrorBytes {
			t.Fatalf("last error header is %d bytes, want ≤ %d", len(got), MaxErrorBytes)
		}
	})
}

// Defect 9: a delivery frame that cannot be queued for the stream must not
// vanish until its lease expires: it is handed back uncounted.
func TestUnsentFrameIsHandedBackUncounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newTestEngine()
		h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{})}})
		c := h.join(4, 0)
		// Fill the stream's queue with settle errors the app does not read.
		for range cap(c.c.out) + 4 {
			c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: &spoolv1.DeliveryRef{Topic: "nope"}}}})
		}
		synctest.Wait()
		eng.publish(tTopic, 0, msg("m-1", []byte("x")))
		c.send(&spoolv1.SubscribeRequest{Credit: 1})
		synctest.Wait()
		start := time.Now()
		for len(c.c.out) > 0 {
			<-c.c.out
		}
		c.send(&spoolv1.SubscribeRequest{Credit: 1})
		d := c.deliveries(1, time.Minute)[0]
		if waited := time.Since(start); waited >= 30*time.Second || d.GetAttempt() != 1 {
			t.Fatalf("delivery came after %v as attempt %d, want at once as attempt 1", waited, d.GetAttempt())
		}
	})
}

// dead_lettered_total{reason} takes its label from a fixed set; the app's
// text stays in the entry.
func TestDeadLetterReasonLabelIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newTestEngine()
		eng.publish(tTopic, 0, msg("m-1", []byte("x")))
		h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{})}})
		c := h.join(10, 10)
		d := c.deliveries(1, time.Minute)[0]
		c.send(&spoolv1.SubscribeRequest{Nacks: []*spoolv1.Nack{{Ref: refOf(d), Outcome: spoolv1.Outcome_OUTCOME_DEAD_LETTER, Reason: "order 42 has no customer"}}})
		await(t, time.Minute, "dead letter", func() bool { return len(eng.records(tDLQ, 0)) == 1 })
		synctest.Wait()
		if got := header(eng.records(tDLQ, 0)[0], HeaderDLQReason); got != "order 42 has no customer" {
			t.Fatalf("reason header %q", got)
		}
		if v := counterValue(t, h.m.DeadLettered.WithLabelValues(tGroup, tTopic, ReasonApplication)); v != 1 {
			t.Fatalf("dead_lettered_total{reason=%q} = %v, want 1", ReasonApplication, v)
		}
	})
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A member whose breaker is open when it loses its partitions (here its
// app went away, so it yields them) has nothing to probe with; when the
// open time ends the loop must still sleep. It used to take the breaker's
// past half-open time as its next wake-up again and again — spinning at
// 100% CPU until a partition came back — because only a probe moved the
// breaker on; under synctest the spin kept the fake clock still and this
// test hung.
func TestOpenBreakerWithoutPartitionsDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 1, tDLQ: 1})
		co := newInProcCoord()
		cfg := clusterGroup(co, 50*time.Millisecond)
		cfg.Subscriptions[0].Breaker = &breaker.Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, MaxOpenTimeout: time.Second}
		h := startGroup(t, eng, cfg)
		c := h.join(10, 1)
		await(t, 10*time.Second, "member a owns the partition", func() bool { return len(co.assignment(memberA).Owned) == 1 })
		eng.publish(tTopic, 0, msg("m-1", nil))
		d := c.deliveries(1, time.Minute)[0]
		c.send(&spoolv1.SubscribeRequest{Nacks: []*spoolv1.Nack{{Ref: refOf(d), Outcome: spoolv1.Outcome_OUTCOME_RETRY, Error: "503", Downstream: "email"}}})
		if err := h.g.post(context.Background(), leaveEvent{c.c}); err != nil {
			t.Fatal(err)
		}
		await(t, 30*time.Second, "the partition handed back", func() bool { return len(co.assignment(memberA).Owned) == 0 })
		time.Sleep(10 * time.Second) // sleep-ok: fake time; the breaker's open time (1 s) ends with no partition to probe
		c2 := h.join(10, 1)
		if d := c2.deliveries(1, time.Minute)[0]; d.GetMessageId() != "m-1" {
			t.Fatalf("delivered %s after the app came back, want m-1", d.GetMessageId())
		}
	})
}

// With the ledger on, a group whose deliveries are all settled drains at
// once when it stops. Each claim's answer used to be counted twice (once
// by the driver, once by the machine), so the count of claims in flight
// went below zero, the drain never saw it at zero, and every graceful stop
// with the ledger waited out the whole drain budget (found by the
// rebalance load test: 7 s from SIGTERM to exit with nothing in flight).
func TestDrainWithLedgerEndsWhenNothingIsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newTestEngine()
		for i := range 5 {
			eng.publish(tTopic, 0, msg(fmt.Sprintf("m-%d", i), nil))
		}
		h := startGroup(t, eng, GroupConfig{Ledger: ledger.NewMemory(nil), DrainTimeout: time.Minute,
			Subscriptions: []Subscription{testSub(tracker.Config{MaxInFlight: 16})}})
		c := h.join(16, 16)
		var acks []*spoolv1.Ack
		for _, d := range c.deliveries(5, time.Minute) {
			acks = append(acks, &spoolv1.Ack{Ref: refOf(d)})
		}
		c.send(&spoolv1.SubscribeRequest{Acks: acks})
		synctest.Wait()
		start := time.Now()
		h.stop()
		if took := time.Since(start); took >= time.Minute {
			t.Fatalf("stopping with nothing in flight took %v: the whole drain budget", took)
		}
	})
}

// A settlement is dated when it arrives, not when the delivery loop last
// looked at the clock before it slept: a retry after 400 ms sent by a
// handler that worked 300 ms came back after 100 ms, because the loop
// applied the first event after waking with the time taken before it
// blocked (found by the SDK conformance suite: 273-301 ms for 400).
func TestSettlementIsDatedWhenItArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newTestEngine()
		h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{MaxAttempts: 10})}})
		c := h.join(10, 1)
		eng.publish(tTopic, 0, msg("m-1", nil))
		d := c.deliveries(1, time.Minute)[0]
		synctest.Wait()
		time.Sleep(300 * time.Millisecond) // sleep-ok: fake time; the handler works 300 ms
		sent := time.Now()
		c.send(&spoolv1.SubscribeRequest{Credit: 1, Nacks: []*spoolv1.Nack{{Ref: refOf(d), Outcome: spoolv1.Outcome_OUTCOME_RETRY, RetryAfterMs: 400, Error: "busy"}}})
		again := c.deliveries(1, time.Minute)[0]
		if got := time.Since(sent); again.GetMessageId() != "m-1" || got < 400*time.Millisecond {
			t.Fatalf("redelivered %s %v after a retry of 400 ms was asked for", again.GetMessageId(), got)
		}
	})
}

// A malformed entry under the ledger's prefix (planted by anyone who can
// write to Redis) affects only its own message: the messages claimed in
// the same batch are delivered at attempt 1 and nothing is dead-lettered.
// Before, the claim script failed on it after writing the keys before it,
// so each retry of the batch counted an attempt of every message ahead of
// it, and they reached the dead-letter topic without being delivered.
func TestLedgerMalformedEntryAffectsOnlyItsMessage(t *testing.T) {
	srv := testredis.Start(t)
	r, err := ledger.NewRedis(ledger.RedisOptions{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	if _, err := srv.Do("SET", ledger.Key(tGroup, "m-2"), "not a ledger entry"); err != nil {
		t.Fatal(err)
	}
	eng := newTestEngine()
	for _, id := range []string{"m-1", "m-2", "m-3"} {
		eng.publish(tTopic, 0, msg(id, []byte("x")))
	}
	h := startGroup(t, eng, GroupConfig{Ledger: r, Subscriptions: []Subscription{testSub(tracker.Config{MaxAttempts: 3})}})
	c := h.join(10, 10)
	got := map[string]int32{}
	for _, d := range c.deliveries(3, 20*time.Second) {
		got[d.GetMessageId()] = d.GetAttempt()
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(d)}}})
	}
	if want := map[string]int32{"m-1": 1, "m-2": 1, "m-3": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("deliveries (id: attempt) %v, want %v", got, want)
	}
	await(t, time.Minute, "offsets committed", func() bool { return eng.committed(tGroup, tTopic, 0) == 3 })
	if n := len(eng.records(tDLQ, 0)); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}
