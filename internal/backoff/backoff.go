// Package backoff computes retry delays: exponential growth with a cap and
// jitter, as a pure function of the attempt number and a random draw. It is
// Spool's one backoff formula: the sidecar's redelivery of failed messages
// (sidecar/tracker), its circuit breakers' open time (sidecar/breaker, the
// cap alone) and the cluster transport's reconnects (engine/transport) use
// it; the Go SDK, a module of its own, has the full-jitter case of it
// (sdk/go/backoff.go).
//
// It owns no clock, no goroutines and no randomness source: the caller passes
// the random value, so the result replays exactly in tests. It must never
// import anything from Spool.
package backoff

import (
	"fmt"
	"math"
	"time"
)

// Defaults filled in by Validate for zero fields.
const (
	DefaultBase       = time.Second
	DefaultMax        = 60 * time.Second
	DefaultMultiplier = 2.0
)

// Config describes an exponential backoff. The zero value means the defaults
// (after Validate): base 1s, max 60s, multiplier 2, full jitter.
type Config struct {
	// Base is the cap of the first retry's delay (attempt 1).
	Base time.Duration
	// Max caps every delay.
	Max time.Duration
	// Multiplier is the growth factor per attempt; at least 1.
	Multiplier float64
	// Jitter is the part of each delay drawn at random: the delay after
	// attempt n is uniform in [(1-Jitter)·Cap(n), Cap(n)]. 0 means 1, full
	// jitter (uniform in [0, Cap(n)]), which spreads the retries of many
	// clients that failed together the most; 0.5 keeps every delay at
	// least half its cap (engine/transport's reconnects). At most 1.
	Jitter float64
}

// Validate fills defaults for zero fields and rejects nonsense.
func (c *Config) Validate() error {
	if c.Base == 0 {
		c.Base = DefaultBase
	}
	if c.Max == 0 {
		c.Max = DefaultMax
	}
	if c.Multiplier == 0 {
		c.Multiplier = DefaultMultiplier
	}
	switch {
	case c.Base < 0:
		return fmt.Errorf("backoff: Base = %v: must be > 0 (0 means the default, %v)", c.Base, DefaultBase)
	case c.Max < 0:
		return fmt.Errorf("backoff: Max = %v: must be > 0 (0 means the default, %v)", c.Max, DefaultMax)
	case c.Max < c.Base:
		return fmt.Errorf("backoff: Max = %v is below Base = %v: Max must be ≥ Base", c.Max, c.Base)
	case math.IsNaN(c.Multiplier) || math.IsInf(c.Multiplier, 0) || c.Multiplier < 1:
		return fmt.Errorf("backoff: Multiplier = %v: must be a finite number ≥ 1 (0 means the default, %v)", c.Multiplier, DefaultMultiplier)
	case !(c.Jitter >= 0 && c.Jitter <= 1): // also catches NaN
		return fmt.Errorf("backoff: Jitter = %v: must be between 0 and 1 (0 means 1, full jitter)", c.Jitter)
	}
	return nil
}

// Cap returns the upper bound of the delay after the given failed attempt:
// min(Max, Base * Multiplier^(attempt-1)). Attempts below 1 count as 1. It is
// non-decreasing in attempt and never overflows, whatever the attempt.
func (c Config) Cap(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if c.Base <= 0 || c.Max <= 0 {
		return 0
	}
	m := c.Multiplier
	if !(m >= 1) { // also catches NaN
		m = 1
	}
	f := float64(c.Base) * math.Pow(m, float64(attempt-1))
	if math.IsNaN(f) || f >= float64(c.Max) {
		return c.Max
	}
	return time.Duration(f)
}

// Delay returns the delay after the given failed attempt: (1-Jitter)·Cap
// plus rand·Jitter·Cap; with full jitter (Jitter 0 or 1), rand·Cap. rand is
// a uniform draw from [0, 1); values outside are clamped (NaN counts as 0).
// The result is never negative and never above Cap(attempt) ≤ Max.
func (c Config) Delay(attempt int, rand float64) time.Duration {
	if !(rand > 0) { // also catches NaN
		rand = 0
	}
	if rand > 1 {
		rand = 1
	}
	j := c.Jitter
	if !(j > 0 && j <= 1) { // 0 (or nonsense) is full jitter
		j = 1
	}
	limit := c.Cap(attempt)
	var d time.Duration
	if j == 1 {
		d = time.Duration(rand * float64(limit))
	} else {
		d = time.Duration((1-j)*float64(limit)) + time.Duration(rand*j*float64(limit))
	}
	if d > limit { // float rounding near 1 must not exceed the cap
		d = limit
	}
	if d < 0 {
		d = 0
	}
	return d
}
