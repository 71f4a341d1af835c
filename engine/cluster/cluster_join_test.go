package cluster

import (
	"fmt"
	"testing"
	"time"
)

// A node joining while the first candidate it asks — the controller's
// leader — is paused (it holds calls without answering) joins once the
// others elected a new leader, not after its call to the paused one timed
// out at 10 s. Found by the fault suite (chaos, membership, seed 3114): a
// fourth node started as the node it would join through first was paused
// (SIGSTOP) joined 9.4 s later. Before the fix: 10.2 s.
func TestClusterJoinWhileTheControllerLeaderIsDown(t *testing.T) {
	tc := newTestCluster(t, 3)
	var leader *clusterNode
	var others []string
	awaitCond(t, 30*time.Second, "a controller leader", func() error {
		others = nil
		for _, cn := range tc.nodes {
			cs, _ := cn.n.ClusterStatus()
			if cs.ControllerLeader == 0 {
				return fmt.Errorf("no controller leader yet")
			}
			if cs.ControllerLeader == cs.NodeID {
				leader = cn
			} else {
				others = append(others, cn.addr)
			}
		}
		if leader == nil {
			return fmt.Errorf("no leader found")
		}
		return nil
	})
	leader.n.asMember().gate.pause() // a SIGSTOP: it answers nothing
	defer leader.n.asMember().gate.resume()
	started := time.Now()
	n4 := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: append([]string{leader.addr}, others...), joinWait: 30 * time.Second}
	tc.nodes = append(tc.nodes, n4)
	tc.start(n4)
	awaitCond(t, 30*time.Second, "node 4 a member", func() error { return n4.n.awaitReady(time.Second) })
	if took := time.Since(started); took > 8*time.Second { // before: 10.2 s; after: 2.5-4.5 s

		t.Fatalf("node 4 joined %v after it started, with two of three members up", took.Round(time.Millisecond))
	}
}
