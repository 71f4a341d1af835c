package engine

import (
	"errors"
	"fmt"

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

// Watch registers ch to be signalled, without blocking, whenever the
// committed end of any partition of the given topics moves. ch should have
// a capacity of 1: a signal already pending is enough. cancel unregisters.
func (n *Node) Watch(topics []string, ch chan<- struct{}) (cancel func(), err error) {
	ts := make([]*topic, 0, len(topics))
	n.mu.RLock()
	for _, name := range topics {
		t, ok := n.topics[name]
		if !ok {
			n.mu.RUnlock()
			return nil, fmt.Errorf("%w %q: declare it under topics in the sidecar's config", ErrUnknownTopic, name)
		}
		ts = append(ts, t)
	}
	n.mu.RUnlock()
	w := &watcher{ch: ch}
	for _, t := range ts {
		t.mu.Lock()
		if t.watchers == nil {
			t.watchers = map[*watcher]struct{}{}
		}
		t.watchers[w] = struct{}{}
		t.mu.Unlock()
	}
	return func() {
		for _, t := range ts {
			t.mu.Lock()
			delete(t.watchers, w)
			t.mu.Unlock()
		}
	}, nil
}

type watcher struct{ ch chan<- struct{} }

// RecordTime returns the append time, in Unix milliseconds, of the record at
// offset (for lag in seconds). It reads the header of the batch holding the
// offset, not the batch: the records of one append share its time.
func (n *Node) RecordTime(topicName string, p int32, offset int64) (int64, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, err
	}
	if end := part.committed.Load(); offset >= end {
		return 0, fmt.Errorf("engine: %s/%d: no record at offset %d (the committed end is %d)", topicName, p, offset, end)
	}
	if part.log == nil {
		return 0, fmt.Errorf("engine: %s/%d: this node holds no replica of it (lag in seconds is reported by the nodes that do)", topicName, p)
	}
	ts, err := part.log.BatchTime(offset)
	var ce *log.CorruptionError
	if errors.As(err, &ce) {
		n.quarantine(part, ce)
	}
	return ts, err
}
