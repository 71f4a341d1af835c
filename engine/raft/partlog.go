package raft

import (
	"errors"
	"fmt"
	"sync"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// ErrLogCorrupt is the error a Replica stops with when its partition log
// fails a check (a *log.CorruptionError, which it also wraps) or fails in a
// way raft cannot be told about. The replica must not vote or lead again
// until an operator has dealt with the partition (docs/replication.md,
// "Wiring: one partition replicated").
var ErrLogCorrupt = errors.New("raft replica: partition log failed")

// PartitionLog is the EntryLog of a *log.Partition: the partition log seen
// by raft. It converts entries (log EntryData and EntryNormal are raft
// EntryNormal; conf changes map one to one) and maps the log's errors to
// raft's sentinels, unwrapped (raft compares them with ==).
//
// Any other error of the partition (a *log.CorruptionError from Entries, a
// closed partition) has no raft equivalent: raft panics on it. PartitionLog
// records the first such error before returning it, so that the Replica,
// which recovers raft's panic, can tell it from a bug and stop with
// ErrLogCorrupt instead (Failure).
type PartitionLog struct {
	p *slog.Partition

	mu     sync.Mutex
	failed error
}

// NewPartitionLog returns the EntryLog of p.
func NewPartitionLog(p *slog.Partition) *PartitionLog { return &PartitionLog{p: p} }

// FirstIndex implements EntryLog.
func (l *PartitionLog) FirstIndex() uint64 { return l.p.FirstIndex() }

// LastIndex implements EntryLog.
func (l *PartitionLog) LastIndex() uint64 { return l.p.LastIndex() }

// Term implements EntryLog.
func (l *PartitionLog) Term(i uint64) (uint64, error) {
	t, err := l.p.Term(i)
	if err != nil {
		return 0, l.mapErr(err)
	}
	return t, nil
}

// Entries implements EntryLog.
func (l *PartitionLog) Entries(lo, hi, maxBytes uint64) ([]raftpb.Entry, error) {
	ents, err := l.p.Entries(lo, hi, maxBytes)
	if err != nil {
		return nil, l.mapErr(err)
	}
	out := make([]raftpb.Entry, len(ents))
	for i, e := range ents {
		t, err := raftType(e.Type)
		if err != nil {
			return nil, l.mapErr(&slog.CorruptionError{File: l.p.Name(), Position: -1, Offset: -1,
				Reason: fmt.Sprintf("raft index %d: %v", e.Index, err)})
		}
		out[i] = raftpb.Entry{Index: e.Index, Term: e.Term, Type: t, Data: e.Data}
	}
	return out, nil
}

// Failure returns the first error of the partition that could not be
// given to raft as one of its sentinels, or nil.
func (l *PartitionLog) Failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

func (l *PartitionLog) mapErr(err error) error {
	switch {
	case errors.Is(err, slog.ErrCompacted):
		return etcdraft.ErrCompacted
	case errors.Is(err, slog.ErrUnavailable):
		return etcdraft.ErrUnavailable
	}
	err = fmt.Errorf("%w: partition %s: %w", ErrLogCorrupt, l.p.Name(), err)
	l.mu.Lock()
	if l.failed == nil {
		l.failed = err
	}
	l.mu.Unlock()
	return err
}

var _ EntryLog = (*PartitionLog)(nil)

// raftType maps a log entry type to raft's.
func raftType(t slog.EntryType) (raftpb.EntryType, error) {
	switch t {
	case slog.EntryData, slog.EntryNormal:
		return raftpb.EntryNormal, nil
	case slog.EntryConfChange:
		return raftpb.EntryConfChange, nil
	case slog.EntryConfChangeV2:
		return raftpb.EntryConfChangeV2, nil
	}
	return 0, fmt.Errorf("log entry type %v has no raft type", t)
}

// LogEntry converts a raft entry to the partition log's: a normal entry is
// EntryData if its Data is a record payload (log.PayloadType), else
// EntryNormal. Data is shared, not copied.
func LogEntry(e raftpb.Entry) (slog.Entry, error) {
	out := slog.Entry{Index: e.Index, Term: e.Term, Data: e.Data}
	switch e.Type {
	case raftpb.EntryNormal:
		out.Type = slog.PayloadType(e.Data)
	case raftpb.EntryConfChange:
		out.Type = slog.EntryConfChange
	case raftpb.EntryConfChangeV2:
		out.Type = slog.EntryConfChangeV2
	default:
		return out, fmt.Errorf("raft entry %d: unknown type %d", e.Index, e.Type)
	}
	return out, nil
}

// recordCount is the number of data offsets entry data of type t takes:
// the record count of a record payload (bytes 4 to 8), 0 otherwise.
func recordCount(t slog.EntryType, data []byte) int64 {
	if t != slog.EntryData {
		return 0
	}
	return int64(uint32(data[4]) | uint32(data[5])<<8 | uint32(data[6])<<16 | uint32(data[7])<<24)
}
