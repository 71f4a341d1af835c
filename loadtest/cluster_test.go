package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterScenariosLoad checks that the cluster scenarios parse, get
// their defaults and would run a cluster.
func TestClusterScenariosLoad(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "loadtest", "scenarios")
	for name, mode := range map[string]string{"publish-rf3": "publish", "publish-rf3-sync": "publish", "publish-rf3-sync-leader": "publish", "failover": "failover", "idle-partitions": "idle", "e2e-rf3": "e2e", "rebalance": "rebalance"} {
		sc, err := loadScenario(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Mode != mode || sc.Nodes != 3 || sc.ReplicationFactor != 3 || sc.Fsync != "always" {
			t.Errorf("%s: mode %s, nodes %d, rf %d, fsync %s; want %s, 3, 3, always", name, sc.Mode, sc.Nodes, sc.ReplicationFactor, sc.Fsync, mode)
		}
	}
	if sc, err := loadScenario(dir, "publish-rf3-sync-leader"); err != nil || sc.Acks != "leader" || sc.PipelineDepth != 1 {
		t.Errorf("publish-rf3-sync-leader: %v, acks %q, pipeline depth %d; want leader, 1", err, sc.Acks, sc.PipelineDepth)
	}
	sc, err := loadScenario(dir, "failover")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Rounds != 20 || !sc.Verify {
		t.Errorf("failover: rounds %d, verify %v; want 20 rounds, verified", sc.Rounds, sc.Verify)
	}
	// Issue 9: one app per sidecar in one group, 24 partitions; the rolling
	// restart with the ledger, all three sidecars.
	for _, name := range []string{"e2e-rf3", "rebalance"} {
		sc, err := loadScenario(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Consumers != 3 || sc.Partitions != 24 {
			t.Errorf("%s: consumers %d, partitions %d; want 3 (one per node), 24", name, sc.Consumers, sc.Partitions)
		}
	}
	if sc, err := loadScenario(dir, "rebalance"); err != nil || !sc.Redis || sc.Restarts != 3 || sc.RatePerS == 0 || sc.RestartGap != 3*time.Second {
		t.Errorf("rebalance: %v, redis %v, restarts %d, rate %d, gap %s; want the ledger, 3 restarts, a rate, 3s", err, sc.Redis, sc.Restarts, sc.RatePerS, sc.RestartGap)
	}
	if sc, err := loadScenario(dir, "publish"); err != nil || sc.Nodes != 1 || sc.ReplicationFactor != 0 {
		t.Errorf("publish: %v, nodes %d, rf %d: a scenario without nodes is one spoold", err, sc.Nodes, sc.ReplicationFactor)
	}
}

func TestClusterScenarioValidation(t *testing.T) {
	bad := map[string]string{
		"failover without a cluster":   "mode: failover\nmessages: 10\n",
		"idle with one node":           "mode: idle\nnodes: 1\nmessages: 10\n",
		"rf above nodes":               "mode: publish\nnodes: 3\nreplication_factor: 4\nmessages: 10\n",
		"rf without nodes":             "mode: publish\nreplication_factor: 3\nmessages: 10\n",
		"too many nodes":               "mode: publish\nnodes: 8\nmessages: 10\n",
		"rebalance with one node":      "mode: rebalance\nconsumers: 1\nrate_per_s: 10\nmessages: 10\n",
		"rebalance without a rate":     "mode: rebalance\nnodes: 3\nconsumers: 3\nmessages: 10\n",
		"rebalance, one app":           "mode: rebalance\nnodes: 3\nconsumers: 1\nrate_per_s: 10\nmessages: 10\n",
		"rebalance, too many restarts": "mode: rebalance\nnodes: 3\nconsumers: 3\nrate_per_s: 10\nrestarts: 4\nmessages: 10\n",
		"zero rounds after default":    "mode: failover\nnodes: 3\nrounds: -1\nmessages: 10\n",
		"unknown acks":                 "mode: publish\nnodes: 3\nacks: none\nmessages: 10\n",
	}
	dir := t.TempDir()
	for name, body := range bad {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadScenario(dir, path); err == nil {
			t.Errorf("%s: loaded, want an error", name)
		}
	}
}

// TestClusterConfig checks the generated config of cluster nodes: node 1
// bootstraps (no join), the others join it, and a node without a cluster
// address gets no cluster section.
func TestClusterConfig(t *testing.T) {
	sc := &Scenario{Mode: "publish", Messages: 1, Nodes: 3, ReplicationFactor: 3}
	if err := sc.validate(); err != nil {
		t.Fatal(err)
	}
	first := sidecarConfig(sc, node{index: 0, app: "127.0.0.1:1", admin: "127.0.0.1:2", cluster: "127.0.0.1:3", replication: 3}, "/d", "")
	if !strings.Contains(first, "cluster:\n  listen: \"127.0.0.1:3\"\n  replication_factor: 3\n  insecure_no_join_secret: true\n") || strings.Contains(first, "  join:") {
		t.Errorf("first node's config:\n%s\nwant a cluster section without a join secret and without join", first)
	}
	if !strings.Contains(first, "id: loadtest-1\n") || !strings.Contains(first, "fsync: always") {
		t.Errorf("first node's config:\n%s\nwant node id loadtest-1 and fsync always", first)
	}
	second := sidecarConfig(sc, node{index: 1, app: "a", admin: "b", cluster: "127.0.0.1:4", join: "127.0.0.1:3", replication: 3}, "/d", "")
	if !strings.Contains(second, "  join: [\"127.0.0.1:3\"]\n") || !strings.Contains(second, "id: loadtest-2\n") {
		t.Errorf("second node's config:\n%s\nwant join of node 1", second)
	}
	single := sidecarConfig(&Scenario{Ordering: "none", Fsync: "always", Partitions: 4}, node{app: "a", admin: "b"}, "/d", "")
	if strings.Contains(single, "cluster") || !strings.Contains(single, "subscriptions:") {
		t.Errorf("single node's config:\n%s\nwant no cluster section and a subscription", single)
	}
	noSub := sidecarConfig(&Scenario{NoSubscription: true, Fsync: "always", Partitions: 4}, node{app: "a", admin: "b"}, "/d", "")
	if strings.Contains(noSub, "subscriptions:") {
		t.Errorf("no_subscription config:\n%s\nwant no subscription", noSub)
	}
}

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ q, want float64 }{{0.5, 3}, {0.99, 5}, {1, 5}, {0.2, 1}, {0, 1}} {
		if got := quantile(xs, c.q); got != c.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", xs, c.q, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Error("quantile sorted its argument in place")
	}
	if quantile(nil, 0.5) != 0 {
		t.Error("quantile of nothing must be 0")
	}
}
