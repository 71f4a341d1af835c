package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
)

// A node without a replica of a partition reads its offsets from a
// replica that has one; the committed end it reports never goes back,
// whichever replica answers. Found by the fault suite (chaos, membership
// kind, seed 2810): with four nodes, a sidecar holding no replica of a
// partition said its end was 1,742, then 233 a quarter of a second later —
// the replica that answered had just restarted and not caught up. Here:
// follower F stops hearing the leader (paused), 5 records commit without
// it, the storage-off node reports 6; then the leader and the other
// follower stand still and F, awake again, is the only replica that
// answers, with its committed end of 1. Before the fix the node reported 1.
func TestClusterRemoteOffsetsNeverGoBack(t *testing.T) {
	tc := newTestCluster(t, 3)
	client := &clusterNode{dir: t.TempDir(), join: []string{tc.nodes[1].addr}, client: true}
	tc.nodes = append(tc.nodes, client) // stopped with the others
	tc.start(client)
	if err := client.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(client.n, "orders", 0, "first"); return err })
	var leader, f, g *clusterNode
	awaitCond(t, 30*time.Second, "a leader with both followers caught up", func() error {
		if leader = tc.leaderOf("orders", 0); leader == nil {
			return fmt.Errorf("no leader")
		}
		for _, cn := range tc.nodes[:3] {
			if _, end, err := cn.n.Offsets("orders", 0); err != nil || end != 1 {
				return fmt.Errorf("node at %s: committed end %d (%v)", cn.addr, end, err)
			}
		}
		return nil
	})
	for _, cn := range tc.nodes[:3] {
		switch {
		case cn == leader:
		case f == nil:
			f = cn
		default:
			g = cn
		}
	}
	fg, lg, gg := &f.n.asMember().gate, &leader.n.asMember().gate, &g.n.asMember().gate
	defer func() { fg.resume(); lg.resume(); gg.resume() }()
	fg.pause()
	for i := range 5 {
		if _, err := produce(leader.n, "orders", 0, fmt.Sprintf("r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	awaitCond(t, 30*time.Second, "the storage-off node reports the committed end 6", func() error {
		if _, end, err := client.n.Offsets("orders", 0); err != nil || end != 6 {
			return fmt.Errorf("committed end %d (%v)", end, err)
		}
		return nil
	})
	lg.pause()
	gg.pause()
	fg.resume() // F answers; it still holds 1 record: the leader stands still
	_, end, err := client.n.Offsets("orders", 0)
	if err != nil {
		t.Fatalf("offsets with only the lagging replica answering: %v", err)
	}
	if end < 6 {
		t.Fatalf("the storage-off node reported the committed end %d after 6: it went back", end)
	}
}
