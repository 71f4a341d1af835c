package spool

import (
	"testing"
	"time"
)

// A lease timer that fires after the handler returned (Stop lost the race)
// must not extend the lease of a delivery already settled.
func TestLeaseKeeperStopsAtEnd(t *testing.T) {
	s := &session{sub: &subscriber{stats: new(Stats)}, wake: make(chan struct{}, 1)}
	s.visibilityMs.Store(90)
	w := &leaseKeeper{}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	defer w.timer.Stop()
	w.begin(s, deliveryRef{topic: "orders", offset: 7, token: 3}, 0)
	w.fire() // the timer while the handler runs: one extension
	w.end()
	w.fire() // a firing that raced end(): nothing
	s.mu.Lock()
	ext := append([]deliveryRef(nil), s.pending.extends...)
	s.mu.Unlock()
	if len(ext) != 1 || ext[0].offset != 7 || ext[0].token != 3 {
		t.Fatalf("extensions queued = %+v, want exactly one, for offset 7 token 3, before end", ext)
	}
}

// Credit for one frame: the deliveries it covers, never more than the frame
// nor than the credit, none when the credit is used up.
func TestCoveredByCredit(t *testing.T) {
	for _, tc := range []struct {
		available int64
		n, want   int
	}{{1, 3, 1}, {3, 3, 3}, {5, 3, 3}, {0, 2, 0}, {-1, 2, 0}, {4, 0, 0}} {
		if got := coveredByCredit(tc.available, tc.n); got != tc.want {
			t.Errorf("coveredByCredit(%d, %d) = %d, want %d", tc.available, tc.n, got, tc.want)
		}
	}
}
