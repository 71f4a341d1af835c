package spool

import (
	"testing"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// BenchmarkWaitingLeases: deliveries arrive in frames of 32 and are added
// to the waiting leases, and each is taken when a worker starts it, with
// prefetch's worth of others waiting (1,024). One op is one delivery.
func BenchmarkWaitingLeases(b *testing.B) {
	s := &session{}
	s.visibilityMs.Store(int64(10 * time.Minute / time.Millisecond)) // no extension falls due
	var w waitingLeases
	defer w.stop()
	const waiting, perFrame = 1024, 32
	frame := func(first int) *waitFrame {
		refs := make([]deliveryRef, perFrame)
		for i := range refs {
			refs[i] = deliveryRef{topic: "orders", offset: int64(first + i), token: uint64(first + i)}
		}
		return w.add(s, refs, 0)
	}
	var frames []*waitFrame
	for i := 0; i < waiting; i += perFrame {
		frames = append(frames, frame(i))
	}
	b.ResetTimer()
	for i := range b.N {
		if i%perFrame == 0 {
			frames = append(frames, frame(waiting+i))
		}
		w.take(frames[i/perFrame], i%perFrame)
	}
}

// The one timer of the waiting leases is armed for the earliest extension:
// a frame due sooner than the timer re-arms it, one due later does not
// delay it, and after stop a new frame arms a new timer.
func TestWaitingLeasesArmForTheEarliest(t *testing.T) {
	s := &session{sub: &subscriber{stats: new(Stats)}, wake: make(chan struct{}, 1)}
	var w waitingLeases
	defer w.stop()
	ms := func(d time.Duration) int64 { return time.Now().Add(d).UnixMilli() }
	one := func(offset int64) []deliveryRef { return []deliveryRef{{offset: offset}} }
	w.add(s, one(1), ms(time.Hour))           // due in 40 min
	w.add(s, one(2), ms(30*time.Millisecond)) // due in 20 ms: re-arms
	w.add(s, one(3), ms(time.Hour))           // later: the timer stays
	awaitExtended(t, s, "the delivery due first extended", 2)
	if extended(s, 1) || extended(s, 3) {
		t.Fatal("a delivery extended 40 minutes early")
	}
	w.stop()
	w.add(s, one(4), ms(30*time.Millisecond))
	awaitExtended(t, s, "a delivery added after stop extended", 4)
}

// A frame's deliveries no worker has taken are extended when the frame is
// due; those taken are not, and a frame whose deliveries are all taken is
// no longer watched.
func TestWaitingLeasesExtendWhatNoWorkerTook(t *testing.T) {
	s := &session{sub: &subscriber{stats: new(Stats)}, wake: make(chan struct{}, 1)}
	var w waitingLeases
	defer w.stop()
	refs := []deliveryRef{{offset: 1}, {offset: 2}, {offset: 3}}
	f := w.add(s, refs, time.Now().Add(30*time.Millisecond).UnixMilli())
	w.take(f, 1)
	awaitExtended(t, s, "the frame's untaken deliveries extended", 1, 3)
	if extended(s, 2) {
		t.Fatal("a delivery a worker took was extended")
	}
	w.take(f, 0)
	w.take(f, 0) // twice: counted once
	w.mu.Lock()
	_, watched := w.frames[f]
	w.mu.Unlock()
	if !watched {
		t.Fatal("a frame with a delivery not taken is no longer watched")
	}
	w.take(f, 2)
	w.mu.Lock()
	_, watched = w.frames[f]
	w.mu.Unlock()
	if watched {
		t.Fatal("a frame whose deliveries were all taken is still watched")
	}
	w.take(nil, 0) // a frame add did not watch
}

func extended(s *session, offset int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.pending.extends {
		if r.offset == offset {
			return true
		}
	}
	return false
}

func awaitExtended(t *testing.T, s *session, what string, offsets ...int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		all := true
		for _, o := range offsets {
			all = all && extended(s, o)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
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
