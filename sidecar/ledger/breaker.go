package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerConfig tunes a Breaker. Zero or negative values take the defaults.
type BreakerConfig struct {
	// Timeout bounds each call (default 500 ms). A call that has no answer
	// by then fails with ErrUnavailable and counts as a failure.
	Timeout time.Duration
	// ConsecutiveFailures trips the breaker (default 5).
	ConsecutiveFailures int
	// OpenTimeout is how long the breaker stays open before it lets one
	// probe call through (half-open; default 2 s).
	OpenTimeout time.Duration
	// Name labels logs (default "redis-ledger").
	Name string
	// Logger receives the state transitions (default slog.Default()).
	Logger *slog.Logger
}

// Breaker defaults.
const (
	DefaultBreakerTimeout      = 500 * time.Millisecond
	DefaultConsecutiveFailures = 5
	DefaultOpenTimeout         = 2 * time.Second
)

func (c *BreakerConfig) validate() {
	if c.Timeout <= 0 {
		c.Timeout = DefaultBreakerTimeout
	}
	if c.ConsecutiveFailures <= 0 {
		c.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if c.OpenTimeout <= 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.Name == "" {
		c.Name = "redis-ledger"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Hooks observe the ledger; the sidecar adapts them to Prometheus metrics.
// They are called synchronously and must not call back into the Breaker.
type Hooks interface {
	// LedgerCall: one call (op is "claim", "complete", "release", "dead"
	// or "reset") of items items took d and ended with err (nil, or an
	// error; errors.Is(err, ErrUnavailable) for Redis failures and
	// refusals of the open breaker).
	LedgerCall(op string, items int, d time.Duration, err error)
	// LedgerBreaker: the breaker went from one state to another ("closed",
	// "half-open", "open").
	LedgerBreaker(from, to string)
}

// nopHooks observes nothing.
type nopHooks struct{}

// LedgerCall implements Hooks.
func (nopHooks) LedgerCall(string, int, time.Duration, error) {}

// LedgerBreaker implements Hooks.
func (nopHooks) LedgerBreaker(string, string) {}

// Breaker wraps a Ledger (normally Redis) with a per-call timeout and a
// circuit breaker: timeout → breaker, as one runner. While it is open every
// call fails at once with ErrUnavailable; after OpenTimeout one probe call
// goes through (half-open) and its outcome closes or reopens the breaker.
// The breaker never retries: what to do without the ledger is the delivery
// loop's policy.
type Breaker struct {
	l     Ledger
	cfg   BreakerConfig
	hooks Hooks
	cb    *gobreaker.CircuitBreaker[struct{}]

	mu           sync.Mutex
	lastErr      error     // the last failure, for the "opened" log line
	outageStart  time.Time // when the breaker last opened from closed
	failedProbes int       // half-open probes failed since then
}

var _ Ledger = (*Breaker)(nil)

// NewBreaker wraps l. hooks may be nil (nopHooks).
func NewBreaker(l Ledger, cfg BreakerConfig, hooks Hooks) *Breaker {
	if l == nil {
		panic("ledger.NewBreaker: nil Ledger")
	}
	if hooks == nil {
		hooks = nopHooks{}
	}
	cfg.validate()
	b := &Breaker{l: l, cfg: cfg, hooks: hooks}
	b.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        cfg.Name,
		MaxRequests: 1, // one probe while half-open
		Timeout:     cfg.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(cfg.ConsecutiveFailures)
		},
		OnStateChange: b.onStateChange,
		IsSuccessful:  func(err error) bool { return classify(err) == outcomeOK },
		IsExcluded:    func(err error) bool { return classify(err) == outcomeExcluded },
	})
	return b
}

// Available reports whether calls go through (closed or half-open).
func (b *Breaker) Available() bool { return b.cb.State() != gobreaker.StateOpen }

// State is the breaker's state: "closed", "half-open" or "open".
func (b *Breaker) State() string { return b.cb.State().String() }

// Close closes the wrapped ledger.
func (b *Breaker) Close() error { return b.l.Close() }

// onStateChange logs an outage once when it starts (WARN) and once when it
// ends (INFO, with its length and the number of failed probes). The probes
// in between (open → half-open → open every OpenTimeout) are DEBUG: an
// outage of an hour is two lines at the default level, not one per probe.
func (b *Breaker) onStateChange(_ string, from, to gobreaker.State) {
	log := b.cfg.Logger.With("breaker", b.cfg.Name)
	b.mu.Lock()
	last := b.lastErr
	switch {
	case to == gobreaker.StateOpen && from == gobreaker.StateClosed:
		b.outageStart, b.failedProbes = time.Now(), 0
	case to == gobreaker.StateOpen:
		b.failedProbes++
	}
	start, probes := b.outageStart, b.failedProbes
	b.mu.Unlock()
	switch {
	case to == gobreaker.StateOpen && from == gobreaker.StateClosed:
		log.Warn("redis ledger breaker open: ledger calls fail at once; deliveries follow redis_unavailable (pause or deliver without dedupe) until a probe succeeds",
			"last_error", fmt.Sprint(last), "probe_every", b.cfg.OpenTimeout.String())
	case to == gobreaker.StateOpen:
		log.Debug("redis ledger breaker: probe failed, still open", "last_error", fmt.Sprint(last), "failed_probes", probes)
	case to == gobreaker.StateHalfOpen:
		log.Debug("redis ledger breaker half-open: probing redis")
	case to == gobreaker.StateClosed:
		log.Info("redis ledger breaker closed: redis answers again",
			"down_for", time.Since(start).Round(time.Millisecond).String(), "failed_probes", probes)
	}
	b.hooks.LedgerBreaker(from.String(), to.String())
}

// outcome is how one call's error counts for the breaker.
type outcome int

const (
	outcomeOK       outcome = iota // Redis answered
	outcomeExcluded                // not Redis's doing: counts neither way
	outcomeFailure                 // Redis is down, slow or broken
)

// errCallerGone marks an error caused by the caller's own context ending.
var errCallerGone = errors.New("caller's context ended")

// classify decides, in one place, how an error counts toward the breaker
// and whether it means the ledger is unavailable:
//   - nil: OK.
//   - ErrInvalid and ErrClosed (caller bugs) and the caller's own context
//     ending (errCallerGone): excluded. Neither says anything about Redis, so
//     neither may trip the breaker nor close it.
//   - A WRONGTYPE reply: OK. Redis answered; one batch names a key that is
//     not a ledger hash, which retrying or pausing cannot fix. The error
//     goes to the caller unwrapped.
//   - Everything else is a failure: connection refused or reset, the
//     Breaker's timeout, pool timeout, ErrBadReply (a server we cannot
//     understand is as good as none), LOADING, READONLY, MASTERDOWN,
//     CLUSTERDOWN, OOM, NOAUTH and other error replies. These
//     come back wrapped in ErrUnavailable.
func classify(err error) outcome {
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, ErrInvalid), errors.Is(err, errCallerGone), errors.Is(err, ErrClosed):
		return outcomeExcluded
	case isDataError(err):
		return outcomeOK
	}
	return outcomeFailure
}

// unavailableError is every failure and refusal of the Breaker.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string {
	return "redis ledger unavailable: " + e.cause.Error() +
		"; deliveries pause (redis_unavailable: pause) or continue without dedupe (deliver)"
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

func (b *Breaker) do(ctx context.Context, op string, items int, fn func(ctx context.Context) error) error {
	start := time.Now()
	var callerErr error // the error as the wrapped ledger returned it, when the caller's context ended
	_, err := b.cb.Execute(func() (struct{}, error) {
		cctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
		defer cancel()
		err := fn(cctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			callerErr = err
			err = fmt.Errorf("%w: %w", errCallerGone, err)
		case cctx.Err() != nil || isTimeout(err):
			// The socket deadline (set from cctx) can fire a moment before
			// cctx itself reports it: both are this timeout.
			err = fmt.Errorf("no answer within %v: %w", b.cfg.Timeout, err)
		}
		if classify(err) == outcomeFailure {
			b.mu.Lock()
			b.lastErr = err
			b.mu.Unlock()
		}
		return struct{}{}, err
	})
	switch {
	case err == nil:
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		err = &unavailableError{cause: fmt.Errorf("%s breaker %w", b.cfg.Name, err)}
	case classify(err) == outcomeFailure:
		err = &unavailableError{cause: err}
	case errors.Is(err, errCallerGone):
		err = callerErr // the caller's own context ended: its error, as it was
	}
	b.hooks.LedgerCall(op, items, time.Since(start), err)
	return err
}

// Claim implements Ledger.
func (b *Breaker) Claim(ctx context.Context, group, owner string, now time.Time, ttl time.Duration, claims []Claim) ([]ClaimResult, error) {
	var res []ClaimResult
	err := b.do(ctx, "claim", len(claims), func(ctx context.Context) error {
		var err error
		res, err = b.l.Claim(ctx, group, owner, now, ttl, claims)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Complete implements Ledger.
func (b *Breaker) Complete(ctx context.Context, group string, ttl time.Duration, items []Finish) error {
	return b.do(ctx, "complete", len(items), func(ctx context.Context) error {
		return b.l.Complete(ctx, group, ttl, items)
	})
}

// Release implements Ledger.
func (b *Breaker) Release(ctx context.Context, group string, ttl time.Duration, items []Release) error {
	return b.do(ctx, "release", len(items), func(ctx context.Context) error {
		return b.l.Release(ctx, group, ttl, items)
	})
}

// Dead implements Ledger.
func (b *Breaker) Dead(ctx context.Context, group string, ttl time.Duration, items []Finish) error {
	return b.do(ctx, "dead", len(items), func(ctx context.Context) error {
		return b.l.Dead(ctx, group, ttl, items)
	})
}

// Reset implements Ledger.
func (b *Breaker) Reset(ctx context.Context, group string, ids []string) ([]ResetResult, error) {
	var res []ResetResult
	err := b.do(ctx, "reset", len(ids), func(ctx context.Context) error {
		var err error
		res, err = b.l.Reset(ctx, group, ids)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// isTimeout reports a network timeout (a read or dial deadline passed).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
