package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
)

// release010 is the range of a 0.1.0 node, which advertises none.
var release010 = meta.Unadvertised

// statusOf is node n's cluster status once it is ready.
func statusOf(n *Node) (engine.ClusterStatus, error) {
	st, ok := n.ClusterStatus()
	if !ok || !st.Ready {
		return st, errors.New("not ready")
	}
	return st, nil
}

// awaitVersions waits until node n reports the cluster version and the
// version available to finalize.
func awaitVersions(t *testing.T, n *Node, version, available uint32) engine.ClusterStatus {
	t.Helper()
	var st engine.ClusterStatus
	awaitCond(t, 20*time.Second, fmt.Sprintf("cluster version %d, %d available", version, available), func() (err error) {
		if st, err = statusOf(n); err != nil {
			n.mu.Lock()
			defer n.mu.Unlock()
			return fmt.Errorf("%w (%v)", err, n.readyErr)
		}
		if st.ClusterVersion != version || st.ClusterVersionAvailable != available {
			return fmt.Errorf("cluster version %d, %d available", st.ClusterVersion, st.ClusterVersionAvailable)
		}
		return nil
	})
	return st
}

// A cluster with a node of the previous release stays at cluster version 1
// and refuses to finalize, naming the node; once that node runs this
// release, an operator's finalization raises every node to version 2.
// Then a node of the previous release can neither join nor start again in
// it: both refusals name the cluster's version and the node's range.
func TestClusterVersionFinalizeByHand(t *testing.T) {
	tc := newTestCluster(t, 3, func(i int, cn *clusterNode) {
		cn.finalize = -1 // by hand only
		cn.logs = &logLines{}
		if i == 2 {
			cn.versions = release010
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for i, cn := range tc.nodes {
				cn.logs.mu.Lock()
				for _, l := range cn.logs.lines {
					t.Logf("node[%d]: %s", i, l)
				}
				cn.logs.mu.Unlock()
			}
		}
	})
	n1 := tc.nodes[0].n
	for _, cn := range tc.nodes {
		awaitVersions(t, cn.n, 1, 1)
	}
	st := awaitVersions(t, n1, 1, 1)
	old := tc.nodes[2].n.id.NodeID // the 0.1.0 node's id
	member := func(id uint64) engine.ClusterMember {
		for _, m := range st.Members {
			if m.ID == id {
				return m
			}
		}
		return engine.ClusterMember{}
	}
	awaitCond(t, 20*time.Second, "the 0.1.0 node's advertised range", func() error {
		st, _ = statusOf(n1)
		for _, m := range st.Members {
			if !m.Connected {
				return fmt.Errorf("node %d not connected", m.ID)
			}
		}
		if m := member(old); m.ClusterVersionMax != 1 || m.ClusterVersionMin != 1 {
			return fmt.Errorf("node %d speaks %d..%d", old, m.ClusterVersionMin, m.ClusterVersionMax)
		}
		return nil
	})
	if m := member(n1.id.NodeID); m.ClusterVersionMin != meta.MinClusterVersion || m.ClusterVersionMax != meta.MaxClusterVersion || m.Release == "" {
		t.Fatalf("node 1 reports itself as %+v", m)
	}
	_, err := n1.FinalizeClusterVersion(context.Background())
	if !errors.Is(err, engine.ErrClusterVersion) || !strings.Contains(err.Error(), fmt.Sprintf("node %d speaks cluster versions 1..1 only", old)) {
		t.Fatalf("finalizing with a 0.1.0 node: %v", err)
	}
	t.Logf("an operator sees: %v", err)

	// The 0.1.0 node is upgraded (restarted with this release's range).
	tc.stop(tc.nodes[2])
	tc.nodes[2].versions = meta.VersionRange{}
	tc.start(tc.nodes[2])
	for _, cn := range tc.nodes {
		awaitVersions(t, cn.n, 1, 2)
	}
	ch, err := tc.nodes[1].n.FinalizeClusterVersion(context.Background())
	if err != nil || ch != (engine.ClusterVersionChange{Previous: 1, Version: 2}) {
		t.Fatalf("finalize: %+v, %v", ch, err)
	}
	for _, cn := range tc.nodes {
		awaitVersions(t, cn.n, 2, 2)
	}
	if _, err := n1.FinalizeClusterVersion(context.Background()); !errors.Is(err, engine.ErrClusterVersion) || !strings.Contains(err.Error(), "nothing to finalize") {
		t.Fatalf("finalizing again: %v", err)
	}

	// A node of the previous release cannot join any more...
	late := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: []string{tc.nodes[0].addr}, versions: release010, joinWait: 5 * time.Second}
	tc.start(late)
	err = <-late.done
	_ = late.n.Close()
	late.n = nil
	for _, want := range []string{"refused this node", "cluster version 2", "cluster versions 1..1", "too old"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("a 0.1.0 node joining a finalized cluster: %v; want it to say %q", err, want)
		}
	}
	t.Logf("a 0.1.0 node joining is told: %v", err)

	// ...nor start again: the upgraded node rolled back.
	tc.stop(tc.nodes[2])
	tc.nodes[2].versions = release010
	tc.start(tc.nodes[2])
	err = <-tc.nodes[2].done
	_ = tc.nodes[2].n.Close()
	tc.nodes[2].n = nil
	if !errors.Is(err, engine.ErrClusterVersion) || !strings.Contains(err.Error(), "cluster version 2") || !strings.Contains(err.Error(), "1..1") {
		t.Fatalf("a node rolled back after finalizing: %v", err)
	}
	t.Logf("a node rolled back after finalizing stops with: %v", err)
}

// With AutoFinalizeAfter, the controller's leader finalizes by itself once
// every node has spoken the higher version for that long; a node of a
// release too new for the cluster's version is refused when it joins.
func TestClusterVersionFinalizesByItself(t *testing.T) {
	tc := newTestCluster(t, 3, func(i int, cn *clusterNode) {
		cn.finalize = 300 * time.Millisecond
		if i == 0 {
			cn.versions = release010 // the cluster is born at version 1
		}
	})
	for _, cn := range tc.nodes {
		awaitVersions(t, cn.n, 1, 1)
	}
	// Its founder is upgraded: every node speaks 2, and the cluster
	// finalizes by itself after AutoFinalizeAfter.
	tc.stop(tc.nodes[0])
	tc.nodes[0].versions = meta.VersionRange{}
	tc.start(tc.nodes[0])
	for _, cn := range tc.nodes {
		st := awaitVersions(t, cn.n, 2, 2)
		for _, m := range st.Members {
			if m.ClusterVersionMax != meta.MaxClusterVersion {
				t.Fatalf("node %d is reported speaking %d..%d", m.ID, m.ClusterVersionMin, m.ClusterVersionMax)
			}
		}
	}
	future := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: []string{tc.nodes[1].addr}, versions: meta.VersionRange{Min: 3, Max: 4}, joinWait: 5 * time.Second}
	tc.start(future)
	err := <-future.done
	_ = future.n.Close()
	future.n = nil
	if err == nil || !strings.Contains(err.Error(), "cluster versions 3..4") || !strings.Contains(err.Error(), "too new") {
		t.Fatalf("a node too new for the cluster joining: %v", err)
	}
}

// Quiescence is a feature of cluster version 2 (meta.Quiesce): a node of
// 0.1.0 neither knows the quiesce heartbeat nor stops ticking, so a leader
// of this release that quiesced a group with such a follower would leave
// it campaigning. Until the cluster is finalized no group quiesces; once
// it is, idle groups do.
func TestClusterQuiescesOnlyOnceFinalized(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, cn *clusterNode) { cn.finalize = -1 })
	for _, cn := range tc.nodes {
		awaitVersions(t, cn.n, 1, 2)
	}
	// Idle long enough for every group to quiesce (it does at its first
	// idle tick: docs/replication.md): five of the longest election
	// timeouts of the test clusters' 20 ms ticks. The cluster stays at
	// version 1.
	idle := 5 * 20 * 20 * time.Millisecond
	deadline := time.Now().Add(idle)
	for time.Now().Before(deadline) {
		for i, cn := range tc.nodes {
			if st, err := statusOf(cn.n); err == nil && st.GroupsQuiesced > 0 {
				t.Fatalf("node %d quiesced %d groups at cluster version %d", i+1, st.GroupsQuiesced, st.ClusterVersion)
			}
		}
		time.Sleep(idle / 20) // sleep-ok: sampling a state that must not change
	}
	if _, err := tc.nodes[0].n.FinalizeClusterVersion(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, cn := range tc.nodes {
		awaitCond(t, 20*time.Second, fmt.Sprintf("node %d quiesces its idle groups", i+1), func() error {
			st, err := statusOf(cn.n)
			if err == nil && st.GroupsQuiesced == 0 {
				err = fmt.Errorf("no group quiesced at cluster version %d", st.ClusterVersion)
			}
			return err
		})
	}
}

// A new cluster starts at the highest cluster version its founding node's
// release speaks (finalization by itself, the default): nothing older is
// there to wait for, so its gated behaviour is on from the start.
func TestClusterBornAtItsReleasesVersion(t *testing.T) {
	tc := newTestCluster(t, 3)
	for _, cn := range tc.nodes {
		awaitVersions(t, cn.n, meta.MaxClusterVersion, meta.MaxClusterVersion)
	}
}
