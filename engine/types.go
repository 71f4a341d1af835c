package engine

import (
	"github.com/spoolmq/spool/engine/groups"
	"github.com/spoolmq/spool/engine/log"
)

// The engine's types, as the sidecar sees them. They are aliases of the
// storage layer's types rather than copies: a fetch returns the records
// decoded from the log without converting each one (the hot path), and a
// backend other than the embedded log fills the same structs.
type (
	// Record is one message: id, key, value, headers and append time.
	Record = log.Record
	// Header is one record header.
	Header = log.Header
	// Position is a group's committed position in one partition: the next
	// offset to deliver and the offsets above it already finished.
	Position = groups.Position
	// OffsetOutOfRangeError: the offset asked for is below the partition's
	// log start (retention deleted it) or past its end.
	OffsetOutOfRangeError = log.OffsetOutOfRangeError
	// LogOptions configures the embedded partition log.
	LogOptions = log.Options
	// SyncStats count the embedded log's syncs (Node.SyncStats).
	SyncStats = log.SyncStats
	// FsyncMode selects when the embedded log acknowledges an append.
	FsyncMode = log.FsyncMode
)

// Fsync modes of the embedded log.
const (
	// FsyncAlways acknowledges an append once it is fdatasynced.
	FsyncAlways = log.FsyncAlways
	// FsyncInterval acknowledges after write(2) and syncs on a timer (lossy
	// on a machine crash).
	FsyncInterval = log.FsyncInterval
)

// ErrBatchTooLarge: an append encodes to more than the log's batch limit.
var ErrBatchTooLarge = log.ErrBatchTooLarge
