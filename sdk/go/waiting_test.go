package spool

import (
	"testing"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// BenchmarkWaitingLeases: a delivery received ahead of its worker is
// added to the waiting leases and taken out when a worker starts it, with
// prefetch's worth of others waiting (the SDK's default, 1,024).
func BenchmarkWaitingLeases(b *testing.B) {
	s := &session{}
	s.visibilityMs.Store(int64(10 * time.Minute / time.Millisecond)) // no extension falls due
	var w waitingLeases
	defer w.stop()
	const waiting = 1024
	ref := func(i int) deliveryRef { return deliveryRef{topic: "orders", offset: int64(i), token: uint64(i)} }
	for i := range waiting {
		w.add(s, ref(i), 0)
	}
	b.ResetTimer()
	for i := range b.N {
		w.add(s, ref(waiting+i), 0)
		w.remove(ref(i))
	}
}

// The one timer of the waiting leases is armed for the earliest extension:
// a delivery due sooner than the timer re-arms it, one due later does not
// delay it, and after stop a new delivery arms a new timer.
func TestWaitingLeasesArmForTheEarliest(t *testing.T) {
	s := &session{sub: &subscriber{stats: new(Stats)}, wake: make(chan struct{}, 1)}
	var w waitingLeases
	defer w.stop()
	extended := func(offset int64) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.pending.extends {
			if r.offset == offset {
				return true
			}
		}
		return false
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("not within 10s: %s", what)
			}
			time.Sleep(time.Millisecond) // sleep-ok: polling interval of a condition wait
		}
	}
	ms := func(d time.Duration) int64 { return time.Now().Add(d).UnixMilli() }
	w.add(s, deliveryRef{offset: 1}, ms(time.Hour))           // due in 40 min
	w.add(s, deliveryRef{offset: 2}, ms(30*time.Millisecond)) // due in 20 ms: re-arms
	w.add(s, deliveryRef{offset: 3}, ms(time.Hour))           // later: the timer stays
	await("the delivery due first extended", func() bool { return extended(2) })
	if extended(1) || extended(3) {
		t.Fatal("a delivery extended 40 minutes early")
	}
	w.stop()
	w.add(s, deliveryRef{offset: 4}, ms(30*time.Millisecond))
	await("a delivery added after stop extended", func() bool { return extended(4) })
}

// A settlement queued while an extension of the same delivery still waits
// in the outbox drops the extension: the sidecar applies a frame's
// settlements before its extends, so the two in one frame would answer
// the extend with a NOT_IN_FLIGHT settle error (docs/protocol.md).
func TestSettleDropsAQueuedExtension(t *testing.T) {
	s := &session{sub: &subscriber{stats: new(Stats)}, wake: make(chan struct{}, 1)}
	a, b := deliveryRef{topic: "orders", offset: 1, token: 1}, deliveryRef{topic: "orders", offset: 2, token: 2}
	s.extend(a)
	s.extend(b)
	s.settle(settlement{ref: a, outcome: spoolv1.Outcome_OUTCOME_ACK})
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending.extends) != 1 || s.pending.extends[0] != b {
		t.Fatalf("extensions queued after a's ack: %+v, want only b's", s.pending.extends)
	}
}
