package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
)

// repairCluster is a 3-node cluster with small segments and one topic of
// one partition, and the values acknowledged so far, in offset order.
type repairCluster struct {
	*testCluster
	repaired atomic.Int32 // PartitionRepaired calls for orders/0, any node
	acked    []string
	// retried: values whose publish failed once before it was
	// acknowledged; the failed attempt's outcome may be unknown, so the
	// log may hold a second copy of them (and of no other value).
	retried map[string]bool
}

func newRepairCluster(t *testing.T) *repairCluster {
	rc := &repairCluster{retried: map[string]bool{}}
	tc := newTestCluster(t, 3, func(_ int, cn *clusterNode) {
		cn.segBytes = 4 << 10
		cn.hooks.PartitionRepaired = func(topic string, p int32) {
			if topic == "orders" && p == 0 {
				rc.repaired.Add(1)
			}
		}
	})
	rc.testCluster = tc
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return rc
}

// publish publishes v through node via (retrying until it is acknowledged).
func (rc *repairCluster) publish(t *testing.T, via *clusterNode, v string) {
	t.Helper()
	awaitCond(t, 30*time.Second, "publish "+v[:min(len(v), 16)], func() error {
		_, err := produce(via.n, "orders", 0, v)
		if err != nil {
			rc.retried[v] = true
		}
		return err
	})
	rc.acked = append(rc.acked, v)
}

// damage flips 64 bytes in the middle of the first segment of cn's copy.
func (rc *repairCluster) damage(t *testing.T, cn *clusterNode) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(cn.dir, "log", "orders-0", "*.log"))
	if len(segs) < 2 {
		t.Fatalf("want several segments, found %v", segs)
	}
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	if _, err := f.ReadAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if _, err := f.WriteAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// awaitRepaired waits until every node holds every acknowledged value at
// its offset, none is quarantined and the cluster reports nothing under-
// replicated or moving.
func (rc *repairCluster) awaitRepaired(t *testing.T) {
	t.Helper()
	awaitCond(t, 60*time.Second, "the damaged copy rebuilt from the others", func() error {
		var first []string
		for i, cn := range rc.nodes {
			if q := cn.n.Quarantined(); len(q) > 0 {
				return fmt.Errorf("node %d: still quarantined: %+v", i+1, q)
			}
			recs, err := readAll(cn.n, "orders", 0)
			if err != nil {
				return err
			}
			var vals []string
			for _, r := range recs {
				vals = append(vals, string(r.Value))
			}
			if err := rc.checkLog(vals); err != nil {
				return fmt.Errorf("node %d: %w", i+1, err)
			}
			if first == nil {
				first = vals
			} else if !slices.Equal(vals, first) {
				return fmt.Errorf("node %d holds %d records, node 1 %d, or others", i+1, len(vals), len(first))
			}
			if st, ok := cn.n.ClusterStatus(); !ok || st.UnderReplicated != 0 || st.PartitionsMoving != 0 {
				return fmt.Errorf("node %d: cluster status: %+v (ready %v)", i+1, st, ok)
			}
		}
		if rc.repaired.Load() != 1 {
			return fmt.Errorf("PartitionRepaired called %d times, want once (the quarantine gauge goes back)", rc.repaired.Load())
		}
		return nil
	})
}

// checkLog: a replica's values hold every acknowledged value, first
// copies in the order they were acknowledged, and a second copy only of a
// value whose publish failed once (its outcome unknown).
func (rc *repairCluster) checkLog(vals []string) error {
	seen := map[string]bool{}
	var order []string
	for o, v := range vals {
		switch {
		case !seen[v]:
			seen[v] = true
			order = append(order, v)
		case !rc.retried[v]:
			return fmt.Errorf("offset %d holds a second copy of %.20q, whose publish never failed", o, v)
		}
	}
	if !slices.Equal(order, rc.acked) {
		return fmt.Errorf("%d distinct values %.40q..., want the %d acknowledged in order", len(order), order, len(rc.acked))
	}
	return nil
}

var pad = strings.Repeat("p", 200)

// TestClusterDamagedReplicaRepairsItself: a follower's copy of a partition
// found damaged (bytes flipped in a segment while its node was stopped) is
// rebuilt from its peers with no operator: the replica is quarantined and
// never votes, the controller takes it out of the group and gives the
// partition a new copy (the least loaded node: here the same one, a new
// replica of the group that copies the leader's log), and every
// acknowledged record ends on all three nodes again, those after the
// damage included. Publishing goes on throughout. (Before: the replica
// stayed quarantined, holding only the records before the damage, until
// an operator ran spoold repair.)
func TestClusterDamagedReplicaRepairsItself(t *testing.T) {
	rc := newRepairCluster(t)
	via := rc.nodes[0]
	for i := range 100 {
		rc.publish(t, via, fmt.Sprintf("before-%03d-%s", i, pad))
	}
	leader := rc.leaderOf("orders", 0)
	var victim *clusterNode
	for _, cn := range rc.nodes {
		if cn != leader && cn != via {
			victim = cn
		}
	}
	if victim == nil {
		victim = rc.nodes[1] // via leads: any other
	}
	awaitCond(t, 20*time.Second, "the victim holds every record", func() error {
		if _, end, err := victim.n.Offsets("orders", 0); err != nil || end != int64(len(rc.acked)) {
			return fmt.Errorf("end %d (%v)", end, err)
		}
		return nil
	})
	rc.stop(victim)
	rc.damage(t, victim)
	for i := range 20 {
		rc.publish(t, via, fmt.Sprintf("while-%03d", i))
	}
	rc.start(victim)
	for i := range 20 {
		rc.publish(t, via, fmt.Sprintf("after-%03d", i))
	}
	rc.awaitRepaired(t)
}

// TestClusterDamagedLeaderRepairsItself: the leader's copy is damaged
// while it runs (bytes flipped in a closed segment); a follower that comes
// back needing those entries makes the leader read them. The leader stops
// its replica (it never leads or votes again under that id), the others
// elect a leader within an election timeout, and the damaged copy is
// rebuilt from them: every acknowledged record ends on all three nodes.
func TestClusterDamagedLeaderRepairsItself(t *testing.T) {
	rc := newRepairCluster(t)
	rc.publish(t, rc.nodes[0], "first")
	behind := rc.nodes[1]
	if rc.leaderOf("orders", 0) == behind {
		behind = rc.nodes[2]
	}
	rc.stop(behind) // it will need every entry from the leader
	for i := range 100 {
		rc.publish(t, rc.nodes[0], fmt.Sprintf("before-%03d-%s", i, pad))
	}
	leader := rc.leaderOf("orders", 0)
	if leader == nil || leader == behind {
		t.Fatalf("no leader among the running nodes")
	}
	via := rc.nodes[0]
	for _, cn := range rc.nodes {
		if cn != leader && cn != behind {
			via = cn
		}
	}
	rc.damage(t, leader)
	rc.start(behind)
	for i := range 20 {
		rc.publish(t, via, fmt.Sprintf("after-%03d", i))
	}
	rc.awaitRepaired(t)
}
