package ledger

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestMemoryTTLExpires(t *testing.T) {
	clock := &fakeClock{t: t0}
	m := NewMemory(clock.now)
	x := h{t, subject{l: m, group: "g"}}
	x.one(ownerA, t0, "m")
	x.complete("m", 1) // dayTTL from now
	clock.add(dayTTL - time.Millisecond)
	want(t, x.one(ownerA, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
	clock.add(time.Millisecond)
	want(t, x.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
}

// Entries nobody reads again are swept once the map has doubled, so --dev
// memory follows live entries, not everything ever seen.
func TestMemorySweepsExpiredEntries(t *testing.T) {
	clock := &fakeClock{t: t0}
	m := NewMemory(clock.now)
	ctx := ctxT(t)
	for round := range 10 {
		cs := make([]Claim, 1000)
		for i := range cs {
			cs[i] = Claim{ID: fmt.Sprintf("%d-%d", round, i), Lease: t0}
		}
		if _, err := m.Claim(ctx, "g", ownerA, t0, time.Minute, cs); err != nil {
			t.Fatal(err)
		}
		clock.add(time.Hour)
	}
	m.mu.Lock()
	n := len(m.entries)
	m.mu.Unlock()
	if n > 2*minSweepSize+1000 {
		t.Fatalf("%d entries kept, most of them expired", n)
	}
	if got := m.Len(); got != 0 {
		t.Fatalf("Len = %d after every entry expired", got)
	}
}

func TestMemoryClosed(t *testing.T) {
	m := NewMemory(nil)
	_ = m.Close()
	if err := claimOne(m, t, "m"); !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v", err)
	}
}
