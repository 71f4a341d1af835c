package engine

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// TopicSpec declares a topic.
type TopicSpec struct {
	Name           string
	Partitions     int32
	RetentionAge   time.Duration // 0 keeps forever
	RetentionBytes int64         // per partition; 0 is unlimited
}

// ErrDeleteUnsupported: topic deletion is not available here (an internal
// topic, or a cluster sidecar with storage off, which is not a member).
var ErrDeleteUnsupported = errors.New("topic deletion not supported")

// PartitionName is the log's name for a topic partition: "<topic>-<n>".
func PartitionName(topic string, p int32) string {
	return topic + "-" + strconv.Itoa(int(p))
}

// Acks chooses when a produce completes in a cluster (docs/semantics.md,
// "Replication").
type Acks uint8

const (
	// AcksAll (the default) completes once the records are committed: on
	// disk on a quorum of the partition's replicas.
	AcksAll Acks = iota
	// AcksLeader completes once the records are on disk on the partition's
	// leader, before its followers have them: faster, and lossy — the
	// records are lost if the leader fails or is cut off before a follower
	// has them and a new leader is elected without them. Readers still see
	// the records only once committed. On a single node it is AcksAll.
	AcksLeader
)

func (a Acks) String() string {
	if a == AcksLeader {
		return "leader"
	}
	return "all"
}

// ProduceOptions are the choices of one ProduceWith.
type ProduceOptions struct {
	Acks Acks
	// Context is the caller's (nil: none). Once it ends, the caller has
	// gone: records not yet sent towards the partition's leader are not
	// sent (done gets an error wrapping the context's), and a leader does
	// not propose a forwarded batch whose every caller has gone. Records
	// already proposed are not withdrawn: their outcome is unknown to the
	// caller. The cluster engine honours it; a single node appends at once
	// and has nothing to hold back.
	Context context.Context
}

// ErrTopicInUse: a topic a consumer group's member subscribes to (or owns
// a partition of) cannot be deleted.

var ErrTopicInUse = errors.New("topic in use")

// ErrNotPlaced: the topic's partitions have no replicas yet (fewer nodes
// than its replication factor).
var ErrNotPlaced = errors.New("engine: topic not placed yet")

// ErrOffsetsUnknown: this node cannot tell a partition's offsets yet — it
// restarted and has not read the cluster's placement of the partition up
// to what the controller's leader holds. Retry in a moment: reporting what
// it held before would let offsets go back.
var ErrOffsetsUnknown = errors.New("engine: offsets not known yet")

// ErrNoLeader: no leader of the partition could be found or reached in time.

var ErrNoLeader = errors.New("engine: no leader")

// ErrQuarantined: the partition is quarantined because its data is damaged.
// It serves the records before the damage and refuses appends until an
// operator repairs it (spoold repair, docs/operations.md). Not retryable.
var ErrQuarantined = errors.New("partition quarantined")
