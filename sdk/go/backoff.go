package spool

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/spoolmq/spool/internal/backoff"
)

// backoffConfig is an exponential backoff with full jitter: attempt n waits a
// uniformly random time in [0, min(max, base*2^n)). The formula is
// internal/backoff's, the sidecar's own.
type backoffConfig struct {
	base time.Duration
	max  time.Duration
}

// delay is pure: attempt counts from 0, draw is a uniform number in [0, 1).
func (b backoffConfig) delay(attempt int, draw float64) time.Duration {
	c := backoff.Config{Base: b.base, Max: b.max, Multiplier: 2}
	return c.Delay(min(attempt, math.MaxInt-1)+1, draw)
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
