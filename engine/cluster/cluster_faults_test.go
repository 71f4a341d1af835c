package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// TestClusterRandomFaults: three in-process nodes (real gRPC, real disks)
// take bursts of publishes through any node (forwarded to the partitions'
// leaders) while nodes stop and start and leaderships move, at random
// (seeded: SPOOL_FAULT_SEED=N replays a run's choices; the timing of a real
// cluster still varies). Once every node runs again and every publish has
// its answer: every acknowledged burst is on every replica, once, at the
// offsets it was acknowledged with, its records together and in order; no
// record is stored twice (the forwarders' resends after unknown outcomes
// included); a burst refused as "no leader" is nowhere; and the replicas
// hold the same records.
func TestClusterRandomFaults(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SPOOL_FAULT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SPOOL_FAULT_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (SPOOL_FAULT_SEED=%d replays the choices)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))

	tc := newTestCluster(t, 3)
	const parts = 2
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	for p := range int32(parts) {
		awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", p, fmt.Sprintf("first-%d", p)); return err })
	}
	type burst struct {
		part   int32
		values []string
		res    chan produceResult
	}
	var bursts []*burst
	next := 0
	up := func() []*clusterNode {
		var out []*clusterNode
		for _, cn := range tc.nodes {
			if cn.n != nil {
				out = append(out, cn)
			}
		}
		return out
	}
	var steps []string
	for range 40 {
		live := up()
		switch k := rng.IntN(10); {
		case k < 6 && len(live) > 0: // a burst through a node
			via := live[rng.IntN(len(live))]
			b := &burst{part: int32(rng.IntN(parts)), res: make(chan produceResult, 1)}
			var recs []log.Record
			for range 1 + rng.IntN(5) {
				v := fmt.Sprintf("v%d", next)
				next++
				b.values = append(b.values, v)
				recs = append(recs, log.Record{ID: []byte(v), Value: []byte(v)})
			}
			via.n.Produce("orders", b.part, recs, func(base int64, err error) { b.res <- produceResult{base, err} })
			bursts = append(bursts, b)
			steps = append(steps, fmt.Sprintf("publish %d to %d via %s", len(recs), b.part, via.addr))
		case k < 8 && len(live) > 1: // a node stops; now and then a second one (no quorum until one is back)
			if len(live) < len(tc.nodes) && rng.IntN(4) != 0 {
				continue
			}
			cn := live[rng.IntN(len(live))]
			tc.stop(cn)
			steps = append(steps, "stop "+cn.addr)
		case k < 9: // a stopped node starts again
			for _, cn := range tc.nodes {
				if cn.n == nil {
					tc.start(cn)
					steps = append(steps, "start "+cn.addr)
					break
				}
			}
		default: // a partition's leadership moves
			p := int32(rng.IntN(parts))
			ld := tc.leaderOf("orders", p)
			if ld == nil || len(live) < 2 {
				continue
			}
			to := live[rng.IntN(len(live))]
			cs, _ := to.n.ClusterStatus()
			part, err := ld.n.partition("orders", p)
			if err != nil {
				continue
			}
			_ = ld.n.asMember().host.TransferLeadership(part.X.raftGroup, cs.NodeID)
			steps = append(steps, fmt.Sprintf("transfer %d to node %d", p, cs.NodeID))
		}
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond) // sleep-ok: random pacing of the faults is the test's input
	}
	for _, cn := range tc.nodes {
		if cn.n == nil {
			tc.start(cn)
		}
	}
	defer func() {
		if t.Failed() {
			t.Logf("steps: %q", steps)
		}
	}()

	// Every publish answers (within the produce timeout).
	type outcome struct {
		b    *burst
		base int64
		err  error
	}
	var outs []outcome
	for _, b := range bursts {
		select {
		case r := <-b.res:
			outs = append(outs, outcome{b, r.base, r.err})
		case <-time.After(60 * time.Second):
			t.Fatalf("a burst of %v got no answer", b.values)
		}
	}
	// The replicas converge.
	var logs [parts][]log.Record
	awaitCond(t, 60*time.Second, "every replica holding the same records", func() error {
		for p := range int32(parts) {
			var ref []log.Record
			for i, cn := range tc.nodes {
				got, err := localRecords(cn.n, "orders", p)
				if err != nil {
					return err
				}
				if i == 0 {
					ref = got
					continue
				}
				if err := sameRecords(got, ref); err != nil {
					return fmt.Errorf("partition %d, node at %s against node at %s: %v", p, cn.addr, tc.nodes[0].addr, err)
				}
			}
			logs[p] = ref
		}
		return nil
	})
	where := map[string][]int64{} // value -> offsets (of its partition)
	for p := range parts {
		for _, r := range logs[p] {
			where[string(r.Value)] = append(where[string(r.Value)], r.Offset)
		}
	}
	acked, refused, unknown := 0, 0, 0
	for _, o := range outs {
		for i, v := range o.b.values {
			offs := where[v]
			if len(offs) > 1 {
				t.Errorf("%s stored %d times, at %v", v, len(offs), offs)
			}
			switch {
			case o.err == nil:
				if !slices.Equal(offs, []int64{o.base + int64(i)}) {
					t.Errorf("%s acknowledged at offset %d, stored at %v", v, o.base+int64(i), offs)
				}
			case errors.Is(o.err, engine.ErrNoLeader):
				if len(offs) > 0 {
					t.Errorf("%s refused (%v) but stored at %v", v, o.err, offs)
				}
			}
		}
		switch {
		case o.err == nil:
			acked++
		case errors.Is(o.err, engine.ErrNoLeader):
			refused++
		default:
			unknown++
		}
	}
	t.Logf("%d bursts: %d acknowledged, %d refused (no leader), %d other outcomes", len(outs), acked, refused, unknown)
	if acked == 0 {
		t.Fatalf("no burst was acknowledged: the run proves nothing (steps %q)", steps)
	}
}
