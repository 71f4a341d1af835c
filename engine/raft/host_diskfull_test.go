package raft

import (
	"errors"
	"syscall"
	"testing"
)

// TestHostStoppedLeaderClaimsNoLeadership: a leader whose disk fills stops
// its replica (ErrReplicaStopped wrapping ENOSPC). From then on its status
// names no leader and says why (Err), so this node's callers go to the
// leader the other replicas elect (within 2 election timeouts here) instead
// of proposing to a replica that can never commit; a proposal made to it
// is refused as not-leader. Once the new leader's heartbeats reach it, it
// names that leader.
func TestHostStoppedLeaderClaimsNoLeadership(t *testing.T) {
	c := newHCluster(t, 7, 1, HostConfig{})
	defer c.close()
	if err := c.nodes[0].host.Campaign(1); err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	c.awaitLeaders(100)
	full := c.leader(1)
	defer full.fs.SetFault(nil) // before close: the store closes cleanly
	c.propose(full, 1)
	c.awaitProposals(50)
	full.fs.SetFault(func(op, _ string) error {
		if op == "write" {
			return syscall.ENOSPC
		}
		return nil
	})
	var st GroupStatus
	for i := 0; i < 100; i++ {
		c.propose(full, 1)
		c.round()
		if st, _ = full.host.Status(1); st.Err != nil {
			break
		}
	}
	if !errors.Is(st.Err, ErrReplicaStopped) || !errors.Is(st.Err, syscall.ENOSPC) {
		t.Fatalf("the full leader's status: err %v; want ErrReplicaStopped wrapping ENOSPC", st.Err)
	}
	if st.IsLeader || st.Leader != 0 {
		t.Fatalf("the stopped replica still claims leadership: IsLeader %v, Leader %d (term %d)", st.IsLeader, st.Leader, st.Term)
	}
	var nl *NotLeaderError
	done := make(chan error, 1)
	full.host.Propose(1, []byte("x"), func(_ int64, err error) { done <- err })
	c.round()
	if err := <-done; !errors.As(err, &nl) || nl.Leader != 0 {
		t.Fatalf("a proposal to the stopped replica: %v; want a NotLeaderError naming no leader", err)
	}
	// The others elect a leader among themselves.
	rounds := 0
	for ; rounds < 2*DefaultElectionTicks+10; rounds++ {
		if l := c.leader(1); l != nil && l != full {
			break
		}
		c.round()
	}
	if l := c.leader(1); l == nil || l == full {
		t.Fatalf("no leader among the others after %d rounds", rounds)
	}
	t.Logf("a new leader after %d rounds", rounds)
	// The new leader's heartbeats reach the stopped replica: its status
	// names the new leader (never itself), which this node's callers ask.
	leader := c.leader(1)
	want, _ := leader.host.Status(1)
	for range 2 * DefaultHeartbeatTicks {
		c.round()
	}
	if st, _ = full.host.Status(1); st.IsLeader || st.Leader != leader.id || st.Term != want.Term || st.Err == nil {
		t.Fatalf("the stopped replica's status after the election: leader %d (IsLeader %v) term %d err %v; want leader %d term %d, and the stop error",
			st.Leader, st.IsLeader, st.Term, st.Err, leader.id, want.Term)
	}
}
