package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testredis"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// clusterMembers is the cluster as node n's admin API reports it: the
// member ids, and whether any partition is moving or under-replicated.
func clusterMembers(t *testing.T, n *node) (ids []string, leaving, settled bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := n.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
	if err != nil {
		return nil, false, false
	}
	for _, nd := range st.GetNodes() {
		ids = append(ids, nd.GetId())
		leaving = leaving || nd.GetLeaving() || nd.GetDown()
	}
	slices.Sort(ids)
	return ids, leaving, st.GetPartitionsMoving() == 0 && st.GetPartitionsUnderReplicated() == 0
}

// nodeID is the cluster node id of a running node.
func nodeID(t *testing.T, n *node) string {
	t.Helper()
	var id string
	eventually(t, 10*time.Second, "the node's cluster id", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := n.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		id = st.GetNodeId()
		return err == nil && id != ""
	})
	return id
}

// leave stops a node with cluster.leave_on_shutdown (SIGTERM), checks it
// said it left with every replica moved, and deletes its data dir, as an
// emptyDir goes with its pod.
func leave(t *testing.T, n *node) {
	t.Helper()
	stopped := time.Now()
	n.stopWithin(90 * time.Second)
	n.gone = true
	b, _ := os.ReadFile(n.logPath)
	if !strings.Contains(string(b), "left the cluster") {
		t.Fatalf("a node stopped with cluster.leave_on_shutdown did not report leaving the cluster; its log ends:\n%s", tail(string(b), 20))
	}
	if err := os.RemoveAll(n.dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("a node left in %v", time.Since(stopped).Round(time.Millisecond))
}

// Pods of a Deployment with an emptyDir data dir (docs/kubernetes.md):
// a rolling update replaces each node by a new node (a new id, an empty
// disk), one at a time, a new one first (maxSurge 1); then the Deployment
// scales 3 → 5 → 3 (one pod at a time). Every stopped node leaves the cluster on SIGTERM
// (cluster.leave_on_shutdown) after handing its replicas over. Producers
// publish throughout through a storage-off sidecar (an app pod that stays),
// whose app consumes throughout with the Redis ledger on. Nothing
// acknowledged is lost, each key keeps its order, nothing is completed
// twice, and the cluster ends with three members holding three replicas of
// every partition, none of the original nodes among them.
func TestClusterRollingReplacementUnderLoad(t *testing.T) {
	start := time.Now()
	r := testredis.Start(t)
	tail := fmt.Sprintf("redis:\n  addrs: [%q]\n", r.Addr()) + clusterTopics
	sc := startClusterWith(t, 3, "  produce_timeout: 3s\n  leave_on_shutdown: true\n  leave_timeout: 60s\n", tail)
	awaitPlaced(t, sc.nodes[0])
	client := startNode(t, fmt.Sprintf("cluster:\n%s  storage: off\n  join: [%q, %q, %q]\n", sc.creds.yaml, sc.nodes[0].peer, sc.nodes[1].peer, sc.nodes[2].peer)+tail)
	// The app next to the storage-off sidecar consumes throughout, with
	// the ledger on: its group's coordinator and positions live on the
	// nodes being replaced.
	ga := startGroupApps(t, []*node{client})
	l := startLoad(t, []*node{client, client})
	l.awaitMore(2, 30, 30*time.Second, "30 acknowledged publishes per producer before the update")

	var original []string
	for _, n := range sc.nodes {
		original = append(original, nodeID(t, n))
	}
	for i, old := range slices.Clone(sc.nodes) {
		nw := sc.addNode()
		// As a rolling update does: the old pod stops as soon as the new
		// one is ready, while balancing moves replicas onto it; the leave
		// redirects those moves.
		id := nodeID(t, nw)
		eventually(t, 60*time.Second, "the new node a member", func() bool {
			ids, _, _ := clusterMembers(t, nw)
			return slices.Contains(ids, id)
		})
		leave(t, old)
		l.awaitMore(2, 20, 30*time.Second, fmt.Sprintf("20 more acknowledged publishes per producer after node %d was replaced", i+1))
	}
	last := sc.nodes[len(sc.nodes)-1]
	eventually(t, 60*time.Second, "three members again, nothing moving or under-replicated", func() bool {
		ids, leaving, settled := clusterMembers(t, last)
		return len(ids) == 3 && !leaving && settled
	})
	ids, _, _ := clusterMembers(t, last)
	for _, id := range original {
		if slices.Contains(ids, id) {
			t.Fatalf("members %v after the update still include original node %s", ids, id)
		}
	}
	t.Logf("rolling update done in %v: members %v (were %v)", time.Since(start).Round(time.Millisecond), ids, original)

	// Scale out to five: replicas spread to the new nodes.
	sc.addNode()
	sc.addNode()
	live := func() []*node {
		var out []*node
		for _, n := range sc.nodes {
			if !n.gone {
				out = append(out, n)
			}
		}
		return out
	}
	eventually(t, 90*time.Second, "five members, each holding replicas, nothing moving", func() bool {
		ids, leaving, settled := clusterMembers(t, last)
		if len(ids) != 5 || leaving || !settled {
			return false
		}
		for _, n := range live() {
			if seriesCount(n, `spool_partition_leader{`) == 0 {
				return false
			}
		}
		return true
	})
	l.awaitMore(2, 20, 30*time.Second, "20 more acknowledged publishes per producer at five nodes")

	// Scale in to three: the two newest pods are stopped at once, as a
	// scale-in does; each hands its replicas over before it goes, and the
	// second leave redirects the moves the first one started.
	ns := live()
	a, b := ns[len(ns)-1], ns[len(ns)-2]
	scaleIn := time.Now()
	a.signal(syscall.SIGTERM)
	b.signal(syscall.SIGTERM)
	leave(t, a)
	leave(t, b)
	t.Logf("two nodes left at once in %v", time.Since(scaleIn).Round(time.Millisecond))
	eventually(t, 60*time.Second, "three members again, nothing moving or under-replicated", func() bool {
		ids, leaving, settled := clusterMembers(t, last)
		return len(ids) == 3 && !leaving && settled
	})
	l.awaitMore(2, 20, 30*time.Second, "20 more acknowledged publishes per producer after scaling in")

	acks, failures := l.finish()
	t.Logf("%d acknowledged; longest stall of a producer %v; sample of failed attempts: %q",
		len(acks), longestGap(acks).Round(time.Millisecond), failureSample(failures))
	eventually(t, 60*time.Second, "every acknowledged message completed by the app", func() bool { return ga.deliveredAll(acks) })
	var got []delivery
	completions := map[string]int{}
	for _, d := range ga.deliveries() {
		got = append(got, d.delivery)
		completions[d.id]++
	}
	verifyNothingLost(t, acks, failures, got)
	twice := 0
	for id, k := range completions {
		if k > 1 {
			if twice++; twice <= 10 {
				t.Errorf("COMPLETED TWICE: %s completed %d times by the app with the ledger on", id, k)
			}
		}
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// A node that left the cluster when it stopped (cluster.leave_on_shutdown)
// and is started again on the same data dir — its container restarted in
// the same pod, the emptyDir kept — finds its identity removed. It used to
// refuse to start for good; it now empties its data dir, exits saying so,
// and the next start joins the cluster as a new node.
func TestClusterLeftNodeRestartedJoinsAsNew(t *testing.T) {
	sc := startCluster(t, 4, "  produce_timeout: 3s\n  leave_on_shutdown: true\n")
	awaitPlaced(t, sc.nodes[0])
	n := sc.nodes[3]
	old := nodeID(t, n)
	n.stopWithin(90 * time.Second)
	eventually(t, 60*time.Second, "the node removed from the cluster", func() bool {
		ids, _, _ := clusterMembers(t, sc.nodes[0])
		return len(ids) == 3 && !slices.Contains(ids, old)
	})

	// Started again on the same data dir: it exits, having emptied it.
	n.cmd = exec.Command(bins.spoold, "--config", n.cfgPath)
	out, err := n.cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "was emptied, so spoold joins as a new node") {
		t.Fatalf("a left node started again: %v; output ends:\n%s", err, tail(string(out), 10))
	}
	if ents, err := os.ReadDir(n.dataDir); err != nil || len(ents) != 0 {
		t.Fatalf("data dir after the exit: %d entries, %v; want it empty", len(ents), err)
	}
	n.start()
	if id := nodeID(t, n); id == old {
		t.Fatalf("the restarted node is node %s again; want a new id", id)
	}
	eventually(t, 60*time.Second, "four members again, nothing moving", func() bool {
		ids, leaving, settled := clusterMembers(t, sc.nodes[0])
		return len(ids) == 4 && !leaving && settled
	})
}

// The pods of a Deployment with storage (docs/kubernetes.md): three spoold
// started at once with the same cluster settings — join a DNS name per pod
// (localhost:port, as a headless Service lists every pod, each pod's own
// among them), bootstrap_expect 3, leave_on_shutdown — form one cluster
// without any of them being told to create it; then a pod replaced by a
// new one (the new one first) leaves, and the cluster is three again.
func TestClusterDeploymentFormsAndReplaces(t *testing.T) {
	if ips, err := net.LookupHost("localhost"); err != nil || len(ips) != 1 || ips[0] != "127.0.0.1" {
		t.Skipf("localhost resolves to %v (%v) here, not to 127.0.0.1 alone, where the nodes listen", ips, err)
	}
	sc := &spoolCluster{t: t, creds: newPeerCreds(t), tail: clusterTopics}
	var peers []string
	for i := range 3 {
		dir := t.TempDir()
		n := &node{t: t, dataDir: filepath.Join(dir, "data"), cfgPath: filepath.Join(dir, "spool.yaml"), logPath: filepath.Join(dir, "spoold.log")}
		addrs := freeAddrs(t, 3)
		n.app, n.admin, n.peer = addrs[0], addrs[1], addrs[2]
		_, port, _ := net.SplitHostPort(n.peer)
		peers = append(peers, fmt.Sprintf("%q", net.JoinHostPort("localhost", port)))
		sc.nodes = append(sc.nodes, n)
		name := fmt.Sprintf("n%d", i+1)
		t.Cleanup(func() {
			n.kill()
			if t.Failed() {
				b, _ := os.ReadFile(n.logPath)
				t.Logf("spoold %s log:\n%s", name, tail(string(b), 40))
			}
		})
	}
	sc.extra = fmt.Sprintf("  join: [%s]\n  bootstrap_expect: 3\n  produce_timeout: 3s\n  leave_on_shutdown: true\n", strings.Join(peers, ", "))
	for i, n := range sc.nodes {
		cfg := fmt.Sprintf("node:\n  id: n%d\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n  drain_timeout: 5s\ncluster:\n  listen: %q\n%s%s",
			i+1, n.dataDir, n.app, n.admin, n.peer, sc.creds.yaml, sc.extra) + sc.tail
		if err := os.WriteFile(n.cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		n.launch()
	}
	for _, n := range sc.nodes {
		n.awaitStarted(60 * time.Second)
	}
	eventually(t, 30*time.Second, "one cluster of the three", func() bool {
		ids, leaving, _ := clusterMembers(t, sc.nodes[2])
		return len(ids) == 3 && !leaving
	})
	awaitPlaced(t, sc.nodes[0])
	l := startLoad(t, []*node{sc.nodes[1], sc.nodes[2]})
	l.awaitMore(2, 20, 30*time.Second, "20 acknowledged publishes per producer")

	// A rolling update: a new pod (joining through the live pods, as the
	// Service lists them by then), then the old one leaves.
	sc.extra = "  produce_timeout: 3s\n  leave_on_shutdown: true\n"
	nw := sc.addNode()
	eventually(t, 60*time.Second, "four members, nothing moving", func() bool {
		ids, _, settled := clusterMembers(t, nw)
		return len(ids) == 4 && settled
	})
	leave(t, sc.nodes[0])
	eventually(t, 60*time.Second, "three members again, nothing moving or under-replicated", func() bool {
		ids, leaving, settled := clusterMembers(t, nw)
		return len(ids) == 3 && !leaving && settled
	})
	l.awaitMore(2, 20, 30*time.Second, "20 more acknowledged publishes per producer after the replacement")
	acks, failures := l.finish()
	got := consumeAll(t, nw, acks)
	verifyNothingLost(t, acks, failures, got)
}
