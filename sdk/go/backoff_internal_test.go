package spool

import (
	"math"
	"testing"
	"time"
)

// The reconnect delay: full jitter under a cap that doubles from base at
// attempt 0 up to max, whatever the attempt.
func TestBackoffDelay(t *testing.T) {
	b := backoffConfig{base: 100 * time.Millisecond, max: 5 * time.Second}
	for _, tc := range []struct {
		attempt int
		draw    float64
		want    time.Duration
	}{
		{0, 0, 0},
		{0, 0.5, 50 * time.Millisecond},
		{1, 0.5, 100 * time.Millisecond},
		{3, 0.25, 200 * time.Millisecond},
		{10, 0.5, 2500 * time.Millisecond},
		{math.MaxInt, 0.5, 2500 * time.Millisecond},
		{math.MaxInt, 1, 5 * time.Second},
	} {
		if got := b.delay(tc.attempt, tc.draw); got != tc.want {
			t.Errorf("delay(%d, %v) = %v, want %v", tc.attempt, tc.draw, got, tc.want)
		}
	}
}
