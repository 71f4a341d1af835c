package tracker

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spoolmq/spool/internal/backoff"
)

// Ordering says which messages of a partition may be in flight together.
type Ordering int

const (
	// OrderKey (the default): at most one in-flight message per key, a key's
	// messages in offset order; messages with an empty key are unordered.
	OrderKey Ordering = iota
	// OrderPartition: at most one in-flight message in the partition, in
	// offset order.
	OrderPartition
	// OrderNone: full parallelism.
	OrderNone
)

func (o Ordering) String() string {
	switch o {
	case OrderKey:
		return "key"
	case OrderPartition:
		return "partition"
	case OrderNone:
		return "none"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// ParseOrdering parses "key" (or ""), "partition" or "none".
func ParseOrdering(s string) (Ordering, error) {
	switch s {
	case "key", "":
		return OrderKey, nil
	case "partition":
		return OrderPartition, nil
	case "none":
		return OrderNone, nil
	}
	return 0, fmt.Errorf("tracker: ordering %q: must be one of key, partition, none", s)
}

// Defaults filled in by Validate for zero fields.
const (
	DefaultMaxInFlight       = 256
	DefaultWindowMessages    = 1_000
	DefaultMaxParkedKeys     = 1_000
	DefaultMaxAttempts       = 5
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultMaxLease          = 12 * time.Hour
	DefaultMaxRetryAfter     = time.Hour

	// MaxWindowMessages bounds WindowMessages (memory per partition).
	MaxWindowMessages = 1 << 24
)

// Config of one Tracker. Zero fields mean the defaults.
type Config struct {
	Ordering Ordering
	// MaxInFlight bounds the deliveries outstanding at the app. Default 256.
	MaxInFlight int
	// WindowMessages bounds the records held (fetched but not complete):
	// when full, Wants returns 0. Default 1,000.
	WindowMessages int
	// MaxParkedKeys bounds the keys parked in a retry backoff: when reached,
	// Wants returns 0. Default 1,000.
	MaxParkedKeys int
	// MaxAttempts is the number of delivery attempts before a message goes to
	// the dead-letter output; attempts count from 1. Default 5.
	MaxAttempts int
	// VisibilityTimeout is the lease of a delivery. Default 30s.
	VisibilityTimeout time.Duration
	// MaxLease caps the deadline an app may ask for with Extend (from now).
	// Default 12h.
	MaxLease time.Duration
	// MaxRetryAfter caps the retry_after an app may ask for with Retry.
	// Default 1h.
	MaxRetryAfter time.Duration
	// Backoff of retries (and of dead-letter publish retries).
	Backoff backoff.Config
	// Rand returns a uniform draw from [0, 1) for the backoff's jitter.
	// Default math/rand/v2.Float64; tests pass a seeded or constant source.
	Rand func() float64
}

// Validate fills defaults for zero fields and rejects nonsense, naming the
// field, its value and what is allowed.
func (c *Config) Validate() error {
	if c.Ordering < OrderKey || c.Ordering > OrderNone {
		return fmt.Errorf("tracker: Ordering = %d: must be OrderKey, OrderPartition or OrderNone", int(c.Ordering))
	}
	type intField struct {
		name string
		v    *int
		def  int
		max  int
	}
	for _, f := range []intField{
		{"WindowMessages", &c.WindowMessages, DefaultWindowMessages, MaxWindowMessages},
		{"MaxInFlight", &c.MaxInFlight, DefaultMaxInFlight, MaxWindowMessages},
		{"MaxParkedKeys", &c.MaxParkedKeys, DefaultMaxParkedKeys, MaxWindowMessages},
		{"MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts, 1 << 20},
	} {
		if *f.v < 0 || *f.v > f.max {
			return fmt.Errorf("tracker: %s = %d: must be between 1 and %d (0 means the default, %d)", f.name, *f.v, f.max, f.def)
		}
		if *f.v == 0 {
			if f.name == "MaxInFlight" && c.WindowMessages < f.def {
				*f.v = c.WindowMessages // the default never exceeds the window
				continue
			}
			*f.v = f.def
		}
	}
	if c.MaxInFlight > c.WindowMessages {
		return fmt.Errorf("tracker: MaxInFlight = %d: must not exceed WindowMessages = %d", c.MaxInFlight, c.WindowMessages)
	}
	type durField struct {
		name string
		v    *time.Duration
		def  time.Duration
	}
	for _, f := range []durField{
		{"VisibilityTimeout", &c.VisibilityTimeout, DefaultVisibilityTimeout},
		{"MaxLease", &c.MaxLease, DefaultMaxLease},
		{"MaxRetryAfter", &c.MaxRetryAfter, DefaultMaxRetryAfter},
	} {
		if *f.v < 0 {
			return fmt.Errorf("tracker: %s = %v: must be > 0 (0 means the default, %v)", f.name, *f.v, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.VisibilityTimeout > c.MaxLease {
		return fmt.Errorf("tracker: VisibilityTimeout = %v: must not exceed MaxLease = %v", c.VisibilityTimeout, c.MaxLease)
	}
	if err := c.Backoff.Validate(); err != nil {
		return fmt.Errorf("tracker: Backoff: %w", err)
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return nil
}
