package cluster

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/raft"
)

func TestStopReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: append: %w", raft.ErrReplicaStopped, &pathErr{syscall.ENOSPC}), StopDiskFull},
		{fmt.Errorf("%w: %w", raft.ErrReplicaStopped, &log.CorruptionError{File: "f", Reason: "bad crc"}), StopDamaged},
		{fmt.Errorf("%w: %w", raft.ErrReplicaStopped, raft.ErrLogCorrupt), StopDamaged},
		{fmt.Errorf("%w: %w", raft.ErrReplicaStopped, log.ErrQuarantined), StopDamaged},
		{fmt.Errorf("%w: %w", raft.ErrReplicaStopped, syscall.EIO), StopOther},
	} {
		if got := stopReason(c.err); got != c.want {
			t.Errorf("stopReason(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

type pathErr struct{ err error }

func (e *pathErr) Error() string { return "write x: " + e.err.Error() }
func (e *pathErr) Unwrap() error { return e.err }

// stoppedReplicas: one episode per replica from its first stop until it
// runs, whatever stops and failed reopens come between (logged once at each
// end); only disk_full replicas are reopened, at most once per interval; a
// replica removed by a reopen that could not add it again stays tracked.
func TestStoppedReplicas(t *testing.T) {
	every := 2 * time.Second
	s := newStoppedReplicas(every)
	t0 := time.Unix(1000, 0)
	full := fmt.Errorf("%w: %w", raft.ErrReplicaStopped, syscall.ENOSPC)
	damaged := fmt.Errorf("%w: %w", raft.ErrReplicaStopped, raft.ErrLogCorrupt)
	if !s.stopped(1, full, t0) || !s.stopped(2, damaged, t0) {
		t.Fatal("a first stop does not start an episode")
	}
	if s.stopped(1, full, t0.Add(time.Second)) {
		t.Fatal("a second stop in the episode is logged again")
	}
	if due := s.due(t0.Add(every - time.Millisecond)); len(due) != 0 {
		t.Fatalf("due before the interval: %v", due)
	}
	if due := s.due(t0.Add(every)); !slices.Equal(due, []uint64{1}) {
		t.Fatalf("due after the interval: %v, want [1] (the damaged replica is never reopened)", due)
	}
	if due := s.due(t0.Add(every + time.Second)); len(due) != 0 {
		t.Fatalf("due again within the interval: %v", due)
	}
	s.reopened(1, fmt.Errorf("open: %w", syscall.ENOSPC)) // detached
	s.gone(1)
	if _, ok := s.episodes()[1]; !ok || !s.detached(1) {
		t.Fatal("a detached replica was forgotten")
	}
	if due := s.due(t0.Add(2 * every)); !slices.Equal(due, []uint64{1}) {
		t.Fatalf("a detached replica is not reopened again: %v", due)
	}
	s.reopened(1, nil)
	if s.detached(1) {
		t.Fatal("a replica added again is still detached")
	}
	if _, ok := s.running(1, t0.Add(2*every+every/2)); ok {
		t.Fatal("a replica running for less than an interval since its reopen ended its episode (a full disk stops it again at its first write)")
	}
	if s.stopped(1, full, t0.Add(2*every+every/2)) {
		t.Fatal("a stop right after a reopen (still full) is logged again")
	}
	if due := s.due(t0.Add(3 * every)); !slices.Equal(due, []uint64{1}) {
		t.Fatalf("stopped again after its reopen, not reopened again: %v", due)
	}
	e, ok := s.running(1, t0.Add(4*every))
	if !ok || e.reopens != 3 || !e.since.Equal(t0) || e.reason != StopDiskFull {
		t.Fatalf("the episode ended: %+v %v; want 3 reopens since t0, disk_full", e, ok)
	}
	if _, ok := s.running(1, t0.Add(5*every)); ok {
		t.Fatal("an ended episode ends again")
	}
	s.gone(2)
	if len(s.episodes()) != 0 {
		t.Fatalf("episodes left: %v", s.episodes())
	}
	if !s.stopped(1, full, t0.Add(5*every)) {
		t.Fatal("a stop after the replica ran again does not start a new episode")
	}
	if !errors.Is(s.episodes()[1].err, syscall.ENOSPC) {
		t.Fatal("the episode lost its error")
	}
}
