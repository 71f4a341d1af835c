package main

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	for _, us := range []uint64{0, 1, 31, 32, 33, 63, 64, 100, 1000, 12345, 1 << 30} {
		b := bucketOf(us)
		if lo, hi := lowerBound(b), lowerBound(b+1); us < lo || us >= hi {
			t.Fatalf("%d µs in bucket %d = [%d, %d)", us, b, lo, hi)
		}
	}
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	if p50 := h.quantileMs(0.5); p50 < 485 || p50 > 515 {
		t.Fatalf("p50 = %v ms, want about 500", p50)
	}
	if p99 := h.quantileMs(0.99); p99 < 960 || p99 > 1000 {
		t.Fatalf("p99 = %v ms, want about 990", p99)
	}
}

func TestIDSet(t *testing.T) {
	s, want := newIDSet(130), newIDSet(130)
	for _, x := range []uint64{0, 64, 129} {
		want.add(x)
	}
	if !s.add(64) || s.add(64) || s.add(130) {
		t.Fatal("add must report new ids once and ignore out-of-range ones")
	}
	if s.count() != 1 || s.missing(want) != 2 || !s.has(64) || s.has(0) {
		t.Fatalf("count %d missing %d", s.count(), s.missing(want))
	}
}

// TestWaitCoveredTimesOut: a run whose deadline comes before every
// acknowledged message was handled ends with errNotCovered (the result
// says timed_out), and one where all were handled ends without error.
func TestWaitCoveredTimesOut(t *testing.T) {
	ps := &pubStats{acked: newIDSet(4), lat: new(histogram), done: make(chan struct{})}
	cs := newConsStats(4, 1)
	for seq := range uint64(4) {
		ps.acked.add(seq)
	}
	ps.ackedN.Store(4)
	close(ps.done)
	for seq := range uint64(3) {
		cs.seen.add(seq)
	}
	cs.distinct.Store(3)
	if _, err := waitCovered(context.Background(), ps, cs, 50*time.Millisecond); !errors.Is(err, errNotCovered) {
		t.Fatalf("3 of 4 handled: %v, want errNotCovered", err)
	}
	cs.seen.add(3)
	cs.distinct.Store(4)
	if _, err := waitCovered(context.Background(), ps, cs, time.Minute); err != nil {
		t.Fatalf("all handled: %v", err)
	}
}
