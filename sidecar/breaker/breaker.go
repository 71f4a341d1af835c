package breaker

import (
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"
)

// errFailed is the outcome fed to gobreaker for a failure toward the
// downstream.
var errFailed = errors.New("breaker: failure toward the downstream")

// gobreakerTimeout is the open time given to gobreaker. Its open and
// half-open states are never used (see the package comment): the gobreaker
// of a breaker is replaced before it could half-open on its own clock.
const gobreakerTimeout = 100 * 365 * 24 * time.Hour

// breaker is the breaker of one downstream.
type breaker struct {
	name  string
	state State

	// Closed state: gobreaker counts the current window's outcomes and
	// decides the trip (readyToTrip). It is replaced by a fresh one when the
	// window ends and when the breaker closes.
	gb        *gobreaker.CircuitBreaker[struct{}]
	windowEnd time.Time // zero: the window starts at the next outcome
	// carry is the run of failures (no success in between) at the end of
	// the previous windows: the consecutive rule is not windowed.
	carry uint64

	// Open and half-open states.
	openUntil time.Time // Open: when it half-opens
	reopens   int       // failed probes since it last closed
	probing   bool      // HalfOpen: the Set's probe is out for this breaker
}

func newBreaker(name string) *breaker {
	return &breaker{name: name}
}

// settings of the gobreaker of a breaker: no interval (the window is kept
// here, on the caller's clock), one probe, and the trip rule of cfg.
func (b *breaker) settings(cfg *Config) gobreaker.Settings {
	return gobreaker.Settings{
		Name:        b.name,
		MaxRequests: 1,
		Timeout:     gobreakerTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			run := uint64(c.ConsecutiveFailures)
			if c.TotalSuccesses == 0 {
				run += b.carry
			}
			if run >= uint64(cfg.ConsecutiveFailures) {
				return true
			}
			return int64(c.Requests) >= int64(cfg.MinRequests) &&
				float64(c.TotalFailures) >= cfg.FailureRatio*float64(c.Requests)
		},
	}
}

// run returns the current run of failures toward the downstream with no
// success in between.
func (b *breaker) run() uint64 {
	if b.gb == nil {
		return b.carry
	}
	c := b.gb.Counts()
	if c.TotalSuccesses == 0 {
		return b.carry + uint64(c.ConsecutiveFailures)
	}
	return uint64(c.ConsecutiveFailures)
}

// record counts one outcome of a closed breaker and reports whether it
// tripped.
func (b *breaker) record(cfg *Config, now time.Time, ok bool) (tripped bool) {
	if b.gb == nil || !now.Before(b.windowEnd) {
		b.carry = b.run()
		b.gb = gobreaker.NewCircuitBreaker[struct{}](b.settings(cfg))
		b.windowEnd = now.Add(cfg.Window)
	}
	_, _ = b.gb.Execute(func() (struct{}, error) {
		if ok {
			return struct{}{}, nil
		}
		return struct{}{}, errFailed
	})
	return b.gb.State() == gobreaker.StateOpen
}

// open moves the breaker to Open for cfg.OpenWait(b.reopens) and returns the
// transition.
func (b *breaker) open(cfg *Config, now time.Time) Transition {
	from := b.state
	w := cfg.OpenWait(b.reopens)
	b.state = Open
	b.openUntil = now.Add(w)
	b.probing = false
	b.gb, b.windowEnd, b.carry = nil, time.Time{}, 0
	return Transition{Downstream: b.name, From: from, To: Open, Wait: w}
}

// close moves a half-open breaker to Closed with fresh counts.
func (b *breaker) close() Transition {
	from := b.state
	b.state = Closed
	b.reopens = 0
	b.probing = false
	b.openUntil = time.Time{}
	b.gb, b.windowEnd, b.carry = nil, time.Time{}, 0
	return Transition{Downstream: b.name, From: from, To: Closed}
}
