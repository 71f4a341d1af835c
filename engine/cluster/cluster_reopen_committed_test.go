package cluster

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
)

// A node that read a partition's committed end from the other replicas and
// is then given (back) a replica of its own — a restarted node applying the
// controller's log, the move that gave it the replica after the reads —
// counts as committed only what its own log holds; the end read remotely
// bounds what it reports and reads remotely, as for a stopped replica.
// Found by the fault suite (chaos, membership kind with leaves, seed 3105):
// a node killed while replicas moved to it restarted, its sidecar read the
// end of a __groups partition remotely (offset N), then its replica opened
// with N as its committed end over a log ending lower; the coordinator's
// applier read past the log's end ("cannot read __groups-4 at offset 94: no
// records below the committed end") and stopped for good: the consumer
// group stalled, 45 acknowledged messages never delivered. Before the fix
// the reopened replica's committed end was 11 over a log of 1 record.
func TestClusterReplicaOpenedAfterRemoteReadsKeepsItsOwnEnd(t *testing.T) {
	tc := newTestCluster(t, 4)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "v0"); return err })
	byID := map[uint64]*clusterNode{}
	for _, cn := range tc.nodes {
		cs, _ := cn.n.ClusterStatus()
		byID[cs.NodeID] = cn
	}
	var x *clusterNode
	var xid uint64
	var replicas []uint64
	awaitCond(t, 30*time.Second, "a node without a replica", func() error {
		topic, _ := controllerState(tc.nodes[0].n).Topic("orders")
		replicas = topic.Partitions[0].Replicas
		for id, cn := range byID {
			if !slices.Contains(replicas, id) {
				x, xid = cn, id
				return nil
			}
		}
		return fmt.Errorf("replicas %v", replicas)
	})
	// The controller's log as node x applied it before it is given the
	// partition: the restart below applies no further at first.
	before := x.n.asMember().ctrlCommitted()
	to := append(slices.Clone(replicas[:2]), xid)
	if _, err := tc.nodes[0].n.MoveReplicas(context.Background(), "orders", 0, to); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "node x holding a caught-up replica", func() error {
		topic, _ := controllerState(x.n).Topic("orders")
		if p := topic.Partitions[0]; p.Target != nil || !slices.Equal(p.Replicas, to) {
			return fmt.Errorf("replicas %v, target %v", p.Replicas, p.Target)
		}
		if recs, err := localRecords(x.n, "orders", 0); err != nil || len(recs) != 1 {
			return fmt.Errorf("%d local records (%v)", len(recs), err)
		}
		return nil
	})
	// The controller's log with the move committed, as a member knows it:
	// node x, restarted, must know that much is committed before the
	// others stand still (else it can apply nothing more).
	moved := byID[to[0]].n.asMember().ctrlCommitted()
	tc.stop(x)
	other := byID[to[0]]
	for i := 1; i <= 10; i++ {
		if _, err := produce(other.n, "orders", 0, fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	x.hold = &atomic.Int64{}
	x.hold.Store(before)
	tc.start(x)
	awaitCond(t, 30*time.Second, "node x reading the committed end 11 from the others", func() error {
		if _, end, err := x.n.Offsets("orders", 0); err != nil || end != 11 {
			return fmt.Errorf("end %d (%v)", end, err)
		}
		return nil
	})
	awaitCond(t, 30*time.Second, "node x knowing the move committed", func() error {
		if c := x.n.asMember().ctrlCommitted(); c < moved {
			return fmt.Errorf("controller log committed to %d, the move at %d", c, moved)
		}
		return nil
	})
	// The others stand still: node x's replica cannot catch up while it
	// opens.
	for _, cn := range tc.nodes {
		if cn != x {
			cn.n.asMember().gate.pause()
			defer cn.n.asMember().gate.resume()
		}
	}
	x.hold.Store(math.MaxInt64)
	x.n.asMember().signalController()
	awaitCond(t, 30*time.Second, "node x's replica opened", func() error {
		part, err := x.n.partition("orders", 0)
		if err != nil || part.Log == nil {
			return fmt.Errorf("no local replica yet (%v)", err)
		}
		if c, next := part.Committed.Load(), part.Log.NextOffset(); c > next {
			t.Fatalf("node x's replica counts %d records committed over a log of %d", c, next)
		}
		return nil
	})
	if _, end, err := x.n.Offsets("orders", 0); err != nil || end != 11 {
		t.Fatalf("node x reports the committed end %d (%v), reported 11 before", end, err)
	}
	for _, cn := range tc.nodes {
		cn.n.asMember().gate.resume()
	}
	awaitCond(t, 30*time.Second, "node x serving every record", func() error {
		recs, err := readAll(x.n, "orders", 0)
		if err != nil || len(recs) != 11 {
			return fmt.Errorf("%d records (%v)", len(recs), err)
		}
		return nil
	})
}

// The same for a learner promoted to serve: a node that read the
// partition's committed end from the others (its state still held the old
// placement) and then applies the end of the move that made its learner a
// voter reports no less than before, however far its copy lags. Found by
// the fault suite (chaos, membership kind with leaves, seed 3113): a node
// paused during a move resumed and reported 3,154, then 2,906. Before the
// fix: 1 after 11.
func TestClusterPromotedLearnerKeepsTheReportedEnd(t *testing.T) {
	tc := newTestCluster(t, 4, func(_ int, cn *clusterNode) { // no bound until one is set
		cn.hold = &atomic.Int64{}
		cn.hold.Store(math.MaxInt64)
	})
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "v0"); return err })
	byID := map[uint64]*clusterNode{}
	for _, cn := range tc.nodes {
		cs, _ := cn.n.ClusterStatus()
		byID[cs.NodeID] = cn
	}
	var x *clusterNode
	var xid uint64
	var replicas []uint64
	awaitCond(t, 30*time.Second, "a node without a replica", func() error {
		topic, _ := controllerState(tc.nodes[0].n).Topic("orders")
		replicas = topic.Partitions[0].Replicas
		for id, cn := range byID {
			if !slices.Contains(replicas, id) {
				x, xid = cn, id
				return nil
			}
		}
		return fmt.Errorf("replicas %v", replicas)
	})
	to := append(slices.Clone(replicas[:2]), xid)
	xm, hold := x.n.asMember(), x.hold
	if _, err := tc.nodes[0].n.MoveReplicas(context.Background(), "orders", 0, to); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "node x learning the partition", func() error {
		if !hasCopy(x.n, "orders", 0) {
			return fmt.Errorf("no copy yet")
		}
		hold.Store(xm.ctrl.Applied()) // the move's end is not applied here
		return nil
	})
	awaitCond(t, 30*time.Second, "the move ended (as the others see it)", func() error {
		topic, _ := controllerState(tc.nodes[0].n).Topic("orders")
		if p := topic.Partitions[0]; p.Target != nil || !slices.Equal(p.Replicas, to) {
			return fmt.Errorf("replicas %v, target %v", p.Replicas, p.Target)
		}
		return nil
	})
	// Node x knows the move's end committed (it applies it only once the
	// hold is lifted): with quiet controller groups the commit index may
	// reach it a little after the others saw the move end.
	ended := tc.nodes[0].n.asMember().ctrlCommitted()
	awaitCond(t, 30*time.Second, "node x knowing the move's end committed", func() error {
		if c := xm.ctrlCommitted(); c < ended {
			return fmt.Errorf("controller log committed to %d, the move's end at %d", c, ended)
		}
		return nil
	})
	xm.gate.pause() // its copy stands still
	defer xm.gate.resume()
	for i := 1; i <= 10; i++ {
		if _, err := produce(byID[to[0]].n, "orders", 0, fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	awaitCond(t, 30*time.Second, "node x reading the committed end 11 from the others", func() error {
		if _, end, err := x.n.Offsets("orders", 0); err != nil || end != 11 {
			return fmt.Errorf("end %d (%v)", end, err)
		}
		return nil
	})
	hold.Store(math.MaxInt64)
	xm.signalController()
	awaitCond(t, 30*time.Second, "node x serving its promoted copy", func() error {
		part, err := x.n.partition("orders", 0)
		if err != nil || part.Log == nil {
			return fmt.Errorf("not promoted yet (%v)", err)
		}
		return nil
	})
	if _, end, err := x.n.Offsets("orders", 0); err != nil || end < 11 {
		t.Fatalf("node x reports the committed end %d (%v) after its learner was promoted, reported 11 before", end, err)
	}
	xm.gate.resume()
	awaitCond(t, 30*time.Second, "node x serving every record", func() error {
		recs, err := readAll(x.n, "orders", 0)
		if err != nil || len(recs) != 11 {
			return fmt.Errorf("%d records (%v)", len(recs), err)
		}
		return nil
	})
}
