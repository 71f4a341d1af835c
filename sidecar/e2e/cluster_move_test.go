package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// seriesCount counts the series of spoold's /metrics whose line starts
// with prefix.
func seriesCount(n *node, prefix string) int {
	resp, err := http.Get("http://" + n.admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	count := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			count++
		}
	}
	return count
}

// seriesPresent reports whether spoold's /metrics exposes the series
// (name with labels exactly as exposed), whatever its value.
func seriesPresent(t *testing.T, n *node, series string) bool {
	t.Helper()
	resp, err := http.Get("http://" + n.admin + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), series+" ") {
			return true
		}
	}
	return false
}

// Four nodes, a topic of 4 partitions with 3 replicas each, producers
// through two sidecars. Node 1 (the bootstrap node, leading the
// controller) is killed for good: after cluster.dead_node_timeout it is
// marked down and its replicas are re-created on the other nodes, which
// copy the partitions' logs. Then node 2 is killed too. Every partition
// keeps a majority (its copies on nodes 2, 3 and 4, two of them alive), so
// publishing goes on through nodes 3 and 4 — without re-replication the
// partitions that had copies on both 1 and 2 would stop. A consumer then
// receives every acknowledged message at the offset its publish returned.
func TestClusterNodeLostForGood(t *testing.T) {
	start := time.Now()
	sc := startCluster(t, 4, "  produce_timeout: 3s\n  dead_node_timeout: 10s\n")
	awaitPlaced(t, sc.nodes[2])
	l := startLoad(t, []*node{sc.nodes[2], sc.nodes[3]})
	// The topics were placed on the first three nodes; replicas spread to
	// the fourth until the nodes' counts are at most one apart.
	eventually(t, 60*time.Second, "replicas spread over the four nodes", func() bool {
		var counts []int
		for _, n := range sc.nodes {
			counts = append(counts, seriesCount(n, `spool_partition_leader{`))
		}
		return slices.Min(counts) > 0 && slices.Max(counts)-slices.Min(counts) <= 1 &&
			metricValue(t, sc.nodes[3], "spool_cluster_partitions_moving") == 0
	})
	l.awaitMore(2, 20, 20*time.Second, "20 acknowledged publishes per producer before the first kill")

	sc.nodes[0].kill() // SIGKILL, never restarted
	killedAt := time.Now()
	l.awaitMore(2, 20, 30*time.Second, "20 more acknowledged publishes per producer with node 1 down")
	// Node 4 holds a copy of every partition once node 1's copies moved
	// (the series exist only for partitions whose replica a node holds).
	eventually(t, 90*time.Second, "node 1 marked down and every partition held by nodes 2, 3 and 4", func() bool {
		if metricValue(t, sc.nodes[3], "spool_cluster_nodes_down") != 1 {
			return false
		}
		for p := range 4 {
			for _, n := range sc.nodes[1:] {
				if !seriesPresent(t, n, fmt.Sprintf(`spool_partition_leader{partition="%d",topic="orders"}`, p)) {
					return false
				}
			}
		}
		return metricValue(t, sc.nodes[3], "spool_cluster_partitions_moving") == 0
	})
	t.Logf("node 1's replicas re-created %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	// Operators see it through the admin API (spool cluster status).
	eventually(t, 10*time.Second, "the admin API reporting node 1 down and nothing moving", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := sc.nodes[3].adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		if err != nil || st.GetPartitionsMoving() != 0 || st.GetPartitionsUnderReplicated() != 0 {
			return false
		}
		for _, nd := range st.GetNodes() {
			if nd.GetDown() != (nd.GetId() == "1") {
				return false
			}
		}
		return len(st.GetNodes()) == 4
	})
	l.awaitMore(2, 20, 30*time.Second, "20 more acknowledged publishes per producer after the moves")

	sc.nodes[1].kill() // a second loss
	l.awaitMore(2, 20, 30*time.Second, "20 more acknowledged publishes per producer with nodes 1 and 2 down")
	acks, failures := l.finish()
	t.Logf("%d acknowledged; longest stall of a producer %v; sample of failed attempts: %q",
		len(acks), longestGap(acks).Round(time.Millisecond), failureSample(failures))

	got := consumeAll(t, sc.nodes[3], acks)
	verifyNothingLost(t, acks, failures, got)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}
