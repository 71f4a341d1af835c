package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// nodeByID maps the running nodes of a test cluster by node id.
func nodeByID(tc *testCluster) map[uint64]*clusterNode {
	out := map[uint64]*clusterNode{}
	for _, cn := range tc.nodes {
		if cn.n == nil {
			continue
		}
		if cs, _ := cn.n.ClusterStatus(); cs.Ready {
			out[cs.NodeID] = cn
		}
	}
	return out
}

// An operator's move: a dry run changes nothing; the move takes partition
// 0 off its preferred leader onto the node that held none of it, the new
// replica copies every record, the dropped one deletes its files, and the
// partition is pinned. Each refusal has its error, and a node marked down
// is refused as a target.
func TestClusterOperatorMove(t *testing.T) {
	tc := newTestCluster(t, 4, func(_ int, cn *clusterNode) { cn.deadAfter = time.Second })
	n1 := tc.nodes[0].n
	awaitCond(t, 20*time.Second, "4 nodes, each ready", func() error {
		if nodes := controllerState(n1).Nodes(); len(nodes) != 4 {
			return fmt.Errorf("%d nodes", len(nodes))
		}
		// A node is in the state once admitted, ready once it applied that:
		// nodeByID (below) finds only the ready ones.
		if ready := len(nodeByID(tc)); ready != 4 {
			return fmt.Errorf("%d nodes ready", ready)
		}
		return nil
	})
	if err := n1.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	var acked []log.Record
	for i := range 20 {
		v := fmt.Sprintf("m%d", i)
		off, err := produce(n1, "orders", 0, v)
		if err != nil {
			t.Fatalf("publish %s: %v", v, err)
		}
		acked = append(acked, log.Record{Offset: off, Value: []byte(v)})
	}
	topic, _ := controllerState(n1).Topic("orders")
	from := topic.Partitions[0].Replicas
	var spare uint64
	for _, nd := range controllerState(n1).Nodes() {
		if !slices.Contains(from, nd.ID) {
			spare = nd.ID
		}
	}
	to := []uint64{spare, from[1], from[2]}

	mv, err := n1.PlanMove("orders", 0, to)
	if err != nil || !slices.Equal(mv.From, from) || !slices.Equal(mv.To, to) {
		t.Fatalf("dry run: %+v, %v; want %v → %v", mv, err, from, to)
	}
	if topic, _ := controllerState(n1).Topic("orders"); topic.Partitions[0].Target != nil || topic.Partitions[0].Pinned {
		t.Fatalf("a dry run changed the partition: %+v", topic.Partitions[0])
	}

	for _, c := range []struct {
		what  string
		topic string
		p     int32
		to    []uint64
		want  error
	}{
		{"unknown topic", "nope", 0, to, engine.ErrUnknownTopic},
		{"unknown partition", "orders", 7, to, engine.ErrUnknownPartition},
		{"unknown node", "orders", 0, []uint64{99, from[1], from[2]}, engine.ErrUnknownNode},
		{"too few nodes", "orders", 0, to[:2], engine.ErrInvalidMove},
		{"a node twice", "orders", 0, []uint64{spare, spare, from[1]}, engine.ErrInvalidMove},
	} {
		if _, err := n1.MoveReplicas(context.Background(), c.topic, c.p, c.to); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, err, c.want)
		}
	}

	if mv, err = n1.MoveReplicas(context.Background(), "orders", 0, to); err != nil {
		t.Fatalf("move %v → %v: %v", from, to, err)
	}
	byID := nodeByID(tc)
	awaitCond(t, 60*time.Second, "the move done and every new replica holding every record", func() error {
		topic, _ := controllerState(n1).Topic("orders")
		p := topic.Partitions[0]
		if !slices.Equal(p.Replicas, to) || p.Target != nil {
			return fmt.Errorf("replicas %v, target %v", p.Replicas, p.Target)
		}
		if !p.Pinned {
			return errors.New("not pinned")
		}
		for _, id := range to {
			got, err := localRecords(byID[id].n, "orders", 0)
			if err != nil {
				return err
			}
			if err := sameRecords(got, acked); err != nil {
				return fmt.Errorf("node %d: %v", id, err)
			}
		}
		if _, err := os.Stat(filepath.Join(byID[from[0]].dir, "log", engine.PartitionName("orders", 0))); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("node %d, moved away from, still has the partition's files (%v)", from[0], err)
		}
		return nil
	})

	// A node marked down is refused as a target.
	via := byID[spare].n
	tc.stop(byID[from[0]])
	awaitCond(t, 30*time.Second, "the stopped node marked down", func() error {
		if nd, _ := controllerState(via).Node(from[0]); !nd.Down {
			return fmt.Errorf("node %d not down", from[0])
		}
		return nil
	})
	if _, err := via.MoveReplicas(context.Background(), "orders", 1, []uint64{from[0], to[0], to[1]}); !errors.Is(err, engine.ErrMoveRefused) {
		t.Fatalf("a move onto a node marked down: %v, want ErrMoveRefused", err)
	}
}
