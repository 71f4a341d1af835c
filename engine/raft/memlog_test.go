package raft

import (
	"fmt"
	"sync"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// memLog is an in-memory EntryLog for tests: ents[i] has index first+i.
// Everything appended is durable (the harness writes and "fsyncs" in one
// step).
type memLog struct {
	mu    sync.Mutex
	first uint64
	ents  []raftpb.Entry
}

func newMemLog() *memLog { return &memLog{first: 1} }

// entriesAt returns entries with consecutive indexes from lo and the given terms.
func entriesAt(lo uint64, terms ...uint64) []raftpb.Entry {
	var out []raftpb.Entry
	for i, t := range terms {
		out = append(out, raftpb.Entry{Index: lo + uint64(i), Term: t, Data: []byte(fmt.Sprintf("e%d", lo+uint64(i)))})
	}
	return out
}

func (l *memLog) FirstIndex() uint64 { l.mu.Lock(); defer l.mu.Unlock(); return l.first }
func (l *memLog) LastIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first + uint64(len(l.ents)) - 1
}

func (l *memLog) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i < l.first {
		return 0, etcdraft.ErrCompacted
	}
	if i-l.first >= uint64(len(l.ents)) {
		return 0, etcdraft.ErrUnavailable
	}
	return l.ents[i-l.first].Term, nil
}

func (l *memLog) Entries(lo, hi, maxBytes uint64) ([]raftpb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lo < l.first {
		return nil, etcdraft.ErrCompacted
	}
	if hi > l.first+uint64(len(l.ents)) || lo >= hi {
		return nil, etcdraft.ErrUnavailable
	}
	var out []raftpb.Entry
	var size uint64
	for _, e := range l.ents[lo-l.first : hi-l.first] {
		size += uint64(e.Size())
		if len(out) > 0 && size > maxBytes {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

// append writes ents, replacing any entries at or after ents[0].Index.
func (l *memLog) append(ents []raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	at := ents[0].Index
	if at < l.first || at > l.first+uint64(len(l.ents)) {
		return fmt.Errorf("memLog: append at %d, log holds [%d, %d]", at, l.first, l.first+uint64(len(l.ents))-1)
	}
	l.ents = append(l.ents[:at-l.first:at-l.first], ents...)
	return nil
}

// compact drops the entries up to and including i.
func (l *memLog) compact(i uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i >= l.first {
		l.ents = append([]raftpb.Entry(nil), l.ents[i-l.first+1:]...)
		l.first = i + 1
	}
}

// reset empties the log, which then starts at next.
func (l *memLog) reset(next uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.first, l.ents = next, nil
}

func (l *memLog) entry(i uint64) (raftpb.Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i < l.first || i-l.first >= uint64(len(l.ents)) {
		return raftpb.Entry{}, false
	}
	return l.ents[i-l.first], true
}
