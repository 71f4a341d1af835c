package raft

import (
	"errors"
	"fmt"
	"sync"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// EntryLog is the partition log seen as a raft log: the entries this node
// holds durably, [FirstIndex, LastIndex]. engine/log implements it (with a
// conversion of its Entry type); tests use an in-memory one.
//
// Contract:
//   - An empty log has LastIndex == FirstIndex-1 (a new log: 1 and 0).
//   - Term(i) and Entries read only [FirstIndex, LastIndex]; outside it they
//     may return raft's ErrCompacted (below) or ErrUnavailable (above).
//   - Entries(lo, hi, maxBytes) returns the consecutive entries [lo, hi)
//     from lo, stopping before the total of raftpb.Entry.Size() exceeds
//     maxBytes but returning at least one entry. The caller may append to the
//     returned slice (return a fresh one, or one capped with a full slice
//     expression) and never mutates the entries.
//   - It is safe to read while the append path writes: a reader sees only
//     entries that were durable when the append path reported them.
type EntryLog interface {
	FirstIndex() uint64
	LastIndex() uint64
	Term(i uint64) (uint64, error)
	Entries(lo, hi, maxBytes uint64) ([]raftpb.Entry, error)
}

// ErrInconsistent is returned by NewStorage (and, should it happen later,
// by the Storage's reads) when the log, the state and the snapshot do not fit
// together: a replica in that condition must not vote or lead.
var ErrInconsistent = errors.New("raft storage inconsistent")

// Storage is the raft.Storage of one group: entries come from its EntryLog,
// everything at or below the snapshot index from its SnapshotMeta.
//
// raft's conventions, which it keeps whatever the log holds:
//   - the snapshot's (Index, Term) is the "dummy entry" before the log:
//     FirstIndex is snapshot Index+1 (1 for a new group), Term(snapshot
//     Index) is snapshot Term (0 for a new group), and LastIndex is at least
//     the snapshot Index (an empty log right after a snapshot);
//   - entries the log still holds at or below the snapshot index (the log's
//     prefix is deleted after the snapshot is saved) are compacted:
//     Entries(lo<=Index) and Term(i<Index) return ErrCompacted;
//   - Entries with hi past LastIndex+1, and Term past LastIndex, return
//     ErrUnavailable.
//
// InitialState is the saved State adjusted to the snapshot (a snapshot
// saved after the state implies its ConfState and a commit at its index).
// Storage is safe for concurrent use: raft reads it on the group's
// goroutine while the append path calls SetSnapshot.
type Storage struct {
	log EntryLog

	mu      sync.Mutex
	snap    SnapshotMeta
	hs      raftpb.HardState
	cs      raftpb.ConfState
	applied uint64
}

// NewStorage returns the Storage of a group over log, with st the group's
// saved State and snap its saved snapshot metadata (zero for none). It checks
// that they fit together and returns an ErrInconsistent saying what to do
// otherwise:
//   - the log must not start past snap.Index+1 (entries deleted without a
//     snapshot covering them);
//   - if the log holds snap.Index, its term there must be snap.Term, and if
//     it ends before snap.Index the log must be reset (a crash between saving
//     a received snapshot and resetting the log leaves either case; the
//     install path resets the log to start empty at snap.Index+1);
//   - the saved commit must not be past the end of the log (fsynced entries
//     were lost).
func NewStorage(log EntryLog, st State, snap SnapshotMeta) (*Storage, error) {
	s := &Storage{log: log, snap: snap, hs: st.HardState, cs: st.ConfState, applied: st.Applied}
	if st.Applied < snap.Index {
		// The snapshot is newer than the applied state: it defines both.
		s.cs, s.applied = snap.ConfState, snap.Index
	}
	if s.hs.Commit < snap.Index {
		s.hs.Commit = snap.Index
	}
	first, last := log.FirstIndex(), log.LastIndex()
	if first > snap.Index+1 {
		return nil, fmt.Errorf("%w: the log starts at index %d but the snapshot covers only up to %d: entries were deleted before a snapshot covering them was saved; rebuild this replica from its peers", ErrInconsistent, first, snap.Index)
	}
	if last+1 < first {
		return nil, fmt.Errorf("%w: the log reports first index %d after last index %d", ErrInconsistent, first, last)
	}
	if snap.Index > 0 {
		if last < snap.Index {
			return nil, fmt.Errorf("%w: the log ends at index %d before the snapshot index %d: reset the log to start empty at %d before opening the group", ErrInconsistent, last, snap.Index, snap.Index+1)
		}
		if snap.Index >= first {
			t, err := log.Term(snap.Index)
			if err != nil {
				return nil, fmt.Errorf("%w: read the term of the snapshot index %d: %v", ErrInconsistent, snap.Index, err)
			}
			if t != snap.Term {
				return nil, fmt.Errorf("%w: the log holds term %d at the snapshot index %d, the snapshot term %d: the log is from before the snapshot was installed; reset the log to start empty at %d before opening the group", ErrInconsistent, t, snap.Index, snap.Term, snap.Index+1)
			}
		}
	}
	if l := max(last, snap.Index); s.hs.Commit > l {
		return nil, fmt.Errorf("%w: the saved commit index %d is past the end of the log %d: fsynced entries were lost; rebuild this replica from its peers", ErrInconsistent, s.hs.Commit, l)
	}
	if s.applied > s.hs.Commit {
		return nil, fmt.Errorf("%w: the saved applied index %d is past the commit index %d", ErrInconsistent, s.applied, s.hs.Commit)
	}
	return s, nil
}

// Applied is the index the initial ConfState is current at: raft.Config's
// Applied for the group (committed entries after it are applied again).
func (s *Storage) Applied() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied
}

// InitialState implements raft.Storage.
func (s *Storage) InitialState() (raftpb.HardState, raftpb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hs, s.cs, nil
}

// SetSnapshot makes m the snapshot raft sees, once the caller has saved it
// (saveSnapshotMeta) and, for a received snapshot, reset the log to start at
// m.Index+1; for a snapshot created locally the log's prefix up to m.Index
// may be deleted after this call. An older snapshot than the current one is
// refused with raft's ErrSnapOutOfDate.
func (s *Storage) SetSnapshot(m SnapshotMeta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Index < s.snap.Index {
		return etcdraft.ErrSnapOutOfDate
	}
	s.snap = m
	return nil
}

// FirstIndex implements raft.Storage.
func (s *Storage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.Index + 1, s.checkLocked()
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastLocked(), s.checkLocked()
}

func (s *Storage) lastLocked() uint64 { return max(s.log.LastIndex(), s.snap.Index) }

// checkLocked reports a log that started past the snapshot after
// NewStorage (a prefix deleted before its snapshot was set): raft cannot
// work with it.
func (s *Storage) checkLocked() error {
	if f := s.log.FirstIndex(); f > s.snap.Index+1 {
		return fmt.Errorf("%w: the log starts at index %d but the snapshot covers only up to %d", ErrInconsistent, f, s.snap.Index)
	}
	return nil
}

// Term implements raft.Storage.
func (s *Storage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case i == s.snap.Index:
		return s.snap.Term, nil
	case i < s.snap.Index:
		return 0, etcdraft.ErrCompacted
	case i > s.lastLocked():
		return 0, etcdraft.ErrUnavailable
	}
	if err := s.checkLocked(); err != nil {
		return 0, err
	}
	return s.log.Term(i)
}

// Entries implements raft.Storage.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]raftpb.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lo <= s.snap.Index {
		return nil, etcdraft.ErrCompacted
	}
	if last := s.lastLocked(); hi > last+1 {
		return nil, fmt.Errorf("%w: entries [%d, %d) asked, the log ends at %d", etcdraft.ErrUnavailable, lo, hi, last)
	}
	if lo >= hi {
		if lo > hi {
			return nil, fmt.Errorf("%w: entries [%d, %d) asked", etcdraft.ErrUnavailable, lo, hi)
		}
		return nil, nil
	}
	if err := s.checkLocked(); err != nil {
		return nil, err
	}
	ents, err := s.log.Entries(lo, hi, maxSize)
	if err != nil {
		return nil, err
	}
	if len(ents) == 0 {
		return nil, fmt.Errorf("%w: the log returned no entries for [%d, %d)", etcdraft.ErrUnavailable, lo, hi)
	}
	// Enforce the contract raft relies on: consecutive from lo, inside
	// [lo, hi), within maxSize after the first.
	var size uint64
	for i := range ents {
		if want := lo + uint64(i); ents[i].Index != want || want >= hi {
			return nil, fmt.Errorf("%w: the log returned index %d at position %d of entries [%d, %d)", ErrInconsistent, ents[i].Index, i, lo, hi)
		}
		size += uint64(ents[i].Size())
		if i > 0 && size > maxSize {
			ents = ents[:i]
			break
		}
	}
	return ents[:len(ents):len(ents)], nil
}

// Snapshot implements raft.Storage: the current snapshot metadata.
func (s *Storage) Snapshot() (raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.Raft(), nil
}

var _ etcdraft.Storage = (*Storage)(nil)
