package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// A node that leaves (a pod replaced by a new node) hands the leadership
// of the partitions it leads to other replicas, waits until each of its
// replicas has been re-created on another node and caught up, and only
// then reports that it left: every acknowledged record is then on three
// replicas none of which is the leaving node, which may stop at once. A
// leave that would leave fewer nodes than a topic's replication factor is
// refused, and the node keeps its replicas.
func TestClusterLeave(t *testing.T) {
	tc := newTestCluster(t, 4)
	const parts = 4
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	// acked are the records acknowledged; unknown, the values of attempts
	// whose outcome was unknown (a leadership moving with the record
	// uncommitted), which may be stored too: the publish below retries
	// them without a producer id.
	acked := map[int32][]log.Record{}
	unknown := map[string]bool{}
	publish := func(via *Node, round string) {
		t.Helper()
		for p := range int32(parts) {
			for i := range 5 {
				v := fmt.Sprintf("%s-%d-%d", round, p, i)
				var off int64
				awaitCond(t, 20*time.Second, "publish "+v, func() (err error) {
					off, err = produce(via, "orders", p, v)
					if errors.Is(err, engine.ErrOutcomeUnknown) {
						unknown[v] = true
					}
					return err
				})
				acked[p] = append(acked[p], log.Record{Offset: off, Value: []byte(v)})
			}
		}
	}
	publish(tc.nodes[0].n, "before")
	// The node leading the most partitions leaves: the test then sees
	// leaderships handed over as well as replicas moved.
	var leaving *clusterNode
	most := -1
	for _, cn := range tc.nodes {
		cs, _ := cn.n.ClusterStatus()
		led := 0
		for _, r := range cs.Replicas {
			if r.IsLeader && r.Topic == "orders" {
				led++
			}
		}
		if led > most {
			leaving, most = cn, led
		}
	}
	cs, _ := leaving.n.ClusterStatus()
	id := cs.NodeID
	var others []*clusterNode
	for _, cn := range tc.nodes {
		if cn != leaving {
			others = append(others, cn)
		}
	}
	t.Logf("node %d leaves, leading %d of the %d partitions", id, most, parts)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rep, err := leaving.n.Leave(ctx)
	if err != nil || !rep.Left || len(rep.Held) != 0 {
		t.Fatalf("Leave: %+v, %v; want left with nothing held", rep, err)
	}
	t.Logf("left in %v", rep.Took)

	// What Left promises holds at that moment, before the node stops: no
	// partition has a replica (or a move target) on it, it leads nothing,
	// and every replica of the others has every record.
	st := controllerState(leaving.n)
	topic, _ := st.Topic("orders")
	for p, mp := range topic.Partitions {
		if slices.Contains(mp.Replicas, id) || slices.Contains(mp.Target, id) {
			t.Fatalf("partition %d: replicas %v, target %v after node %d left", p, mp.Replicas, mp.Target, id)
		}
	}
	tc.stop(leaving)
	byID := map[uint64]*clusterNode{}
	for _, cn := range others {
		s, _ := cn.n.ClusterStatus()
		byID[s.NodeID] = cn
	}
	awaitCond(t, 30*time.Second, "every replica of the three others has every record", func() error {
		st := controllerState(others[0].n)
		topic, _ := st.Topic("orders")
		for p, mp := range topic.Partitions {
			for _, r := range mp.Replicas {
				cn := byID[r]
				if cn == nil {
					return fmt.Errorf("partition %d has a replica on node %d, not one of the others", p, r)
				}
				got, err := localRecords(cn.n, "orders", int32(p))
				if err != nil {
					return err
				}
				if err := holdsAcked(got, acked[int32(p)], unknown); err != nil {
					return fmt.Errorf("node %d, partition %d: %v", r, p, err)
				}
			}
		}
		return nil
	})
	awaitCond(t, 30*time.Second, "the left node removed from the cluster", func() error {
		if _, ok := controllerState(others[0].n).Node(id); ok {
			return fmt.Errorf("node %d still a member", id)
		}
		return nil
	})
	publish(others[1].n, "after")

	// Three nodes for replication factor 3: leaving is refused, nothing moves.
	_, err = others[2].n.Leave(ctx)
	if !errors.Is(err, engine.ErrDecommissionRefused) {
		t.Fatalf("Leave with 3 nodes for replication factor 3: %v, want ErrDecommissionRefused", err)
	}
	s2, _ := others[2].n.ClusterStatus()
	if nd, _ := controllerState(others[2].n).Node(s2.NodeID); nd.Leaving {
		t.Fatalf("a refused leave marked node %d leaving", s2.NodeID)
	}
}

// A storage-off node learns that a member was removed (a node left the
// cluster) and forgets it. It crashed doing so: it asked its raft
// transport, which a storage-off node does not have, to drop the peer.
func TestClusterClientNodeSeesAMemberLeave(t *testing.T) {
	tc := newTestCluster(t, 4)
	client := &clusterNode{dir: t.TempDir(), join: []string{tc.nodes[1].addr}, client: true}
	tc.nodes = append(tc.nodes, client) // stopped with the others
	tc.start(client)
	if err := client.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "a publish through the storage-off node", func() error { _, err := produce(client.n, "orders", 0, "before"); return err })
	leaving := tc.nodes[3]
	cs, _ := leaving.n.ClusterStatus()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if rep, err := leaving.n.Leave(ctx); err != nil {
		t.Fatalf("Leave: %+v, %v", rep, err)
	}
	tc.stop(leaving)
	awaitCond(t, 30*time.Second, "the storage-off node seeing the member removed", func() error {
		st, _ := client.n.ClusterStatus()
		for _, m := range st.Members {
			if m.ID == cs.NodeID {
				return fmt.Errorf("node %d still listed", cs.NodeID)
			}
		}
		return nil
	})
	awaitCond(t, 20*time.Second, "a publish through the storage-off node after the removal", func() error { _, err := produce(client.n, "orders", 1, "after"); return err })
}

// Nodes that all start at once with the same join list — each one's own
// address among its entries, given as a DNS name (localhost), as the pods
// of a Deployment are given their headless Service — form one cluster
// with BootstrapExpect: the node with the lowest address creates it, the
// others join it. Without BootstrapExpect none of them would: each waits
// for a member to admit it.
func TestClusterBootstrapExpect(t *testing.T) {
	// Every address a name resolves to is a candidate that must answer:
	// the nodes listen on 127.0.0.1 only.
	if ips, err := net.LookupHost("localhost"); err != nil || len(ips) != 1 || ips[0] != "127.0.0.1" {
		t.Skipf("localhost resolves to %v (%v) here, not to 127.0.0.1 alone, where the nodes listen", ips, err)
	}
	tc := &testCluster{t: t}
	var join []string
	for range 3 {
		cn := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), expect: 3, joinWait: 60 * time.Second}
		_, port, _ := net.SplitHostPort(cn.addr)
		join = append(join, net.JoinHostPort("localhost", port))
		tc.nodes = append(tc.nodes, cn)
	}
	t.Cleanup(func() {
		for _, cn := range tc.nodes {
			tc.stop(cn)
		}
	})
	for _, cn := range tc.nodes {
		cn.join = join
		tc.start(cn)
	}
	lowest := tc.nodes[0]
	for _, cn := range tc.nodes {
		if compareAddr(cn.addr, lowest.addr) < 0 {
			lowest = cn
		}
	}
	awaitCond(t, 60*time.Second, "one cluster of three", func() error {
		var id string
		for _, cn := range tc.nodes {
			st, _ := cn.n.ClusterStatus()
			if !st.Ready || len(st.Members) != 3 {
				return fmt.Errorf("node at %s: ready %v, %d members", cn.addr, st.Ready, len(st.Members))
			}
			if id != "" && st.ClusterID != id {
				return fmt.Errorf("two clusters: %s and %s", id, st.ClusterID)
			}
			id = st.ClusterID
		}
		return nil
	})
	if st, _ := lowest.n.ClusterStatus(); st.NodeID != 1 {
		t.Fatalf("the node with the lowest address, %s, is node %d; want 1 (it created the cluster)", lowest.addr, st.NodeID)
	}
	if err := tc.nodes[2].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "a publish", func() error { _, err := produce(tc.nodes[1].n, "orders", 0, "v"); return err })
}

// BootstrapExpect counts only candidates that answer that they are joining
// too: one that cannot be reached may be a member behind a network
// partition, and creating a cluster beside it would split the nodes for
// good. Two nodes whose third candidate does not answer create nothing
// (with the rule "not serving counts" they did).
func TestClusterBootstrapExpectNeedsEveryAnswer(t *testing.T) {
	tc := &testCluster{t: t}
	gone := freeTCPAddr(t) // nothing listens there
	join := []string{gone}
	for range 2 {
		cn := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), expect: 3, joinWait: 3 * time.Second}
		join = append(join, cn.addr)
		tc.nodes = append(tc.nodes, cn)
	}
	t.Cleanup(func() {
		for _, cn := range tc.nodes {
			tc.stop(cn)
		}
	})
	for _, cn := range tc.nodes {
		cn.join = join
		tc.start(cn)
	}
	for _, cn := range tc.nodes {
		select {
		case err := <-cn.done:
			cn.done <- err // for stop
			if err == nil || !strings.Contains(err.Error(), "could not join") {
				t.Fatalf("node at %s: Run returned %v, want a failure to join", cn.addr, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("node at %s still running: it created or joined a cluster", cn.addr)
		}
		if st, _ := cn.n.ClusterStatus(); st.Ready {
			t.Fatalf("node at %s is a member of cluster %s", cn.addr, st.ClusterID)
		}
	}
}

// holdsAcked checks that got (a replica's records) holds every acknowledged
// record at its offset, and nothing else but copies of attempts whose
// outcome was unknown.
func holdsAcked(got, acked []log.Record, unknown map[string]bool) error {
	at := map[int64]string{}
	for _, r := range got {
		at[r.Offset] = string(r.Value)
	}
	want := map[int64]bool{}
	for _, r := range acked {
		want[r.Offset] = true
		if v, ok := at[r.Offset]; !ok || v != string(r.Value) {
			return fmt.Errorf("acknowledged %q at offset %d: the replica has %q there (%d records)", r.Value, r.Offset, v, len(got))
		}
	}
	for _, r := range got {
		if !want[r.Offset] && !unknown[string(r.Value)] {
			return fmt.Errorf("offset %d holds %q, neither acknowledged nor an attempt of unknown outcome", r.Offset, r.Value)
		}
	}
	return nil
}
