package testredis

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// clusterTimeout bounds cluster creation (redis-cli) and the wait for
// cluster_state:ok on every node.
const clusterTimeout = 20 * time.Second

// Cluster is a Redis Cluster of masters without replicas, each a Server
// owned by the test.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts masters (at least 3, redis-cli's minimum) cluster-
// enabled redis-servers, joins them with `redis-cli --cluster create
// --cluster-replicas 0`, which spreads the 16384 slots over them, and waits
// until every node reports cluster_state:ok. The servers are killed in
// t.Cleanup.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return StartClusterWith(t, masters, Options{})
}

// StartClusterWith is StartCluster with every node configured by opts
// (ACL users, extra arguments; TLS is not supported: redis-cli would need
// the certificates).
func StartClusterWith(t testing.TB, masters int, opts Options) *Cluster {
	t.Helper()
	if opts.TLS {
		t.Fatalf("testredis: StartClusterWith does not support TLS")
	}
	opts.cluster = true
	if masters < 3 {
		t.Fatalf("testredis: a Redis Cluster needs at least 3 masters, asked for %d", masters)
	}
	cli := mustBinary(t, "redis-cli")
	c := &Cluster{}
	for range masters {
		c.nodes = append(c.nodes, StartWith(t, opts))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testredis: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	deadline := time.Now().Add(clusterTimeout)
	for _, n := range c.nodes {
		for {
			info, err := n.Do("CLUSTER", "INFO")
			s, _ := info.(string)
			if err == nil && strings.Contains(s, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testredis: cluster node %s not ok within %v: %v %s\nredis-cli said:\n%s\nnode log:\n%s",
					n.Addr(), clusterTimeout, err, s, out, n.Log())
			}
			time.Sleep(20 * time.Millisecond) // sleep-ok: polling child processes' readiness
		}
	}
	return c
}

// Addrs are the nodes' addresses (a client's seed list).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Nodes are the cluster's servers, in Addrs order.
func (c *Cluster) Nodes() []*Server { return c.nodes }

// NodeFor is the node that serves key's slot (asked of the first node with
// CLUSTER KEYSLOT and CLUSTER SLOTS).
func (c *Cluster) NodeFor(key string) (*Server, error) {
	v, err := c.nodes[0].Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		return nil, err
	}
	slot, ok := v.(int64)
	if !ok {
		return nil, fmt.Errorf("CLUSTER KEYSLOT answered %T", v)
	}
	v, err = c.nodes[0].Do("CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	ranges, _ := v.([]any)
	for _, r := range ranges {
		rr, _ := r.([]any)
		if len(rr) < 3 {
			continue
		}
		lo, _ := rr[0].(int64)
		hi, _ := rr[1].(int64)
		master, _ := rr[2].([]any)
		if slot < lo || slot > hi || len(master) < 2 {
			continue
		}
		port, _ := master[1].(int64)
		for _, n := range c.nodes {
			if int64(n.port) == port {
				return n, nil
			}
		}
	}
	return nil, fmt.Errorf("no node serves slot %d of %q", slot, key)
}
