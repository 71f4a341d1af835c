package engine

import (
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/internal/limits"
)

// Limits of a topic, the same in the controller (engine/meta) and the group
// coordinator (engine/groups/coord); internal/limits defines them and
// says why. The sidecar may allow less (sidecar/config.MaxPartitions).
const (
	// MaxPartitions is the most partitions of one topic.
	MaxPartitions = limits.MaxPartitions
	// MaxReplicationFactor is the most replicas of one partition.
	MaxReplicationFactor = limits.MaxReplicationFactor
	// MaxNameBytes is the longest topic or consumer group name.
	MaxNameBytes = limits.MaxNameBytes
)

// DeadLetterHeadroomBytes is the room a log batch keeps, beyond the largest
// message, for what dead-lettering adds to it: the dead-letter headers
// (reason, error text, attempts, origin) with their framing. Whoever writes
// dead letters must keep those headers under it, so that a dead letter of a
// maximal message is always accepted.
const DeadLetterHeadroomBytes = 64 << 10

// MaxBatchBytesFor is the log batch limit (LogOptions.MaxBatchBytes) that
// admits any message the sidecar's limits allow, and its dead letter: key,
// payload and header names and values of maxMessageBytes, an id of at most
// maxIDBytes, at most maxHeaders headers, plus DeadLetterHeadroomBytes. It
// is never below the log's default (appends of many small messages).
func MaxBatchBytesFor(maxMessageBytes, maxIDBytes, maxHeaders int) int {
	return max(log.DefaultMaxBatchBytes, maxMessageBytes+maxIDBytes+log.MaxRecordFraming(maxHeaders)+DeadLetterHeadroomBytes)
}
