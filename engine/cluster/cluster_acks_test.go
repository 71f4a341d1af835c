package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/raft"
)

// newAcksCluster is newTestCluster with the default tick (100 ms): a
// leader cut off from its followers keeps leading for at least an election
// timeout (1 s) before CheckQuorum makes it step down, the window the
// acks tests work in.
func newAcksCluster(t *testing.T) *testCluster {
	tc := &testCluster{t: t}
	for i := range 3 {
		cn := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t)}
		if i > 0 {
			cn.join = []string{tc.nodes[0].addr}
		}
		tc.nodes = append(tc.nodes, cn)
		tc.startTick(cn, raft.TickInterval)
	}
	t.Cleanup(func() {
		for _, cn := range tc.nodes {
			tc.stop(cn)
		}
	})
	return tc
}

// startTick is start with another tick interval.
func (tc *testCluster) startTick(cn *clusterNode, tick time.Duration) {
	t := tc.t
	t.Helper()
	n, err := Open(Config{
		DataDir: cn.dir,
		Log:     log.Options{MaintenanceInterval: time.Hour},
		Logger:  quietLogger(),
		Cluster: ClusterConfig{Listen: cn.addr, Join: cn.join, TickInterval: tick, ProduceTimeout: 5 * time.Second, JoinTimeout: 20 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cn.n, cn.cancel, cn.done = n, cancel, make(chan error, 1)
	go func() { cn.done <- n.Run(ctx) }()
}

type produceResult struct {
	base int64
	err  error
}

// produceAsync publishes one record with opts; the outcome arrives on the
// channel.
func produceAsync(n *Node, topic string, p int32, value string, opts engine.ProduceOptions) <-chan produceResult {
	ch := make(chan produceResult, 1)
	n.ProduceWith(topic, p, []log.Record{{ID: []byte(value), Value: []byte(value)}}, opts, func(base int64, err error) { ch <- produceResult{base, err} })
	return ch
}

// leaderOf is the node leading partition p of topic, or nil.
func (tc *testCluster) leaderOf(topic string, p int32) *clusterNode {
	for _, cn := range tc.nodes {
		if cn.n == nil {
			continue
		}
		part, err := cn.n.partition(topic, p)
		if err != nil || part.X.raftGroup == 0 {
			continue
		}
		if st, ok := cn.n.asMember().host.Status(part.X.raftGroup); ok && st.IsLeader {
			return cn
		}
	}
	return nil
}

var leaderAcks = engine.ProduceOptions{Acks: engine.AcksLeader}

// An acks=leader publish — on the leader, forwarded from a follower, and
// a forwarded producer batch sent again — completes with the offset its
// records then hold, committed, on every replica; a resend of the batch
// (either acks) gets the first copy's offset and stores nothing twice.
func TestClusterAcksLeader(t *testing.T) {
	tc := newAcksCluster(t)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "first"); return err })
	var leader *clusterNode
	awaitCond(t, 30*time.Second, "the topic placed on every node, and a leader", func() error {
		for _, cn := range tc.nodes {
			if part, err := cn.n.partition("orders", 0); err != nil || part.X.raftGroup == 0 {
				return fmt.Errorf("not on node at %s yet", cn.addr)
			}
		}
		if leader = tc.leaderOf("orders", 0); leader == nil {
			return errors.New("no leader")
		}
		return nil
	})
	var follower *clusterNode
	for _, cn := range tc.nodes {
		if cn != leader {
			follower = cn
		}
	}
	acked := map[string]int64{}
	for _, c := range []struct {
		cn *clusterNode
		v  string
	}{{leader, "on-leader"}, {follower, "forwarded"}} {
		r := <-produceAsync(c.cn.n, "orders", 0, c.v, leaderAcks)
		if r.err != nil {
			t.Fatalf("acks=leader publish %s: %v", c.v, r.err)
		}
		acked[c.v] = r.base
	}
	// A producer batch (the forwarder's), sent twice with acks=leader and
	// once with acks=all.
	part, _ := follower.n.partition("orders", 0)
	data := log.EncodeRecords(nil, log.BatchHeader{ProducerID: 77, BaseSequence: 3}, []log.Record{{Value: []byte("batch")}}, time.Now().UnixMilli())
	send := func(cn *clusterNode, acks engine.Acks) int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		base, err := cn.n.produceAtLeader(ctx, part.X.raftGroup, "orders", 0, part.X.replicas(), data, acks)
		if err != nil {
			t.Fatalf("producer batch, acks=%v: %v", acks, err)
		}
		return base
	}
	acked["batch"] = send(follower, engine.AcksLeader)
	for _, acks := range []engine.Acks{engine.AcksLeader, engine.AcksAll} {
		if again := send(tc.nodes[0], acks); again != acked["batch"] {
			t.Fatalf("resent with acks=%v: offset %d, the first copy %d", acks, again, acked["batch"])
		}
	}
	if acked["on-leader"] != 1 || acked["forwarded"] != 2 || acked["batch"] != 3 {
		t.Fatalf("offsets %v, want on-leader 1, forwarded 2, batch 3", acked)
	}
	awaitCond(t, 10*time.Second, "every acks=leader record committed at its offset on every replica", func() error {
		for _, cn := range tc.nodes {
			recs, err := readAll(cn.n, "orders", 0)
			if err != nil {
				return err
			}
			if len(recs) != 4 {
				return fmt.Errorf("node at %s: %d records committed, want 4", cn.addr, len(recs))
			}
			for v, off := range acked {
				if got := string(recs[off].Value); got != v {
					return fmt.Errorf("node at %s offset %d: %q, acknowledged %q", cn.addr, off, got, v)
				}
			}
		}
		return nil
	})
}

// With both followers of the partition stopped, inside the leader's
// CheckQuorum window (an election timeout: it still leads), an acks=leader
// publish completes — its record on the leader's disk, not committed, not
// readable — while an acks=all publish made before it has not completed,
// and does not succeed. A producer batch resent with acks=leader while its
// first copy is durable but uncommitted gets the first copy's offset.
func TestClusterAcksLeaderWithoutQuorum(t *testing.T) {
	_, leader, part := quorumlessLeader(t)
	if st, _ := leader.n.asMember().host.Status(part.X.raftGroup); !st.IsLeader {
		t.Fatal("the leader stepped down right after its followers stopped, within less than an election timeout")
	}
	all := produceAsync(leader.n, "orders", 0, "all", engine.ProduceOptions{})
	fast := <-produceAsync(leader.n, "orders", 0, "fast", leaderAcks)
	select {
	case r := <-all:
		t.Fatalf("acks=all completed without a quorum: %+v", r)
	default:
	}
	if fast.err != nil || fast.base != 2 {
		t.Fatalf("acks=leader without a quorum: %+v, want offset 2 (after the acks=all record)", fast)
	}
	if _, end, _ := leader.n.Offsets("orders", 0); end != 1 {
		t.Fatalf("committed end %d: the uncommitted records must stay invisible (want 1)", end)
	}
	// A producer batch: first copy durable and uncommitted, then resent.
	data := log.EncodeRecords(nil, log.BatchHeader{ProducerID: 78, BaseSequence: 0}, []log.Record{{Value: []byte("batch")}}, time.Now().UnixMilli())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := leader.n.proposeOnce(ctx, part, 78, 0, data, engine.AcksLeader)
	if err != nil || first != 3 {
		t.Fatalf("producer batch, acks=leader: %d, %v; want offset 3", first, err)
	}
	again, err := leader.n.proposeOnce(ctx, part, 78, 0, data, engine.AcksLeader)
	if err != nil || again != first {
		t.Fatalf("resent while durable and uncommitted: %d, %v; want the first copy's %d", again, err, first)
	}
	if n := part.Log.LastIndex(); n == 0 {
		t.Fatal("empty log")
	}
	if st, _ := leader.n.asMember().host.Status(part.X.raftGroup); !st.IsLeader {
		t.Fatalf("the leader stepped down during the test: the window assumption failed: %+v", st)
	}
	r := <-all // after ProduceTimeout at most
	if r.err == nil {
		t.Fatalf("acks=all succeeded without a quorum at %d", r.base)
	}
	t.Logf("the acks=all publish without a quorum: %v", r.err)
}
