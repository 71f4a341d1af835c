package raft

import (
	"context"
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
