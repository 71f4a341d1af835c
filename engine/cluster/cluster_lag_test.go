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
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/transport"
)

// A node whose view of the cluster lags behind two moves of a partition —
// its replica moved away, then back — while its old copy still runs under
// the state it last applied. The move back gives the node's replica a new
// incarnation (a new raft id): the old copy does not answer for it, and
// nothing it acknowledged counts for the new replica. The node then applies
// the move away (it stops the copy and keeps its data: the stray chore
// deletes data only once the controller's leader confirms no replica is
// wanted there) and the move back (it opens the new replica from that
// data); the move finishes and the node serves every acknowledged record
// from its own replica. With one raft id per node, the old copy answered
// the leader as the returning replica, the drop deleted its data and the
// empty replica opened under the same id was sent a commit index past its
// end (raft panics: "tocommit(N) is out of range [lastIndex(0)]").
func TestClusterLaggingNodeKeepsACopyMovedBack(t *testing.T) {
	// In two steps: the state without the replica, then the rest. In one:
	// from the state in which it held the replica straight to the one in
	// which it gets it again (its old copy becomes the learning one).
	for _, steps := range []int{2, 1} {
		t.Run(fmt.Sprintf("%d steps", steps), func(t *testing.T) { laggingNodeMovedBack(t, steps) })
	}
}

func laggingNodeMovedBack(t *testing.T, steps int) {
	holdAll := func(_ int, cn *clusterNode) {
		cn.hold = new(atomic.Int64)
		cn.hold.Store(math.MaxInt64)
	}
	tc := newTestCluster(t, 3, holdAll)
	n4 := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: []string{tc.nodes[0].addr}}
	holdAll(3, n4)
	tc.nodes = append(tc.nodes, n4)
	tc.start(n4)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	byID := map[uint64]*clusterNode{}
	awaitCond(t, 30*time.Second, "four members and the topic placed", func() error {
		for _, cn := range tc.nodes {
			cs, _ := cn.n.ClusterStatus()
			if !cs.Ready {
				return fmt.Errorf("node at %s not ready", cn.addr)
			}
			byID[cs.NodeID] = cn
		}
		topic, _ := controllerState(tc.nodes[0].n).Topic("orders")
		if topic.Pending() || len(controllerState(tc.nodes[0].n).Nodes()) != 4 {
			return fmt.Errorf("not placed yet")
		}
		return nil
	})
	var acked []log.Record
	publish := func(via *Node, round string, k int) {
		t.Helper()
		for i := range k {
			v := fmt.Sprintf("%s-%d", round, i)
			off, err := produce(via, "orders", 0, v)
			if err != nil {
				t.Fatalf("publish %s: %v", v, err)
			}
			acked = append(acked, log.Record{Offset: off, Value: []byte(v)})
		}
	}
	publish(tc.nodes[0].n, "first", 20)

	// The lagging node x: a replica that neither leads the partition nor
	// the controller (it must not be the one to drive either move).
	topic, _ := controllerState(tc.nodes[0].n).Topic("orders")
	group, replicas := topic.Partitions[0].Group, topic.Partitions[0].Replicas
	var x, other uint64
	awaitCond(t, 10*time.Second, "a replica leading neither the partition nor the controller", func() error {
		for _, id := range replicas {
			h := byID[id].n.asMember().host
			pst, _ := h.Status(group)
			cst, _ := h.Status(controllerGroup)
			if pst.Leader != 0 && cst.Leader != 0 && !pst.IsLeader && !cst.IsLeader {
				x = id
				break
			}
		}
		if x == 0 {
			return fmt.Errorf("no such replica among %v", replicas)
		}
		return nil
	})
	for id := range byID {
		if !slices.Contains(replicas, id) {
			other = id
		}
	}
	xn, xc := byID[x], byID[x].n
	var driver *cluster // a node that applies every command
	for id, cn := range byID {
		if id != x {
			driver = cn.n
		}
	}
	applied := func(c *cluster) int64 { return c.asMember().ctrl.Applied() }
	xn.hold.Store(applied(xc)) // x applies nothing from here on
	t.Logf("partition group %d on %v; node %d lags", group, replicas, x)

	propose := func(to []uint64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := driver.proposeMeta(ctx, meta.Command{MoveReplicas: &meta.MoveReplicas{Group: group, Replicas: to}}); err != nil {
			t.Fatal(err)
		}
	}
	partitionIs := func(cond func(mp meta.Partition) bool) func(*meta.State) bool {
		return func(st *meta.State) bool {
			tp, _ := st.Topic("orders")
			return cond(tp.Partitions[0])
		}
	}
	without := slices.DeleteFunc(slices.Clone(replicas), func(id uint64) bool { return id == x })
	away := append(slices.Clone(without), other)
	propose(away)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := driver.awaitState(ctx, partitionIs(func(mp meta.Partition) bool {
		return mp.Target == nil && slices.Equal(mp.Replicas, away)
	})); err != nil {
		t.Fatalf("the move away did not finish: %v", err)
	}
	awayAt := applied(driver) // the state in which the partition left x
	publish(driver, "away", 20)

	// The move back: the group gets x's replica as a learner under a new
	// incarnation, which x has not opened. Its old copy, still running
	// under the state x last applied, does not answer for it.
	back := append(slices.Clone(without), x)
	propose(back)
	var newID uint64
	if err := driver.awaitState(ctx, partitionIs(func(mp meta.Partition) bool {
		newID = transport.ReplicaID(x, mp.Incarnation(x))
		return slices.Equal(mp.Target, back)
	})); err != nil {
		t.Fatal(err)
	}
	if newID == x {
		t.Fatalf("node %d moved back keeps replica id %d, want a new incarnation", x, newID)
	}
	awaitCond(t, 20*time.Second, "x's new replica a learner of the group", func() error {
		for _, cn := range byID {
			if st, ok := cn.n.asMember().host.Status(group); ok && st.IsLeader {
				if !slices.Contains(st.Learners, newID) {
					return fmt.Errorf("learners %v, want %d", st.Learners, newID)
				}
				return nil
			}
		}
		return fmt.Errorf("no leader")
	})
	publish(driver, "back", 20)

	if steps == 2 { // first the state without its replica
		xn.hold.Store(awayAt)
		xc.asMember().signalController()
		awaitCond(t, 20*time.Second, "node x applied the move away", func() error {
			if a := applied(xc); a < awayAt {
				return fmt.Errorf("applied %d, want %d", a, awayAt)
			}
			return nil
		})
	}
	xn.hold.Store(math.MaxInt64)
	xc.asMember().signalController()
	publish(driver, "caught-up", 20)
	if err := driver.awaitState(ctx, partitionIs(func(mp meta.Partition) bool {
		return mp.Target == nil && slices.Equal(mp.Replicas, back)
	})); err != nil {
		t.Fatalf("the move back did not finish: %v", err)
	}
	awaitCond(t, 30*time.Second, "node x serves every record from its own replica", func() error {
		if st, ok := xc.asMember().host.Status(group); !ok || st.Err != nil {
			return fmt.Errorf("x's replica of group %d: running %v, %v", group, ok, st.Err)
		}
		got, err := localRecords(xn.n, "orders", 0)
		if err != nil {
			return err
		}
		return sameRecords(got, acked)
	})
}
