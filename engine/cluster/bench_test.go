package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/embedded"
)

// BenchmarkClusterProduceLatency: one 1 KiB record at a time to a partition
// of three in-process nodes (real gRPC on loopback, real disks, fsync
// always), acks=all and acks=leader, published on the partition's leader
// or on a follower (forwarded to the leader); ns/op is the latency of one
// publish. single is one node without a cluster, for comparison: what the
// cluster adds is the difference.
//
//	go test -run '^$' -bench ClusterProduceLatency ./engine/cluster/
func BenchmarkClusterProduceLatency(b *testing.B) {
	value := make([]byte, 1024)
	run := func(b *testing.B, n engine.Backend, acks engine.Acks) {
		recs := []engine.Record{{Value: value}}
		res := make(chan error, 1)
		b.ResetTimer()
		for range b.N {
			n.ProduceWith("t", 0, recs, engine.ProduceOptions{Acks: acks}, func(_ int64, err error) { res <- err })
			if err := <-res; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("single", func(b *testing.B) {
		n, err := embedded.Open(embedded.Config{DataDir: b.TempDir(), Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		defer func() { cancel(); <-done; _ = n.Close() }()
		if err := n.EnsureTopic(engine.TopicSpec{Name: "t", Partitions: 1}); err != nil {
			b.Fatal(err)
		}
		run(b, n, engine.AcksAll)
	})
	tc := newTestCluster(b, 3)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "t", Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	var leader, follower *Node
	deadline := time.Now().Add(30 * time.Second)
	for leader == nil || follower == nil {
		if time.Now().After(deadline) {
			b.Fatal("no leader")
		}
		if _, err := produce(tc.nodes[0].n, "t", 0, "first"); err != nil {
			time.Sleep(10 * time.Millisecond) // sleep-ok: benchmark setup waits for the election
			continue
		}
		ld := tc.leaderOf("t", 0)
		if ld == nil {
			continue
		}
		leader = ld.n
		for _, cn := range tc.nodes {
			if cn.n != leader {
				follower = cn.n
			}
		}
	}
	for _, c := range []struct {
		name string
		via  *Node
		acks engine.Acks
	}{{"leader/acks=all", leader, engine.AcksAll}, {"leader/acks=leader", leader, engine.AcksLeader}, {"follower/acks=all", follower, engine.AcksAll}, {"follower/acks=leader", follower, engine.AcksLeader}} {
		b.Run(c.name, func(b *testing.B) { run(b, c.via, c.acks) })
	}
}
