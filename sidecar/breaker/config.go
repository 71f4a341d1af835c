package breaker

import (
	"fmt"
	"math"
	"time"

	"github.com/spoolmq/spool/internal/backoff"
)

// Defaults filled in by Validate for zero fields. They match the sidecar's
// configuration defaults (sidecar/config/defaults.go).
const (
	DefaultConsecutiveFailures = 5
	DefaultFailureRatio        = 0.5
	DefaultMinRequests         = 20
	DefaultWindow              = 10 * time.Second
	DefaultOpenTimeout         = 5 * time.Second
	DefaultMaxOpenTimeout      = 60 * time.Second
	DefaultMaxDownstreams      = 64
)

// Limits.
const (
	// MaxDownstreamsLimit bounds Config.MaxDownstreams.
	MaxDownstreamsLimit = 4096
	// MaxDownstreamNameBytes is the longest downstream name that gets a
	// breaker of its own; longer names (and names that are not valid UTF-8,
	// which could not be a metric label) count toward OtherDownstream.
	MaxDownstreamNameBytes = 128
	// OtherDownstream names the one shared breaker that counts failures
	// toward downstreams beyond MaxDownstreams (and unusable names). A retry
	// tagged "other" by the app feeds the same breaker.
	OtherDownstream = "other"
)

// Config holds the thresholds of the breakers of one subscription. Zero
// fields mean the defaults (after Validate).
type Config struct {
	// ConsecutiveFailures trips a breaker after this many failures toward its
	// downstream with no success in between, however long that takes (the
	// window does not reset this count). Default 5.
	ConsecutiveFailures int
	// FailureRatio trips a breaker when at least this share of the requests
	// seen in the current window failed… Default 0.5.
	FailureRatio float64
	// MinRequests …provided the window saw at least this many. Default 20.
	MinRequests int
	// Window is the fixed counting window of the ratio rule: it starts at the
	// first outcome after the previous one ended. Default 10s.
	Window time.Duration
	// OpenTimeout is how long a breaker stays open before it lets one probe
	// through. Default 5s.
	OpenTimeout time.Duration
	// MaxOpenTimeout caps the open time, which doubles after each failed
	// probe. Default 60s.
	MaxOpenTimeout time.Duration
	// MaxDownstreams bounds the downstreams with a breaker of their own;
	// beyond it, failures count toward the shared OtherDownstream breaker, so
	// a Set holds at most MaxDownstreams+1 breakers. Default 64.
	MaxDownstreams int
}

// Validate fills defaults for zero fields and rejects nonsense.
func (c *Config) Validate() error {
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if c.FailureRatio == 0 {
		c.FailureRatio = DefaultFailureRatio
	}
	if c.MinRequests == 0 {
		c.MinRequests = DefaultMinRequests
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.MaxOpenTimeout == 0 {
		c.MaxOpenTimeout = max(DefaultMaxOpenTimeout, c.OpenTimeout)
	}
	if c.MaxDownstreams == 0 {
		c.MaxDownstreams = DefaultMaxDownstreams
	}
	switch {
	case c.ConsecutiveFailures < 0 || c.ConsecutiveFailures > math.MaxInt32:
		return fmt.Errorf("breaker: ConsecutiveFailures = %d: must be between 1 and %d (0 means the default, %d)", c.ConsecutiveFailures, math.MaxInt32, DefaultConsecutiveFailures)
	case !(c.FailureRatio > 0 && c.FailureRatio <= 1): // also catches NaN
		return fmt.Errorf("breaker: FailureRatio = %v: must be above 0 and at most 1 (0 means the default, %v)", c.FailureRatio, DefaultFailureRatio)
	case c.MinRequests < 0 || c.MinRequests > math.MaxInt32:
		return fmt.Errorf("breaker: MinRequests = %d: must be between 1 and %d (0 means the default, %d)", c.MinRequests, math.MaxInt32, DefaultMinRequests)
	case c.Window < 0:
		return fmt.Errorf("breaker: Window = %v: must be > 0 (0 means the default, %v)", c.Window, DefaultWindow)
	case c.OpenTimeout < 0:
		return fmt.Errorf("breaker: OpenTimeout = %v: must be > 0 (0 means the default, %v)", c.OpenTimeout, DefaultOpenTimeout)
	case c.MaxOpenTimeout < c.OpenTimeout:
		return fmt.Errorf("breaker: MaxOpenTimeout = %v is below OpenTimeout = %v: must be ≥ OpenTimeout", c.MaxOpenTimeout, c.OpenTimeout)
	case c.MaxDownstreams < 0 || c.MaxDownstreams > MaxDownstreamsLimit:
		return fmt.Errorf("breaker: MaxDownstreams = %d: must be between 1 and %d (0 means the default, %d)", c.MaxDownstreams, MaxDownstreamsLimit, DefaultMaxDownstreams)
	}
	return nil
}

// MaxConsecutiveFailures is the largest ConsecutiveFailures that keeps the
// promise of docs/breaker.md with a subscription's max_attempts: detecting
// an outage never brings a message to its last attempt. Detection costs at
// most ConsecutiveFailures-1 counted failures in all (the failure that
// trips is not counted), so a message that had no failed attempt before the
// outage is at attempt ConsecutiveFailures at most when delivery pauses:
// that must stay below maxAttempts. With maxAttempts 1 every message is on
// its last attempt; 1 is allowed there (detection then costs no attempt).
func MaxConsecutiveFailures(maxAttempts int) int {
	return max(1, maxAttempts-1)
}

// DefaultConsecutiveFailuresFor is the default ConsecutiveFailures of a
// subscription with this max_attempts: DefaultConsecutiveFailures, lowered
// to MaxConsecutiveFailures(maxAttempts).
func DefaultConsecutiveFailuresFor(maxAttempts int) int {
	return min(DefaultConsecutiveFailures, MaxConsecutiveFailures(maxAttempts))
}

// OpenWait returns how long a breaker stays open after the given number of
// consecutive reopens (0 for the open that follows the closed state):
// min(MaxOpenTimeout, OpenTimeout·2^reopens), the cap of internal/backoff's
// formula without jitter (a breaker's probe is one request, not a crowd of
// clients to spread). It never overflows.
func (c Config) OpenWait(reopens int) time.Duration {
	b := backoff.Config{Base: c.OpenTimeout, Max: c.MaxOpenTimeout, Multiplier: 2}
	return b.Cap(min(reopens, math.MaxInt-1) + 1)
}

// State is the state of one breaker. Its values are those of the
// spool_breaker_state metric (docs/metrics.md) and of gobreaker.State.
type State int

const (
	// Closed: deliveries flow; failures are counted.
	Closed State = 0
	// HalfOpen: the open time has passed; one probe delivery may go out.
	HalfOpen State = 1
	// Open: the subscription is paused until the open time has passed.
	Open State = 2
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Transition is a change of one breaker's state, for logs and metrics.
type Transition struct {
	Downstream string
	From, To   State
	// Wait is the open time, for transitions to Open.
	Wait time.Duration
}

func (t Transition) String() string {
	if t.To == Open {
		return fmt.Sprintf("%s: %v → %v for %v", t.Downstream, t.From, t.To, t.Wait)
	}
	return fmt.Sprintf("%s: %v → %v", t.Downstream, t.From, t.To)
}
