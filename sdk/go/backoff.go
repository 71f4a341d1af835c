package spool

import (
	"math"
	"math/rand/v2"
	"time"
)

// backoffConfig is an exponential backoff with full jitter: attempt n waits a
// uniformly random time in [0, min(max, base*2^n)). It is the full-jitter case
// of the sidecar's formula (internal/backoff of the server's module, which
// this module does not depend on).
type backoffConfig struct {
	base time.Duration
	max  time.Duration
}

// delay is pure: attempt counts from 0, draw is a uniform number in [0, 1)
// (clamped; NaN counts as 0). The result is never above max, whatever the
// attempt.
func (b backoffConfig) delay(attempt int, draw float64) time.Duration {
	if !(draw > 0) {
		draw = 0
	}
	limit := b.max
	if f := float64(b.base) * math.Pow(2, float64(max(attempt, 0))); f < float64(b.max) {
		limit = time.Duration(f)
	}
	return max(0, min(time.Duration(min(draw, 1)*float64(limit)), limit))
}

// next draws the delay for attempt from the global random source.
func (b backoffConfig) next(attempt int) time.Duration {
	return b.delay(attempt, rand.Float64())
}

// sleepCtx waits d or until ctx ends; it reports whether the full d passed.
func sleepCtx(ctx interface{ Done() <-chan struct{} }, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
