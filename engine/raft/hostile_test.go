package raft

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// A heartbeat whose commit index lies past the follower's log (a forged or
// damaged message: a leader's heartbeat carries at most what the follower
// acknowledged having) is refused before raft sees it; raft panicked on it
// ("tocommit(999999999) is out of range"), which took the node down. The
// follower keeps running and the group keeps committing.
func TestReplicaRefusesHeartbeatCommitPastItsLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newWCluster(t, ctx, 11, slog.Options{}, false)
	defer c.close()
	l := c.waitLeader(50)
	if err := c.propose(l, 2); err != nil {
		t.Fatal(err)
	}
	c.round()
	var f *wnode
	for _, n := range c.nodes {
		if n != l {
			f = n
		}
	}
	st := f.r.Status()
	forged := raftpb.Message{Type: raftpb.MsgHeartbeat, From: l.id, To: f.id, Term: st.Term, Commit: 999_999_999}
	if err := f.r.Step(forged); err == nil {
		t.Fatalf("a heartbeat with commit %d past the log (last index %d) was accepted", forged.Commit, f.r.p.LastIndex())
	}
	if err := f.r.Err(); err != nil {
		t.Fatalf("the follower stopped: %v", err)
	}
	end := l.r.Partition().NextOffset()
	if err := c.propose(l, 3); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if f.r.Partition().NextOffset() >= end+3 && f.r.CommitIndex() >= l.r.CommitIndex() {
			return
		}
		c.round()
	}
	t.Fatalf("the group stopped committing at the follower after the forged heartbeat")
}

// A follower whose log lost entries it had acknowledged (its segment cut
// back while it was down: a disk that lied about a flush, a restored
// backup) comes back with a log the leader does not know is short: every
// heartbeat commits past it, raft panics on those, and refusing them one
// by one (above) left the replica stuck for good — never caught up, never
// repaired. Heartbeats that keep committing past its log, from a leader
// of its term, for an election timeout, mean the data is gone: the
// replica quarantines its partition and stops (the cluster then drops the
// copy and gives the partition a new one, engine/cluster
// cluster_repair.go). A single such heartbeat is still only refused
// (TestReplicaRefusesHeartbeatCommitPastItsLog).
func TestReplicaFindsItsLogCutBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newWCluster(t, ctx, 12, slog.Options{}, false)
	defer c.close()
	l, f, before := stoppedFollower(t, c, 40)
	cutSegments(t, f, func(b []byte) []byte { return b[:len(b)/2] })
	c.start(f)
	if after := f.r.Partition().LastIndex(); after >= before {
		t.Fatalf("the cut log ends at index %d, not before %d", after, before)
	}
	f.faulty = true // the replica is to stop: c.failed records how
	for range 60 {
		if !f.up {
			break
		}
		c.round()
	}
	if f.up {
		t.Fatalf("after %d rounds the follower with its log cut back (last index %d, it had %d) still runs: stuck, neither caught up nor quarantined (err %v)",
			60, f.r.Partition().LastIndex(), before, f.r.Err())
	}
	if !errors.Is(f.stopErr, ErrLogCorrupt) || !f.quarantined {
		t.Fatalf("the follower stopped with %v (quarantined %v), want ErrLogCorrupt and its partition quarantined", f.stopErr, f.quarantined)
	}
	// The leader and the other follower go on committing.
	if err := c.propose(l, 3); err != nil {
		t.Fatal(err)
	}
}

// A replica whose saved commit index lies past its log (committed entries
// it had made durable are gone) is not opened, and its partition is
// quarantined, so that the cluster replaces the copy (cluster_repair.go
// looks for quarantined partitions); refused as merely inconsistent, the
// replica was retried and refused again for good, and its node never got
// ready.
func TestReplicaWithCommittedEntriesGoneIsQuarantined(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newWCluster(t, ctx, 13, slog.Options{}, false)
	defer c.close()
	_, f, _ := stoppedFollower(t, c, 10)
	cutSegments(t, f, func([]byte) []byte { return nil })
	s, err := slog.OpenStore(f.root+wireData, slog.Options{FS: f.fsys, MaintenanceInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.Partition(wirePart)
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenReplica(ReplicaConfig{Partition: p, FS: f.fsys, Dir: f.root + wireRaft, Voters: []uint64{1, 2, 3}, Group: GroupConfig{ID: f.id}})
	if err == nil {
		r.Close()
		t.Fatalf("a replica whose log lost its committed entries opened")
	}
	if !errors.Is(err, ErrLogCorrupt) || p.Quarantined() == nil {
		t.Fatalf("OpenReplica: %v (quarantined: %v); want ErrLogCorrupt and the partition quarantined", err, p.Quarantined())
	}
}

// stoppedFollower has c's leader commit n records, every replica take
// them, and stops a follower, which it returns with the leader and the
// follower's last index before it stopped.
func stoppedFollower(t *testing.T, c *wcluster, n int) (l, f *wnode, last uint64) {
	t.Helper()
	l = c.waitLeader(50)
	if err := c.propose(l, n); err != nil {
		t.Fatal(err)
	}
	c.converge(50)
	for _, n := range c.nodes {
		if n != l {
			f = n
		}
	}
	last = f.r.Partition().LastIndex()
	c.stop(f)
	return l, f, last
}

// cutSegments rewrites every segment of the stopped node f's partition
// with cut.
func cutSegments(t *testing.T, f *wnode, cut func([]byte) []byte) {
	t.Helper()
	segs, err := f.fs.ReadDir(wireData + "/" + wirePart)
	if err != nil {
		t.Fatal(err)
	}
	done := false
	for _, e := range segs {
		if name := e.Name(); strings.HasSuffix(name, ".log") {
			if err := f.fs.Corrupt(wireData+"/"+wirePart+"/"+name, cut); err != nil {
				t.Fatal(err)
			}
			done = true
		}
	}
	if !done {
		t.Fatalf("no segment of %s on node %d", wirePart, f.id)
	}
}
