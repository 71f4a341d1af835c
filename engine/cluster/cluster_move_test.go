package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/transport"
)

// controllerState is a copy of the controller's state as n applied it.
func controllerState(n *Node) *meta.State {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state.Clone()
}

// localRecords reads a partition from this node's own replica (not through
// peers): an error if the node does not serve it from a local log.
func localRecords(n *Node, topic string, p int32) ([]log.Record, error) {
	part, err := n.partition(topic, p)
	if err != nil {
		return nil, err
	}
	if part.Log == nil {
		return nil, fmt.Errorf("node %d serves %s/%d from peers, not a local replica", n.id.NodeID, topic, p)
	}
	return readAll(n, topic, p)
}

// sameRecords checks that got holds want's records at the same offsets.
func sameRecords(got, want []log.Record) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Offset != want[i].Offset || string(got[i].Value) != string(want[i].Value) {
			return fmt.Errorf("record %d: %d %q, want %d %q", i, got[i].Offset, got[i].Value, want[i].Offset, want[i].Value)
		}
	}
	return nil
}

// Replica moves end to end: a fourth node joins and replicas move to it
// until the nodes hold 3, 2, 2, 2 of the 9; a node then stops for longer
// than the dead-node timeout: it is marked down and each of its replicas is
// re-created on a live node, which copies the whole log; publishing goes
// on; the node comes back: it is marked up, gets replicas again and copies
// what it missed. Throughout, every acknowledged record is on every replica
// of its partition, at the offset its publish returned.
func TestClusterMovesReplicas(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, cn *clusterNode) { cn.deadAfter = time.Second })
	const parts = 3
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	byID := map[uint64]*clusterNode{} // node ids follow the order joins were admitted in
	learnIDs := func() {
		for _, cn := range tc.nodes {
			if cn.n == nil {
				continue
			}
			if cs, _ := cn.n.ClusterStatus(); cs.Ready {
				byID[cs.NodeID] = cn
			}
		}
	}
	acked := map[int32][]log.Record{}
	var publishVia func(*Node, string)
	// publish publishes through every running node: each forwards the
	// partitions it does not lead, so each has forwarded before its
	// partition values are replaced by a move.
	publish := func(round string) {
		t.Helper()
		for i, cn := range tc.nodes {
			if cn.n != nil {
				publishVia(cn.n, fmt.Sprintf("%s-via%d", round, i))
			}
		}
	}
	publishVia = func(via *Node, round string) {
		t.Helper()
		for p := range int32(parts) {
			for i := range 10 {
				v := fmt.Sprintf("%s-%d-%d", round, p, i)
				off, err := produce(via, "orders", p, v)
				if err != nil {
					t.Fatalf("publish %s: %v", v, err)
				}
				acked[p] = append(acked[p], log.Record{Offset: off, Value: []byte(v)})
			}
		}
	}
	// everyReplicaHasAll: every replica (per the controller's state as node
	// via applied it) of every partition serves every acknowledged record
	// from its own log, and no move is under way.
	everyReplicaHasAll := func(via *Node, want func(*meta.State) error) func() error {
		return func() error {
			learnIDs()
			st := controllerState(via)
			if err := want(st); err != nil {
				return err
			}
			topic, _ := st.Topic("orders")
			for p, mp := range topic.Partitions {
				if mp.Target != nil {
					return fmt.Errorf("partition %d still moving to %v", p, mp.Target)
				}
				for _, id := range mp.Replicas {
					cn := byID[id]
					if cn == nil || cn.n == nil {
						return fmt.Errorf("partition %d has a replica on stopped node %d", p, id)
					}
					got, err := localRecords(cn.n, "orders", int32(p))
					if err != nil {
						return err
					}
					if err := sameRecords(got, acked[int32(p)]); err != nil {
						return fmt.Errorf("node %d, partition %d: %v", id, p, err)
					}
				}
			}
			return nil
		}
	}
	counts := func(st *meta.State) map[uint64]int {
		out := map[uint64]int{}
		topic, _ := st.Topic("orders")
		for _, mp := range topic.Partitions {
			for _, id := range mp.Replicas {
				out[id]++
			}
		}
		return out
	}
	balanced := func(nodes ...uint64) func(*meta.State) error {
		return func(st *meta.State) error {
			c := counts(st)
			var got []int
			for _, id := range nodes {
				got = append(got, c[id])
			}
			if slices.Max(got)-slices.Min(got) > 1 {
				return fmt.Errorf("replicas per node %v (nodes %v), want counts at most one apart", got, nodes)
			}
			return nil
		}
	}
	awaitCond(t, 20*time.Second, "the topic placed", func() error {
		if topic, _ := controllerState(tc.nodes[0].n).Topic("orders"); topic.Pending() {
			return fmt.Errorf("pending")
		}
		return nil
	})
	publish("before")

	// A fourth node joins: replicas spread to it.
	n4 := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: []string{tc.nodes[0].addr}, deadAfter: time.Second}
	tc.nodes = append(tc.nodes, n4)
	tc.start(n4)
	awaitCond(t, 60*time.Second, "replicas spread to node 4", everyReplicaHasAll(tc.nodes[0].n, balanced(1, 2, 3, 4)))
	publish("joined")

	// A node stops past the dead-node timeout: its replicas go to the others.
	cs, _ := tc.nodes[1].n.ClusterStatus()
	gone := cs.NodeID
	tc.stop(tc.nodes[1])
	awaitCond(t, 60*time.Second, "the stopped node marked down and its replicas re-created", everyReplicaHasAll(tc.nodes[0].n, func(st *meta.State) error {
		if nd, _ := st.Node(gone); !nd.Down {
			return fmt.Errorf("node %d not marked down", gone)
		}
		if c := counts(st); c[gone] > 0 {
			return fmt.Errorf("node %d still holds %d replicas", gone, c[gone])
		}
		return nil
	}))
	publish("down")

	// It comes back: marked up, given replicas again, copies what it missed.
	tc.start(tc.nodes[1])
	awaitCond(t, 60*time.Second, "the node back with replicas", everyReplicaHasAll(tc.nodes[0].n, func(st *meta.State) error {
		if nd, _ := st.Node(gone); nd.Down {
			return fmt.Errorf("node %d still marked down", gone)
		}
		return balanced(1, 2, 3, 4)(st)
	}))
	publish("back")
	awaitCond(t, 30*time.Second, "every replica has the last records", everyReplicaHasAll(tc.nodes[0].n, func(*meta.State) error { return nil }))

	// Node 4 is decommissioned: its replicas move to the three others, then
	// it is removed; every replica still has every record. With three
	// nodes left for replication factor 3, another decommission is refused.
	cs4, _ := n4.n.ClusterStatus()
	if err := tc.nodes[0].n.DecommissionNode(context.Background(), cs4.NodeID); err != nil {
		t.Fatalf("decommission node %d: %v", cs4.NodeID, err)
	}
	awaitCond(t, 60*time.Second, "node 4 removed after its replicas moved", everyReplicaHasAll(tc.nodes[0].n, func(st *meta.State) error {
		if _, ok := st.Node(cs4.NodeID); ok {
			return fmt.Errorf("node %d still a member (holds %d replicas)", cs4.NodeID, counts(st)[cs4.NodeID])
		}
		return nil
	}))
	if err := tc.nodes[0].n.DecommissionNode(context.Background(), gone); !errors.Is(err, engine.ErrDecommissionRefused) {
		t.Fatalf("decommission with 3 nodes left for replication factor 3: %v, want ErrDecommissionRefused", err)
	}
	if err := tc.nodes[0].n.DecommissionNode(context.Background(), 99); !errors.Is(err, engine.ErrUnknownNode) {
		t.Fatalf("decommission of node 99: %v, want ErrUnknownNode", err)
	}
	// Restarted with its identity, the removed node stops, saying why.
	tc.stop(n4)
	tc.start(n4)
	select {
	case err := <-n4.done:
		if err == nil || !strings.Contains(err.Error(), "was removed") {
			t.Fatalf("a removed node restarted: Run returned %v, want an error saying it was removed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a removed node restarted and kept running")
	}
	_ = n4.n.Close()
	n4.n = nil
	publish("after-decommission")
	awaitCond(t, 30*time.Second, "every replica has the last records", everyReplicaHasAll(tc.nodes[0].n, func(*meta.State) error { return nil }))

	// The data of the partitions moved away while it was down was deleted
	// when it started again: it keeps files only of what it holds now.
	st := controllerState(tc.nodes[0].n)
	topic, _ := st.Topic("orders")
	for p, mp := range topic.Partitions {
		_, err := os.Stat(filepath.Join(tc.nodes[1].dir, "log", engine.PartitionName("orders", int32(p))))
		if held := slices.Contains(mp.Replicas, gone); held != (err == nil) {
			t.Errorf("node %d: partition %d held %v, its directory: %v", gone, p, held, err)
		}
	}
}

// A move given up half way — its target set back to the replicas the
// partition has, as NextMove does when the node a move was going to goes
// down and the best replacement is the node it was leaving — is a move
// back: the group's leader takes the learner it had added out of the
// group's configuration before the end is recorded. Before, the target was
// simply cleared: the learner stayed in the configuration (the leader kept
// its progress), its node deleted its copy (it held nothing any more), and
// when a later move gave it the partition again it opened an empty log the
// leader took for a caught-up one — raft's "tocommit(N) is out of range
// [lastIndex(0)]" panic on that node, and an empty voter once promoted.
func TestClusterMoveGivenUpHalfWay(t *testing.T) {
	tc := newTestCluster(t, 4)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	var acked []log.Record
	publish := func(round string) {
		t.Helper()
		for i := range 20 {
			v := fmt.Sprintf("%s-%d", round, i)
			off, err := produce(tc.nodes[0].n, "orders", 0, v)
			if err != nil {
				t.Fatalf("publish %s: %v", v, err)
			}
			acked = append(acked, log.Record{Offset: off, Value: []byte(v)})
		}
	}
	awaitCond(t, 30*time.Second, "a first publish", func() error {
		_, err := produce(tc.nodes[0].n, "orders", 0, "first")
		if err == nil {
			acked = nil // its offset is not known; read from 1 on below
		}
		return err
	})
	publish("before")
	byID := map[uint64]*clusterNode{}
	for _, cn := range tc.nodes {
		cs, _ := cn.n.ClusterStatus()
		byID[cs.NodeID] = cn
	}
	topic, _ := controllerState(tc.nodes[0].n).Topic("orders")
	mp := topic.Partitions[0]
	reps := slices.Clone(mp.Replicas)
	var spare uint64
	for id := range byID {
		if !slices.Contains(reps, id) {
			spare = id
		}
	}
	there := append(slices.Clone(reps[:2]), spare)
	move := func(to []uint64) {
		t.Helper()
		if _, err := tc.nodes[0].n.proposeMeta(context.Background(), meta.Command{MoveReplicas: &meta.MoveReplicas{Group: mp.Group, Replicas: to}}); err != nil {
			t.Fatalf("move to %v: %v", to, err)
		}
	}
	status := func() (raftStatus, error) {
		ld := tc.leaderOf("orders", 0)
		if ld == nil {
			return raftStatus{}, errors.New("no leader")
		}
		st, _ := ld.n.asMember().host.Status(mp.Group)
		nodes := func(ids []uint64) []uint64 { // the test names nodes
			out := make([]uint64, len(ids))
			for i, id := range ids {
				out[i] = transport.NodeOf(id)
			}
			return out
		}
		return raftStatus{voters: nodes(st.Voters), learners: nodes(st.Learners), joint: st.Joint}, nil
	}
	// Throughout, a node the group's configuration counts keeps its copy
	// once it has opened it (a node may open its copy after the leader
	// added it: it then has nothing the leader counts on).
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() { // owned: stopped and awaited below
		opened := map[uint64]bool{}
		for {
			select {
			case <-stop:
				watched <- nil
				return
			case <-time.After(2 * time.Millisecond): // sleep-ok: sampling an invariant
			}
			st, err := status()
			if err != nil {
				continue
			}
			counted := append(slices.Clone(st.voters), st.learners...)
			for id := range byID {
				if !slices.Contains(counted, id) {
					delete(opened, id)
					continue
				}
				has := hasCopy(byID[id].n, "orders", 0)
				if !has && opened[id] {
					watched <- fmt.Errorf("node %d closed its copy while the group's configuration %+v counts it", id, st)
					return
				}
				opened[id] = opened[id] || has
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-watched; err != nil {
			t.Error(err)
		}
	}()
	// Start a move to the spare node and give it up as soon as the spare
	// node is a learner of the group.
	move(there)
	awaitCond(t, 30*time.Second, "the spare node a learner", func() error {
		st, err := status()
		if err != nil {
			return err
		}
		if !slices.Contains(st.learners, spare) {
			return fmt.Errorf("configuration %+v, want learner %d", st, spare)
		}
		return nil
	})
	move(reps)
	settled := func(want []uint64) func() error {
		return func() error {
			topic, _ := controllerState(tc.nodes[0].n).Topic("orders")
			if mp := topic.Partitions[0]; mp.Target != nil || !sameSet(mp.Replicas, want) {
				return fmt.Errorf("replicas %v moving to %v, want %v settled", mp.Replicas, mp.Target, want)
			}
			st, err := status()
			if err != nil {
				return err
			}
			if st.joint || len(st.learners) > 0 || !sameSet(st.voters, want) {
				return fmt.Errorf("group configuration %+v, want voters %v and nothing else", st, want)
			}
			return nil
		}
	}
	awaitCond(t, 30*time.Second, "the group back to its replicas", settled(reps))
	// The partition goes to the spare node after all: it copies the log
	// from the start and serves every acknowledged record.
	publish("given-up")
	move(there)
	awaitCond(t, 30*time.Second, "the move to the spare node done", settled(there))
	publish("moved")
	awaitCond(t, 30*time.Second, "every replica has every record", func() error {
		for _, id := range there {
			got, err := localRecords(byID[id].n, "orders", 0)
			if err != nil {
				return err
			}
			if len(got) == 0 {
				return errors.New("no records")
			}
			if err := sameRecords(got[1:], acked); err != nil {
				return fmt.Errorf("node %d: %v", id, err)
			}
		}
		return nil
	})
}

// raftStatus is the part of a group's status a move test looks at.
type raftStatus struct {
	voters, learners []uint64
	joint            bool
}

// hasCopy: n has its replica of topic/p open (the served one or, during a
// move to n, the learning one).
func hasCopy(n *Node, topic string, p int32) bool {
	n.tab.Mu.RLock()
	defer n.tab.Mu.RUnlock()
	t, ok := n.tab.Topics[topic]
	if !ok || int(p) >= len(t.Parts) {
		return false
	}
	return t.Parts[p].Log != nil || t.Learning[p] != nil
}
