package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Defaults of the Subscribe options.
const (
	DefaultConcurrency   = 64
	DefaultDrainTimeout  = 30 * time.Second
	DefaultReconnectBase = 100 * time.Millisecond
	DefaultReconnectMax  = 5 * time.Second
	// DefaultMaxReceiveBytes is the largest delivery frame a Subscribe
	// stream accepts by default: 64 MiB, the largest limits.max_message_bytes
	// spoold allows, plus 1 MiB for the delivery's other fields (id, topic,
	// last error) and framing. The sidecar bounds its frames below it; gRPC's
	// own default, 4 MiB, would refuse a message the sidecar accepted.
	DefaultMaxReceiveBytes  = 65 << 20
	minReceiveBytes         = 64 << 10
	maxReceiveBytes         = 1 << 30
	maxConcurrency          = 1 << 16
	maxCredit               = 1 << 20
	abandonAfterCancelGrace = time.Second     // wait for handlers after cancelling their ctx at the drain timeout
	closeStreamTimeout      = 5 * time.Second // wait for the sidecar to end the stream after CloseSend
)

// SubscribeOption configures Subscribe.
type SubscribeOption func(*subscribeConfig)

type subscribeConfig struct {
	concurrency  int
	prefetch     int // -1: same as concurrency
	consumerName string
	appVersion   string
	drainTimeout time.Duration
	backoff      backoffConfig
	maxReceive   int
	logger       *slog.Logger
	stats        *Stats
	// tracerProvider receives the handler spans (nil: the global one).
	tracerProvider trace.TracerProvider
}

func newSubscribeConfig(opts []SubscribeOption) (subscribeConfig, error) {
	c := subscribeConfig{
		concurrency:  DefaultConcurrency,
		prefetch:     -1,
		drainTimeout: DefaultDrainTimeout,
		backoff:      backoffConfig{base: DefaultReconnectBase, max: DefaultReconnectMax},
		maxReceive:   DefaultMaxReceiveBytes,
	}
	for _, o := range opts {
		o(&c)
	}
	return c, c.validate()
}

// validate fills defaults and rejects nonsense once.
func (c *subscribeConfig) validate() error {
	if c.concurrency < 1 || c.concurrency > maxConcurrency {
		return fmt.Errorf("spool: WithConcurrency(%d): use 1..%d", c.concurrency, maxConcurrency)
	}
	if c.prefetch < 0 {
		c.prefetch = c.concurrency
	}
	if c.concurrency+c.prefetch > maxCredit {
		return fmt.Errorf("spool: WithPrefetch(%d): concurrency+prefetch must be at most %d", c.prefetch, maxCredit)
	}
	if c.drainTimeout < 0 {
		return fmt.Errorf("spool: WithDrainTimeout(%s): use 0 (do not wait) or a positive duration", c.drainTimeout)
	}
	if c.backoff.base <= 0 || c.backoff.max < c.backoff.base {
		return fmt.Errorf("spool: WithReconnectBackoff(%s, %s): base must be positive and max at least base", c.backoff.base, c.backoff.max)
	}
	if c.maxReceive < minReceiveBytes || c.maxReceive > maxReceiveBytes {
		return fmt.Errorf("spool: WithMaxReceiveBytes(%d): use %d..%d, at least the sidecar's limits.max_message_bytes plus 1 MiB", c.maxReceive, minReceiveBytes, maxReceiveBytes)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.stats == nil {
		c.stats = new(Stats)
	}
	return nil
}

// credit is the number of deliveries outstanding at most: running plus prefetched.
func (c *subscribeConfig) credit() int { return c.concurrency + c.prefetch }

// WithConcurrency sets how many handlers run at once (default 64).
func WithConcurrency(n int) SubscribeOption { return func(c *subscribeConfig) { c.concurrency = n } }

// WithPrefetch sets how many deliveries may wait, already received, beyond
// those running (default: the concurrency). 0 disables prefetching: a new
// delivery is only requested when a handler finishes.
func WithPrefetch(n int) SubscribeOption {
	return func(c *subscribeConfig) {
		if n < 0 {
			n = 0
		}
		c.prefetch = n
	}
}

// WithConsumerName names this consumer in the sidecar's logs and metrics
// (for example the pod name). Default: empty, the sidecar picks one.
func WithConsumerName(name string) SubscribeOption {
	return func(c *subscribeConfig) { c.consumerName = name }
}

// WithAppVersion records the application version in dead-letter entries.
func WithAppVersion(v string) SubscribeOption {
	return func(c *subscribeConfig) { c.appVersion = v }
}

// WithDrainTimeout bounds how long Subscribe waits for running handlers after
// its ctx is cancelled (default 30 s). When it passes, the handlers' ctx is
// cancelled. Keep it below the pod's termination grace period.
func WithDrainTimeout(d time.Duration) SubscribeOption {
	return func(c *subscribeConfig) { c.drainTimeout = d }
}

// WithReconnectBackoff sets the reconnect delay: exponential from base up to
// max, with full jitter (default 100 ms, 5 s). It paces attempts at a
// sidecar that refuses or breaks the stream; a sidecar that was unreachable
// is used as soon as the connection to it is back, without waiting it out.
func WithReconnectBackoff(base, max time.Duration) SubscribeOption {
	return func(c *subscribeConfig) { c.backoff = backoffConfig{base: base, max: max} }
}

// WithMaxReceiveBytes sets the largest delivery frame the Subscribe stream
// accepts (its gRPC MaxCallRecvMsgSize; default DefaultMaxReceiveBytes,
// 65 MiB). It is stated in Start.max_receive_bytes and the sidecar keeps its
// frames below it, so it only needs to exceed the largest message the
// sidecar accepts (limits.max_message_bytes) by 1 MiB. A message too large
// for it makes Subscribe return an error saying so. Lower it to bound the
// memory one frame can take when messages are small.
func WithMaxReceiveBytes(n int) SubscribeOption {
	return func(c *subscribeConfig) { c.maxReceive = n }
}

// WithLogger sets the logger (default slog.Default()). Reconnects and
// rejected settlements are logged at Warn, handler panics at Error.
func WithLogger(l *slog.Logger) SubscribeOption {
	return func(c *subscribeConfig) { c.logger = l }
}

// WithStats makes Subscribe count what it does into s, which the caller may
// read at any time (for example to export metrics).
func WithStats(s *Stats) SubscribeOption {
	return func(c *subscribeConfig) { c.stats = s }
}

// Stats counts what a Subscribe call did. All fields are safe to read concurrently.
type Stats struct {
	Delivered    atomic.Int64 // deliveries received
	Acked        atomic.Int64 // settled ACK
	Retried      atomic.Int64 // settled RETRY (errors and panics)
	DeadLettered atomic.Int64 // settled DEAD_LETTER
	Released     atomic.Int64 // handed back unstarted (drain) or sent beyond credit
	Dropped      atomic.Int64 // settlements dropped because their stream broke
	Extended     atomic.Int64 // lease extensions sent
	SettleErrors atomic.Int64 // settlements the sidecar rejected (SettleError frames)
	Reconnects   atomic.Int64 // streams opened after the first
	Panics       atomic.Int64 // handler panics recovered
}

// errAbandoned is returned when handlers did not return after the drain
// timeout cancelled their ctx.
var errAbandoned = errors.New("handlers still running after the drain timeout cancelled their ctx; they were abandoned and their messages will be redelivered when the lease ends: make handlers return when ctx is done")
