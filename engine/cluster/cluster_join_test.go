package cluster

import (
	"fmt"
	"testing"
	"time"
)

// A node joining while the first candidate it asks is paused (it holds
// calls without answering, as a SIGSTOPped spoold does) joins through the
// others without waiting 10 s for the paused one. Found by the fault suite
// (chaos, membership, seed 3114): a fourth node started as the node it
// would join through first was paused joined 9.4 s later. Before the fix:
// 10 s.
func TestClusterJoinPastAPausedCandidate(t *testing.T) {
	tc := newTestCluster(t, 3)
	var paused *clusterNode
	var others []string
	awaitCond(t, 30*time.Second, "a controller leader", func() error {
		paused, others = nil, nil
		for _, cn := range tc.nodes {
			cs, _ := cn.n.ClusterStatus()
			switch {
			case cs.ControllerLeader == 0:
				return fmt.Errorf("no controller leader yet")
			case cs.ControllerLeader != cs.NodeID && paused == nil:
				paused = cn // a follower: no election needed without it
			default:
				others = append(others, cn.addr)
			}
		}
		return nil
	})
	paused.n.asMember().gate.pause()
	defer paused.n.asMember().gate.resume()
	started := time.Now()
	n4 := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: append([]string{paused.addr}, others...), joinWait: 30 * time.Second}
	tc.nodes = append(tc.nodes, n4)
	tc.start(n4)
	// One wait: awaitReady's timeout message reads the identity a join
	// is writing.
	if err := n4.n.awaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(started); took > 6*time.Second { // before: 10 s; after: about 2 s
		t.Fatalf("node 4 joined %v after it started, with two of three members answering", took.Round(time.Millisecond))
	}
}
