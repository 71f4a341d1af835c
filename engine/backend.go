package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Backend is the seam between the sidecar and the log that stores its
// messages: everything publishing, delivery, dead letters, admin and lag
// need. The embedded log (*Node) implements it, and so do the backends
// over existing brokers (engine/jetstream); docs/backends.md says how each
// maps these calls.
//
// The contract is the one *Node documents: offsets of a partition are
// contiguous from its log start; Produce's done never runs on the caller's
// goroutine nor under a backend lock, and runs in append order per
// partition; Fetch, Offsets, RecordTime and Watch see only what is
// committed (what a reader after a failure will still see); a Fetch below
// the log start returns an *OffsetOutOfRangeError; errors wrap the
// sentinels of this package (ErrUnknownTopic, ErrClosed, ...) so that the
// sidecar can classify them.
type Backend interface {
	// Run serves until ctx ends (background work: appenders, watches).
	Run(ctx context.Context) error
	// Close releases what Open took; call it after Run has returned.
	Close() error

	// EnsureTopic creates the topic or checks it against spec.
	EnsureTopic(spec TopicSpec) error
	// Topics are the topics this backend serves, sorted by name.
	Topics() []TopicSpec
	// Partitions is the partition count of a topic.
	Partitions(topic string) (int32, error)
	// DeleteTopic removes a topic and every group's positions on it, or
	// says why not (ErrDeleteUnsupported).
	DeleteTopic(name string) error

	Produce(topic string, p int32, recs []Record, done func(base int64, err error))
	ProduceWith(topic string, p int32, recs []Record, opts ProduceOptions, done func(base int64, err error))
	Fetch(topic string, p int32, offset int64, maxBytes int, dst []Record) ([]Record, error)
	// Watch signals ch (capacity 1, without blocking) whenever the
	// committed end of a partition of topics moves.
	Watch(topics []string, ch chan<- struct{}) (cancel func(), err error)
	// RecordTime is the append time (Unix ms) of the record at offset.
	RecordTime(topic string, p int32, offset int64) (int64, error)
	// Offsets are a partition's log start and committed end.
	Offsets(topic string, p int32) (start, end int64, err error)
	// OffsetForTime is the first offset appended at or after ts.
	OffsetForTime(topic string, p int32, ts time.Time) (int64, error)

	// LoadPositions and CommitPositions keep a consumer group's committed
	// positions when the sidecar runs without a group coordinator.
	LoadPositions(group, topic string) (map[int32]Position, error)
	CommitPositions(group, topic string, pos map[int32]Position) error
}

// ClusterAdmin is the embedded log's cluster: status, replica moves and
// node removal. Backends over a broker leave it to the broker's own tools
// and do not implement it.
type ClusterAdmin interface {
	// ClusterStatus is the cluster as this node sees it; false when the
	// node is not in a cluster.
	ClusterStatus() (ClusterStatus, bool)
	DecommissionNode(ctx context.Context, id uint64) error
	// Leave hands this node's leaderships and replicas to the others and
	// leaves the cluster (cluster_leave.go).
	Leave(ctx context.Context) (LeaveReport, error)
	PlanMove(topic string, partition int32, replicas []uint64) (ReplicaMove, error)
	MoveReplicas(ctx context.Context, topic string, partition int32, replicas []uint64) (ReplicaMove, error)
	// FinalizeClusterVersion raises the cluster version to the highest
	// every node speaks (docs/upgrading.md); ErrClusterVersion when a node
	// does not speak a higher one or is unreachable.
	FinalizeClusterVersion(ctx context.Context) (ClusterVersionChange, error)
}

// FeatureGate is implemented by backends whose behaviour a cluster version
// gates (the embedded cluster, docs/upgrading.md): RequireFeature returns
// nil when the feature is on, else an error wrapping ErrClusterVersion
// that says what to do. A backend without it has every feature it offers.
type FeatureGate interface {
	RequireFeature(name string) error
}

// FeatureScheduledDelivery names scheduled delivery (FeatureGate): on once
// the cluster is finalized at cluster version 2.
const FeatureScheduledDelivery = "scheduled-delivery"

// ClusterVersionChange is what a finalization did.
type ClusterVersionChange struct{ Previous, Version uint32 }

// GroupCoordinator shares a consumer group's partitions among the
// sidecars of the group (docs/groups.md): the coordinator's commands and
// state of engine/groups/coord. The embedded log implements it in a
// cluster; a backend over a broker may implement it over the broker
// (engine/jetstream). The Kafka backend takes the same commands but, since
// Kafka and not this state machine assigns the partitions, describes a
// group as a view of its own (engine/kafka GroupView), which the sidecar
// reads through the same queries.
type GroupCoordinator interface {
	Coordinate(ctx context.Context, cmd GroupCommand) (GroupResult, error)
	DescribeGroup(ctx context.Context, group string) (*GroupState, error)
}

// Quarantiner reports partitions whose stored data is damaged (the
// embedded log; a broker reports its own damage).
type Quarantiner interface {
	Quarantined() []Quarantine
}

// ErrUnsupported: the storage backend does not offer the operation (an
// embedded-cluster operation asked of a broker backend, for example).
var ErrUnsupported = errors.New("not supported by this storage backend")

// UnsupportedError names the backend and the operation it does not offer,
// and says what to use instead. It matches ErrUnsupported.
type UnsupportedError struct {
	Backend string // embedded, jetstream, kafka
	Op      string // what was asked, like "decommission a node"
	Instead string // what to do instead
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: storage backend %s does not support it: %s", e.Op, e.Backend, e.Instead)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }
