package apps

import (
	"testing"
	"time"
)

// Each step takes n at the time given (seconds from the start); the bucket
// is 10 tokens/s with a burst of 5.
func TestBucket(t *testing.T) {
	type step struct {
		at   float64
		n    float64
		ok   bool
		wait time.Duration
		left float64
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"burst then refused", []step{
			{0, 5, true, 0, 0},
			{0, 1, false, 100 * time.Millisecond, 0},
		}},
		{"recovers at the rate", []step{
			{0, 5, true, 0, 0},
			{0.1, 1, true, 0, 0},
			{0.1, 1, false, 100 * time.Millisecond, 0},
			{0.35, 2, true, 0, 0.5},
		}},
		{"never above the burst", []step{
			{100, 5, true, 0, 0},
			{100, 1, false, 100 * time.Millisecond, 0},
		}},
		{"a batch larger than the burst waits for a full bucket and leaves debt", []step{
			{0, 1, true, 0, 4},
			{0, 12, false, 100 * time.Millisecond, 4},
			{0.1, 12, true, 0, -7},
			{0.1, 1, false, 800 * time.Millisecond, -7},
			{0.9, 1, true, 0, 0},
		}},
		{"a clock going back earns nothing", []step{
			{1, 5, true, 0, 0},
			{0.5, 1, false, 100 * time.Millisecond, 0},
			{1.1, 1, true, 0, 0},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Unix(1_700_000_000, 0)
			at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
			b := NewBucket(10, 5, at(0))
			for i, s := range c.steps {
				ok, wait := b.Take(at(s.at), s.n)
				if ok != s.ok || wait != s.wait {
					t.Fatalf("step %d: Take(%v, %v) = %v, %v; want %v, %v", i, s.at, s.n, ok, wait, s.ok, s.wait)
				}
				if left := b.Tokens(at(s.at)); left < s.left-1e-9 || left > s.left+1e-9 {
					t.Fatalf("step %d: %v tokens left, want %v", i, left, s.left)
				}
			}
		})
	}
}
