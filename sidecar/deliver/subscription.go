package deliver

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// Engine is what delivery needs from the log. embedded.Node implements it.
type Engine interface {
	Partitions(topic string) (int32, error)
	Produce(topic string, p int32, recs []engine.Record, done func(base int64, err error))
	Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error)
	// Watch signals ch (capacity 1, without blocking) whenever the
	// committed end of a partition of topics moves.
	Watch(topics []string, ch chan<- struct{}) (cancel func(), err error)
	// RecordTime returns the append time (Unix ms) of the record at offset.
	RecordTime(topic string, p int32, offset int64) (int64, error)
	Offsets(topic string, p int32) (start, end int64, err error)
	LoadPositions(group, topic string) (map[int32]engine.Position, error)
	CommitPositions(group, topic string, pos map[int32]engine.Position) error
}

// Mode says how the application receives a subscription's deliveries.
type Mode int

const (
	// ModeStream: the app opens a Subscribe stream.
	ModeStream Mode = iota
	// ModeCallback: the sidecar calls the app's HandlerService.Handle.
	ModeCallback
)

// Subscription is one topic consumed by a group.
type Subscription struct {
	Topic    string
	DLQTopic string
	Mode     Mode
	Tracker  tracker.Config
	// DedupeTTL is how long the ledger remembers a message (default 7 days).
	DedupeTTL time.Duration
	// RedisPolicy applies while the ledger is unavailable.
	RedisPolicy RedisPolicy
	// Breaker configures the circuit breakers toward the downstreams the app
	// names in its retries; nil disables them.
	Breaker *breaker.Config
	// Faults, when set, injects the faults of an unreliable network into
	// the subscription's deliveries (faults.go): for tests only.
	Faults *Faults
}

// GroupConfig configures a Group.
type GroupConfig struct {
	Name          string
	Subscriptions []Subscription
	// CommitInterval is how often changed positions are written (default 200ms).
	CommitInterval time.Duration
	// FetchMaxBytes bounds one read from a partition (default 1 MiB).
	FetchMaxBytes int
	// ReadsInFlight, when > 0, makes the group's reads on that many
	// readers, off the delivery loop, at most one per partition at a time:
	// for an engine whose reads are network round trips (a broker backend,
	// a cluster member reading from a peer), so that sends and acks go on
	// while partitions' reads overlap. 0 (the default) reads on the loop
	// itself, cheapest when a read is a file read.
	ReadsInFlight int
	// MemoryBytes bounds what the group holds for delivery: fetched records
	// in every partition's window, the windows' rings and dead letters being
	// published (budget.go). Default DefaultMemoryBytes; the sidecar gives
	// each group its share of delivery.memory_bytes.
	MemoryBytes int64
	// DrainTimeout bounds how long Run waits for in-flight deliveries to be
	// settled after its context ends (default 30s).
	DrainTimeout time.Duration
	// InboxSize bounds events queued for the loop (default 1024); senders
	// block when it is full, which pushes back on the app's stream.
	InboxSize int
	// DLQMaxInFlight bounds dead-letter publishes outstanding (default
	// DefaultDLQMaxInFlight).
	DLQMaxInFlight int
	// SidecarVersion is recorded in dead-letter entries.
	SidecarVersion string
	// Handler is the app's HandlerService, for subscriptions in ModeCallback.
	Handler spoolv1.HandlerServiceClient
	// Ledger dedupes deliveries by message id; nil delivers without dedupe.
	Ledger ledger.Ledger
	// Owner names this sidecar in the ledger (its node id).
	Owner string
	// LedgerWriteDelay is how long settlements (acks, releases, dead
	// letters) may be gathered before they are written to the ledger, so
	// that one call carries many (0: each batch is written at once). A
	// claim of a message whose settlement is gathered does not wait for it.
	LedgerWriteDelay time.Duration
	// Coordinator, in a cluster, shares the group's partitions with the
	// other sidecars whose apps consume it, and keeps its committed
	// positions (docs/groups.md, "In the sidecar"); nil: this sidecar
	// delivers every partition and keeps positions with the engine.
	Coordinator Coordinator
	// Membership configures the member (with a Coordinator only).
	Membership Membership
	// Tracer records a span per delivery attempt (sidecar/tracing), a
	// child of the message's trace context; nil: tracing is off and the
	// delivery loop does no tracing work.
	Tracer trace.Tracer
}

// Defaults for GroupConfig.
const (
	DefaultCommitInterval = 200 * time.Millisecond
	DefaultFetchMaxBytes  = 1 << 20
	DefaultMemoryBytes    = 16 << 20
	DefaultDrainTimeout   = 30 * time.Second
	DefaultInboxSize      = 1024
	DefaultDedupeTTL      = 7 * 24 * time.Hour
	// lagInterval is how often lag gauges are refreshed.
	lagInterval = time.Second
)

func (c *GroupConfig) validate() error {
	if c.Name == "" {
		return errors.New("deliver: group name is empty")
	}
	if len(c.Subscriptions) == 0 {
		return fmt.Errorf("deliver: group %q has no subscriptions", c.Name)
	}
	seen := map[string]bool{}
	callbacks := false
	for i := range c.Subscriptions {
		s := &c.Subscriptions[i]
		if s.Topic == "" || s.DLQTopic == "" {
			return fmt.Errorf("deliver: group %q subscription %d: topic and DLQ topic are required", c.Name, i)
		}
		if seen[s.Topic] {
			return fmt.Errorf("deliver: group %q subscribes to %q twice", c.Name, s.Topic)
		}
		seen[s.Topic] = true
		callbacks = callbacks || s.Mode == ModeCallback
		if s.DedupeTTL <= 0 {
			s.DedupeTTL = DefaultDedupeTTL
		}
		if err := s.Tracker.Validate(); err != nil {
			return fmt.Errorf("deliver: group %q topic %q: %w", c.Name, s.Topic, err)
		}
		if s.Faults != nil {
			if err := s.Faults.validate(); err != nil {
				return fmt.Errorf("deliver: group %q topic %q: %w", c.Name, s.Topic, err)
			}
		}
	}
	if c.Ledger != nil && c.Owner == "" {
		return fmt.Errorf("deliver: group %q: a ledger needs an owner name", c.Name)
	}
	if callbacks && c.Handler == nil {
		return fmt.Errorf("deliver: group %q has callback subscriptions but no app address to call: set app_address", c.Name)
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = DefaultFetchMaxBytes
	}
	if c.MemoryBytes <= 0 {
		c.MemoryBytes = DefaultMemoryBytes
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.DLQMaxInFlight <= 0 {
		c.DLQMaxInFlight = DefaultDLQMaxInFlight
	}
	if c.Coordinator != nil {
		if err := c.Membership.validate(c.Name); err != nil {
			return err
		}
	}
	if c.InboxSize <= 0 {
		c.InboxSize = DefaultInboxSize
	}
	return nil
}
