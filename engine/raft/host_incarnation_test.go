package raft

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/spoolmq/spool/engine/transport"
)

// A replica given to a node again is a new incarnation with a new replica
// id (transport.ReplicaID): an acknowledgement the node's earlier replica
// sent, delivered only after the new one was added, is not taken for the
// new one's, which copies the whole log from nothing; and a message for
// another replica id than the one a node runs is refused. With one id per
// node the leader records the old replica's match for the new, empty one
// and sends it a commit index past its end (etcd raft panics: "tocommit(N)
// is out of range [lastIndex(0)]"): run with incarnation 0 below, it does.
func TestHostNewIncarnation(t *testing.T) {
	const incarnation = 1
	c := newHCluster(t, 3, 1, HostConfig{Workers: 2})
	defer c.close()
	c.awaitLeaders(100)
	l := c.leader(1)
	for range 5 {
		c.propose(l, 1)
	}
	c.awaitProposals(100)
	c.converge(100)
	var old *hostNode
	var keep []uint64
	for _, n := range c.nodes {
		if n != l && old == nil {
			old = n
			continue
		}
		keep = append(keep, n.id)
	}
	// reconfigure walks the group to target; each round, onRound sees the
	// leader's status.
	reconfigure := func(target []uint64, onRound func(GroupStatus)) {
		t.Helper()
		for range 500 {
			if err := l.host.Reconfigure(1, target); err != nil {
				t.Fatal(err)
			}
			c.round()
			st, _ := l.host.Status(1)
			if onRound != nil {
				onRound(st)
			}
			if !st.Joint && len(st.Learners) == 0 && sameIDs(st.Voters, target) {
				return
			}
		}
		st, _ := l.host.Status(1)
		t.Fatalf("the move to %v did not finish: %+v", target, st)
	}
	reconfigure(keep, nil)
	st, _ := l.host.Status(1)
	stale := transport.Message{Group: 1, Msg: raftpb.Message{Type: raftpb.MsgAppResp, From: old.id, To: l.id, Term: st.Term, Index: st.CommitIndex}}

	// The node's copy is gone; it opens an empty replica under its new id.
	if err := old.host.Remove(1); err != nil {
		t.Fatal(err)
	}
	p, err := old.store.Partition("p1-again")
	if err != nil {
		t.Fatal(err)
	}
	old.partitions[1] = p
	newID := transport.ReplicaID(old.id, incarnation)
	if err := old.host.Add(1, ReplicaConfig{Partition: p, FS: old.fs, Dir: "/raft/p1-again", Group: GroupConfig{ID: newID}}); err != nil {
		t.Fatal(err)
	}
	if incarnation != 0 {
		hb := transport.Message{Group: 1, Msg: raftpb.Message{Type: raftpb.MsgHeartbeat, From: l.id, To: old.id, Term: st.Term, Commit: st.CommitIndex}}
		if err := old.host.HandleMessage(hb); err == nil {
			t.Fatalf("a heartbeat for replica %d taken by the node's replica %d", old.id, newID)
		}
	}
	// The leader's messages to the node are held back until the stale
	// acknowledgement has arrived: the new replica has answered nothing.
	c.net.Cut(l.id, old.id)
	injected := false
	reconfigure(append(keep, newID), func(st GroupStatus) {
		if !injected && sameIDs(st.Learners, []uint64{newID}) {
			injected = true
			_ = l.host.HandleMessage(stale) // raft refuses it: no such peer
			for range 3 {
				c.round()
			}
			c.net.HealLink(l.id, old.id)
		}
	})
	if !injected {
		t.Fatal("the new replica never was a learner")
	}
	c.propose(l, 1)
	c.awaitProposals(100)
	c.converge(100)
	got, _ := old.host.Status(1)
	want, _ := l.host.Status(1)
	if got.Err != nil || got.CommitIndex != want.CommitIndex {
		t.Fatalf("the new replica: commit index %d (%v), want the leader's %d", got.CommitIndex, got.Err, want.CommitIndex)
	}
}
