package raft

import (
	"errors"
	"math"
	"reflect"
	"testing"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// storageAt returns a Storage that, like etcd's MemoryStorage test fixture
// index(3).terms(3, 4, 5, ...), has its snapshot (dummy entry) at index 3
// term 3 and entries 4.. with the given terms. With keepPrefix the log
// still holds entries 1..3 below the snapshot (a prefix not yet deleted),
// which must make no difference.
func storageAt(t *testing.T, keepPrefix bool, terms ...uint64) (*Storage, *memLog) {
	t.Helper()
	l := newMemLog()
	if keepPrefix {
		if err := l.append(entriesAt(1, 1, 2, 3)); err != nil {
			t.Fatal(err)
		}
	} else {
		l.reset(4)
	}
	if err := l.append(entriesAt(4, terms...)); err != nil {
		t.Fatal(err)
	}
	s, err := NewStorage(l, State{}, SnapshotMeta{Index: 3, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}})
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

func forLayouts(t *testing.T, f func(t *testing.T, keepPrefix bool)) {
	for _, keep := range []bool{false, true} {
		name := "log-trimmed"
		if keep {
			name = "log-prefix-kept"
		}
		t.Run(name, func(t *testing.T) { f(t, keep) })
	}
}

// Ported from etcd-io/raft storage_test.go TestStorageTerm.
func TestStorageTerm(t *testing.T) {
	forLayouts(t, func(t *testing.T, keep bool) {
		s, _ := storageAt(t, keep, 4, 5)
		for _, tt := range []struct {
			i     uint64
			werr  error
			wterm uint64
		}{
			{2, etcdraft.ErrCompacted, 0},
			{3, nil, 3},
			{4, nil, 4},
			{5, nil, 5},
			{6, etcdraft.ErrUnavailable, 0},
		} {
			term, err := s.Term(tt.i)
			if !errors.Is(err, tt.werr) || (tt.werr == nil && err != nil) || term != tt.wterm {
				t.Errorf("Term(%d) = %d, %v; want %d, %v", tt.i, term, err, tt.wterm, tt.werr)
			}
		}
	})
}

// Ported from etcd-io/raft storage_test.go TestStorageEntries.
func TestStorageEntries(t *testing.T) {
	forLayouts(t, func(t *testing.T, keep bool) {
		s, _ := storageAt(t, keep, 4, 5, 6)
		ents := entriesAt(3, 3, 4, 5, 6) // ents[0] stands for the dummy entry, as in etcd's test
		sz := func(e raftpb.Entry) uint64 { return uint64(e.Size()) }
		for _, tt := range []struct {
			lo, hi, maxsize uint64
			werr            error
			wentries        []raftpb.Entry
		}{
			{2, 6, math.MaxUint64, etcdraft.ErrCompacted, nil},
			{3, 4, math.MaxUint64, etcdraft.ErrCompacted, nil},
			{4, 5, math.MaxUint64, nil, entriesAt(4, 4)},
			{4, 6, math.MaxUint64, nil, entriesAt(4, 4, 5)},
			{4, 7, math.MaxUint64, nil, entriesAt(4, 4, 5, 6)},
			// even if maxsize is zero, the first entry is returned
			{4, 7, 0, nil, entriesAt(4, 4)},
			// limit to 2
			{4, 7, sz(ents[1]) + sz(ents[2]), nil, entriesAt(4, 4, 5)},
			{4, 7, sz(ents[1]) + sz(ents[2]) + sz(ents[3])/2, nil, entriesAt(4, 4, 5)},
			{4, 7, sz(ents[1]) + sz(ents[2]) + sz(ents[3]) - 1, nil, entriesAt(4, 4, 5)},
			// all
			{4, 7, sz(ents[1]) + sz(ents[2]) + sz(ents[3]), nil, entriesAt(4, 4, 5, 6)},
			// past the end: raft's MemoryStorage panics, the adapter refuses
			{4, 8, math.MaxUint64, etcdraft.ErrUnavailable, nil},
		} {
			got, err := s.Entries(tt.lo, tt.hi, tt.maxsize)
			if !errors.Is(err, tt.werr) || (tt.werr == nil && err != nil) || !reflect.DeepEqual(got, tt.wentries) {
				t.Errorf("Entries(%d, %d, %d) = %v, %v; want %v, %v", tt.lo, tt.hi, tt.maxsize, got, err, tt.wentries, tt.werr)
			}
		}
	})
}

// Ported from TestStorageLastIndex and TestStorageFirstIndex, with the
// adapter's compaction (snapshot, then prefix deletion) in place of
// MemoryStorage.Compact.
func TestStorageFirstLastIndex(t *testing.T) {
	forLayouts(t, func(t *testing.T, keep bool) {
		s, l := storageAt(t, keep, 4, 5)
		wantFL := func(first, last uint64) {
			t.Helper()
			f, err1 := s.FirstIndex()
			la, err2 := s.LastIndex()
			if f != first || la != last || err1 != nil || err2 != nil {
				t.Fatalf("FirstIndex, LastIndex = %d (%v), %d (%v); want %d, %d", f, err1, la, err2, first, last)
			}
		}
		wantFL(4, 5)
		if err := l.append(entriesAt(6, 5)); err != nil {
			t.Fatal(err)
		}
		wantFL(4, 6)
		// Compact(4): the snapshot moves first, the prefix goes after.
		if err := s.SetSnapshot(SnapshotMeta{Index: 4, Term: 4}); err != nil {
			t.Fatal(err)
		}
		wantFL(5, 6)
		if term, err := s.Term(4); term != 4 || err != nil {
			t.Fatalf("Term(4) after snapshot = %d, %v; want 4", term, err)
		}
		if _, err := s.Term(3); !errors.Is(err, etcdraft.ErrCompacted) {
			t.Fatalf("Term(3) after snapshot: %v, want ErrCompacted", err)
		}
		l.compact(4)
		wantFL(5, 6)
		if err := s.SetSnapshot(SnapshotMeta{Index: 3, Term: 3}); !errors.Is(err, etcdraft.ErrSnapOutOfDate) {
			t.Fatalf("older snapshot: %v, want ErrSnapOutOfDate", err)
		}
		// A prefix deleted past the snapshot is reported, not served.
		l.compact(5)
		if _, err := s.FirstIndex(); !errors.Is(err, ErrInconsistent) {
			t.Fatalf("FirstIndex with the log past the snapshot: %v, want ErrInconsistent", err)
		}
	})
}

// The entries returned may be appended to by raft without touching the log.
func TestStorageEntriesSliceIsCapped(t *testing.T) {
	s, l := storageAt(t, false, 4, 5, 6)
	got, err := s.Entries(4, 6, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got, raftpb.Entry{Index: 99, Term: 99})
	if e, _ := l.entry(6); e.Term != 6 {
		t.Fatalf("appending to the returned slice changed the log: entry 6 = %+v", e)
	}
}

// A log that breaks its contract is reported, never passed to raft.
func TestStorageEntriesChecksTheLog(t *testing.T) {
	l := &badLog{memLog: newMemLog()}
	if err := l.append(entriesAt(1, 1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	s, err := NewStorage(l, State{}, SnapshotMeta{})
	if err != nil {
		t.Fatal(err)
	}
	l.skip = true
	if _, err := s.Entries(1, 4, math.MaxUint64); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("log returning a gap: %v, want ErrInconsistent", err)
	}
	l.skip, l.tooMany = false, true
	got, err := s.Entries(1, 4, 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("log ignoring maxBytes: %d entries, %v; want 1", len(got), err)
	}
}

type badLog struct {
	*memLog
	skip, tooMany bool
}

func (b *badLog) Entries(lo, hi, maxBytes uint64) ([]raftpb.Entry, error) {
	if b.tooMany {
		maxBytes = math.MaxUint64
	}
	ents, err := b.memLog.Entries(lo, hi, maxBytes)
	if b.skip && len(ents) > 1 {
		ents = append(ents[:1:1], ents[2:]...)
	}
	return ents, err
}

// A new group: first index 1, last 0, the dummy entry at 0 term 0.
func TestStorageNewGroup(t *testing.T) {
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	s, err := NewStorage(newMemLog(), State{ConfState: cs}, SnapshotMeta{})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := s.FirstIndex()
	la, _ := s.LastIndex()
	t0, err0 := s.Term(0)
	_, err1 := s.Term(1)
	_, err2 := s.Entries(1, 2, math.MaxUint64)
	snap, _ := s.Snapshot()
	hs, gotCS, _ := s.InitialState()
	if f != 1 || la != 0 || t0 != 0 || err0 != nil || !errors.Is(err1, etcdraft.ErrUnavailable) || !errors.Is(err2, etcdraft.ErrUnavailable) ||
		!etcdraft.IsEmptySnap(snap) || !etcdraft.IsEmptyHardState(hs) || !reflect.DeepEqual(gotCS, cs) {
		t.Fatalf("new group: first %d last %d term(0) %d %v term(1) %v entries %v snap %v hs %v cs %v", f, la, t0, err0, err1, err2, snap, hs, gotCS)
	}
}

// After installing a snapshot (log reset to start after it): first is
// index+1, last is index, the snapshot's term answers Term(index), and the
// initial state takes the snapshot's ConfState and commit when the saved
// state is older.
func TestStorageAfterSnapshotInstall(t *testing.T) {
	l := newMemLog()
	l.reset(11)
	snap := SnapshotMeta{Index: 10, Term: 5, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 4}}, Data: []byte("dedupe")}
	old := State{HardState: raftpb.HardState{Term: 5, Vote: 2, Commit: 3}, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}, Applied: 3}
	s, err := NewStorage(l, old, snap)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := s.FirstIndex()
	la, _ := s.LastIndex()
	t10, err10 := s.Term(10)
	_, err9 := s.Term(9)
	_, err11 := s.Term(11)
	_, errE10 := s.Entries(10, 11, math.MaxUint64)
	_, errE11 := s.Entries(11, 12, math.MaxUint64)
	if f != 11 || la != 10 || t10 != 5 || err10 != nil || !errors.Is(err9, etcdraft.ErrCompacted) || !errors.Is(err11, etcdraft.ErrUnavailable) ||
		!errors.Is(errE10, etcdraft.ErrCompacted) || !errors.Is(errE11, etcdraft.ErrUnavailable) {
		t.Fatalf("after snapshot: first %d last %d term(10) %d %v term(9) %v term(11) %v entries(10) %v entries(11) %v", f, la, t10, err10, err9, err11, errE10, errE11)
	}
	hs, cs, _ := s.InitialState()
	if hs.Commit != 10 || hs.Term != 5 || hs.Vote != 2 || !reflect.DeepEqual(cs, snap.ConfState) || s.Applied() != 10 {
		t.Fatalf("initial state %+v %+v applied %d; want commit 10, the snapshot's ConfState, applied 10", hs, cs, s.Applied())
	}
	got, _ := s.Snapshot()
	if !reflect.DeepEqual(got, snap.Raft()) {
		t.Fatalf("Snapshot() = %+v, want %+v", got, snap.Raft())
	}
	if err := l.append(entriesAt(11, 6)); err != nil {
		t.Fatal(err)
	}
	if ents, err := s.Entries(11, 12, math.MaxUint64); err != nil || len(ents) != 1 || ents[0].Term != 6 {
		t.Fatalf("entry 11 after the snapshot: %v, %v", ents, err)
	}
}

func TestNewStorageRefusesInconsistentState(t *testing.T) {
	for _, tt := range []struct {
		name string
		log  func() *memLog
		st   State
		snap SnapshotMeta
	}{
		{"log starts past the snapshot", func() *memLog { l := newMemLog(); l.reset(5); return l }, State{}, SnapshotMeta{Index: 3, Term: 1}},
		{"log ends before the snapshot", func() *memLog { l := newMemLog(); _ = l.append(entriesAt(1, 1, 1)); return l }, State{}, SnapshotMeta{Index: 5, Term: 2}},
		{"log term differs at the snapshot", func() *memLog { l := newMemLog(); _ = l.append(entriesAt(1, 1, 1, 1)); return l }, State{}, SnapshotMeta{Index: 2, Term: 2}},
		{"commit past the log", func() *memLog { l := newMemLog(); _ = l.append(entriesAt(1, 1, 1)); return l }, State{HardState: raftpb.HardState{Term: 1, Commit: 3}}, SnapshotMeta{}},
		{"applied past commit", func() *memLog { l := newMemLog(); _ = l.append(entriesAt(1, 1, 1)); return l }, State{HardState: raftpb.HardState{Term: 1, Commit: 1}, Applied: 2}, SnapshotMeta{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewStorage(tt.log(), tt.st, tt.snap); !errors.Is(err, ErrInconsistent) {
				t.Fatalf("NewStorage: %v, want ErrInconsistent", err)
			}
		})
	}
}

// A RawNode runs over the adapter right after a snapshot: a one-voter group
// restarted from snapshot 10/5 elects itself and appends at 11, 12.
func TestGroupOverSnapshotStorage(t *testing.T) {
	l := newMemLog()
	l.reset(11)
	snap := SnapshotMeta{Index: 10, Term: 5, ConfState: raftpb.ConfState{Voters: []uint64{1}}}
	s, err := NewStorage(l, State{HardState: raftpb.HardState{Term: 5, Commit: 10}}, snap)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGroup(GroupConfig{ID: 1, Storage: s})
	if err != nil {
		t.Fatal(err)
	}
	var appended []raftpb.Entry
	drain := func() {
		for g.HasReady() {
			w := g.Ready()
			for _, a := range w.Appends {
				if err := l.append(a.Entries); err != nil {
					t.Fatal(err)
				}
				appended = append(appended, a.Entries...)
				if _, err := g.AppendDone(a); err != nil {
					t.Fatal(err)
				}
			}
			for _, a := range w.Applies {
				if _, _, err := g.ApplyDone(a); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for i := 0; i < 3*DefaultElectionTicks && g.Status().RaftState != etcdraft.StateLeader; i++ {
		g.Tick()
		drain()
	}
	if err := g.Propose([]byte("x")); err != nil {
		t.Fatal(err)
	}
	drain()
	if len(appended) != 2 || appended[0].Index != 11 || appended[1].Index != 12 || string(appended[1].Data) != "x" || g.Status().Commit != 12 {
		t.Fatalf("appended %v, commit %d; want the leader's empty entry at 11 and x at 12, committed", appended, g.Status().Commit)
	}
}
