package raft

import (
	"errors"
	"os"
	"reflect"
	"sync"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"pgregory.net/rapid"

	slog "github.com/spoolmq/spool/engine/log"
)

const testDir = "/data/topic-0"

func genState(t *rapid.T) State {
	ids := func(label string) []uint64 {
		n := rapid.IntRange(0, 4).Draw(t, label+"-n")
		if n == 0 {
			return nil
		}
		return rapid.SliceOfN(rapid.Uint64(), n, n).Draw(t, label)
	}
	commit := rapid.Uint64().Draw(t, "commit")
	return State{
		HardState: raftpb.HardState{Term: rapid.Uint64().Draw(t, "term"), Vote: rapid.Uint64().Draw(t, "vote"), Commit: commit},
		ConfState: raftpb.ConfState{Voters: ids("voters"), Learners: ids("learners"), VotersOutgoing: ids("out"), LearnersNext: ids("next"), AutoLeave: rapid.Bool().Draw(t, "auto")},
		Applied:   rapid.Uint64Range(0, commit).Draw(t, "applied"),
	}
}

func TestStateSaveReopen(t *testing.T) {
	fsys := slog.NewMemFS()
	s, st, err := OpenStateStore(fsys, testDir)
	if err != nil || !reflect.DeepEqual(st, State{}) {
		t.Fatalf("new store: %+v, %v; want the zero State", st, err)
	}
	var last State
	for i := range 5 {
		last = State{HardState: raftpb.HardState{Term: uint64(i + 1), Vote: 2, Commit: uint64(10 * i)}, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}, Applied: uint64(5 * i)}
		if err := s.Save(last); err != nil {
			t.Fatal(err)
		}
	}
	fsys.Crash()
	_, got, err := OpenStateStore(fsys, testDir)
	if err != nil || !reflect.DeepEqual(got, last) {
		t.Fatalf("after crash: %+v, %v; want %+v", got, err, last)
	}
}

func TestStateSaveRaisesCommitToApplied(t *testing.T) {
	s, _, err := OpenStateStore(slog.NewMemFS(), testDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(State{HardState: raftpb.HardState{Term: 1, Commit: 3}, Applied: 7}); err != nil {
		t.Fatal(err)
	}
	if c := s.State().HardState.Commit; c != 7 {
		t.Fatalf("commit saved %d, want 7 (raised to applied)", c)
	}
}

// One damaged slot falls back to the other; two are an ErrStateDamaged.
func TestStateDamage(t *testing.T) {
	fsys := slog.NewMemFS()
	s, _, err := OpenStateStore(fsys, testDir)
	if err != nil {
		t.Fatal(err)
	}
	first := State{HardState: raftpb.HardState{Term: 1, Vote: 1}}
	second := State{HardState: raftpb.HardState{Term: 2, Vote: 3}}
	if err := s.Save(first); err != nil { // seq 1, slot 1
		t.Fatal(err)
	}
	if err := s.Save(second); err != nil { // seq 2, slot 0
		t.Fatal(err)
	}
	path := testDir + "/" + stateFileName
	flip := func(off int) {
		t.Helper()
		if err := fsys.Corrupt(path, func(b []byte) []byte { b[off] ^= 0x40; return b }); err != nil {
			t.Fatal(err)
		}
	}
	flip(30) // inside slot 0's payload
	if _, got, err := OpenStateStore(fsys, testDir); err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("slot 0 damaged: %+v, %v; want the state in slot 1 %+v", got, err, first)
	}
	flip(StateSlotBytes + 30)
	if _, _, err := OpenStateStore(fsys, testDir); !errors.Is(err, ErrStateDamaged) {
		t.Fatalf("both slots damaged: %v, want ErrStateDamaged", err)
	}
}

func TestStateTooLarge(t *testing.T) {
	s, _, err := OpenStateStore(slog.NewMemFS(), testDir)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Save(State{ConfState: raftpb.ConfState{Voters: make([]uint64, MaxConfStateIDs+1)}})
	if !errors.Is(err, ErrStateTooLarge) {
		t.Fatalf("Save with %d ids: %v, want ErrStateTooLarge", MaxConfStateIDs+1, err)
	}
}

// A failed write or fsync leaves the previous state, and the save can be
// retried.
func TestStateSaveFailureKeepsPrevious(t *testing.T) {
	for _, op := range []string{"write", "sync"} {
		t.Run(op, func(t *testing.T) {
			fsys := slog.NewMemFS()
			s, _, err := OpenStateStore(fsys, testDir)
			if err != nil {
				t.Fatal(err)
			}
			a := State{HardState: raftpb.HardState{Term: 4, Vote: 2}}
			b := State{HardState: raftpb.HardState{Term: 5, Vote: 3}}
			if err := s.Save(a); err != nil {
				t.Fatal(err)
			}
			fsys.SetFault(func(o, _ string) error {
				if o == op {
					return errors.New("injected")
				}
				return nil
			})
			if err := s.Save(b); err == nil {
				t.Fatal("Save succeeded under a fault")
			}
			if !reflect.DeepEqual(s.State(), a) {
				t.Fatalf("State() after a failed save = %+v, want %+v", s.State(), a)
			}
			fsys.SetFault(nil)
			if err := s.Save(b); err != nil {
				t.Fatal(err)
			}
			fsys.Crash()
			if _, got, err := OpenStateStore(fsys, testDir); err != nil || !reflect.DeepEqual(got, b) {
				t.Fatalf("after retry and crash: %+v, %v; want %+v", got, err, b)
			}
		})
	}
}

// tornChunk is the granularity of a torn write: smaller than a sector, so that
// a slot (whose record fits in one sector) can be torn inside its record.
const tornChunk = 16

// tornFS is a MemFS whose crash may also persist any subset of the tornChunk
// chunks written since the last fsync (a torn write), on top of what MemFS
// keeps (exactly the fsynced bytes).
type tornFS struct {
	*slog.MemFS
	mu      sync.Mutex
	pending map[string][]pendingWrite
}

type pendingWrite struct {
	off  int64
	data []byte
}

func newTornFS() *tornFS {
	return &tornFS{MemFS: slog.NewMemFS(), pending: map[string][]pendingWrite{}}
}

func (t *tornFS) OpenFile(name string, flag int, perm os.FileMode) (slog.File, error) {
	f, err := t.MemFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &tornFile{File: f, fs: t, name: name}, nil
}

type tornFile struct {
	slog.File
	fs   *tornFS
	name string
}

func (f *tornFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	if n > 0 {
		f.fs.mu.Lock()
		f.fs.pending[f.name] = append(f.fs.pending[f.name], pendingWrite{off, append([]byte(nil), p[:n]...)})
		f.fs.mu.Unlock()
	}
	return n, err
}

func (f *tornFile) Sync() error {
	err := f.File.Sync()
	if err == nil {
		f.fs.mu.Lock()
		delete(f.fs.pending, f.name)
		f.fs.mu.Unlock()
	}
	return err
}

// crash loses everything not fsynced, then lets keep decide, sector by
// sector, which unsynced writes reached the disk anyway.
func (t *tornFS) crash(keep func() bool) {
	t.MemFS.Crash()
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, ws := range t.pending {
		_ = t.Corrupt(name, func(b []byte) []byte {
			for _, w := range ws {
				for s := int64(0); s < int64(len(w.data)); s += tornChunk {
					if !keep() {
						continue
					}
					end := min(s+tornChunk, int64(len(w.data)))
					if need := w.off + end; need > int64(len(b)) {
						b = append(b, make([]byte, need-int64(len(b)))...)
					}
					copy(b[w.off+s:], w.data[s:end])
				}
			}
			return b
		})
	}
	t.pending = map[string][]pendingWrite{}
}

// After a crash at any point of a save, with any part of the slot being
// written torn, the loaded state is the last one whose save returned or the
// one being saved — never garbage, never older than the last acknowledged
// save.
func TestStateCrashModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		fsys := newTornFS()
		s, st, err := OpenStateStore(fsys, testDir)
		if err != nil {
			rt.Fatal(err)
		}
		acked := st
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			next := genState(rt)
			if !rapid.Bool().Draw(rt, "crash") {
				if err := s.Save(next); err != nil {
					rt.Fatal(err)
				}
				acked = next
				continue
			}
			// The machine stops at operation k of this save (0: the write,
			// 1: the fsync, 2: after the fsync, before Save returns).
			k := rapid.IntRange(0, 2).Draw(rt, "crash-at")
			ops := 0
			fsys.SetFault(func(op, _ string) error {
				ops++
				if ops > k {
					return errors.New("machine stopped")
				}
				return nil
			})
			err := s.Save(next)
			fsys.SetFault(nil)
			if (err == nil) != (k == 2) {
				rt.Fatalf("Save with the machine stopping at op %d returned %v", k, err)
			}
			fsys.crash(func() bool { return rapid.Bool().Draw(rt, "sector-kept") })
			var got State
			s, got, err = OpenStateStore(fsys, testDir)
			if err != nil {
				rt.Fatalf("reopen after a crash at op %d: %v", k, err)
			}
			if !reflect.DeepEqual(got, acked) && !reflect.DeepEqual(got, next) {
				rt.Fatalf("after a crash at op %d loaded %+v; want the acknowledged %+v or the one being saved %+v", k, got, acked, next)
			}
			if k == 2 && !reflect.DeepEqual(got, next) {
				rt.Fatalf("a save that returned was lost: loaded %+v, want %+v", got, next)
			}
			acked = got
		}
	})
}
