package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/internal/testkafka"
	"github.com/spoolmq/spool/internal/testredis"
)

// kafkaShared is the storage section of sidecars sharing their groups
// through Kafka consumer groups, with the group timeouts given.
func kafkaShared(t *testing.T, brk *testkafka.Broker, session, revoke string) string {
	return kafkaStorage(t, brk) + "    shared_groups: true\n" +
		fmt.Sprintf("cluster:\n  group_session_timeout: %s\n  group_revoke_timeout: %s\n", session, revoke)
}

// Sidecars on Kafka with shared_groups, each with its app, share group
// verify (12 partitions, 300 keys, the Redis ledger on) under steady keyed
// load: three share it; a fourth joins (cooperative rebalance: partitions
// revoked from the three are handed over); the fourth gets SIGTERM while
// its app stays connected (it drains, commits, leaves the Kafka group);
// then n3 is killed (kill -9: Kafka moves its partitions after the 3 s
// session timeout).
//
// Asserted (checkScaleRun, as on the embedded cluster): nothing
// acknowledged is lost; no message is completed twice but what the ledger
// does not promise after a kill -9; per-key order (no two messages of a key
// at the apps at once, first deliveries in offset order); every settled
// group has each partition delivered by one sidecar, counts one apart;
// committed positions (read every 200 ms) never go back, and end at the
// end of every partition.
func testKafkaGroupRebalance(t *testing.T, brk *testkafka.Broker) {
	start := time.Now()
	r := testredis.Start(t)
	cfg := kafkaShared(t, brk, "3s", "15s") + scaleConfig(r.Addr())
	var nodes []*node
	for i := range 3 {
		nodes = append(nodes, startNamedNode(t, fmt.Sprintf("n%d", i+1), "", cfg))
	}
	positions := samplePositions(t, nodes[0])
	sa := newScaleApps(t)
	for i := range 3 {
		sa.start(i, nodes[i])
	}
	// Two producers, through n1 and n2, which stay up throughout (one
	// sidecar serving both and half the partitions at the end falls behind
	// on a loaded machine, and the group never looks settled).
	l := startLoadWith(t, []*node{nodes[0], nodes[1]}, scaleKeys, 8*time.Millisecond)
	sa.awaitSettled([]int{0, 1, 2}, 60*time.Second, "three sidecars share the group")
	t.Logf("three sidecars up and sharing: %v", time.Since(start).Round(time.Millisecond))
	checkKafkaSeesMembers(t, brk, sa, 3)

	from := time.Now()
	nodes = append(nodes, startNamedNode(t, "n4", "", cfg))
	sa.start(3, nodes[3])
	sa.awaitSettled([]int{0, 1, 2, 3}, 60*time.Second, "a fourth sidecar joined: four share the group")
	t.Logf("join: %v", time.Since(from).Round(time.Millisecond))

	from = time.Now()
	nodes[3].stop()
	sa.apps[3].signal(syscall.SIGTERM)
	sa.apps[3].waitExit(20 * time.Second)
	delete(sa.apps, 3)
	sa.awaitSettled([]int{0, 1, 2}, 60*time.Second, "n4 stopped (drain, commit, leave): three share the group")
	t.Logf("leave: %v", time.Since(from).Round(time.Millisecond))

	l.awaitMore(2, 100, 30*time.Second, "100 more acknowledged publishes per producer before the kill")
	from = time.Now()
	killed := from
	nodes[2].kill()
	atKill := ledgerStates(t, r, "verify")
	sa.awaitSettled([]int{0, 1}, 60*time.Second, "n3 killed: two share the group")
	t.Logf("kill -9: %v", time.Since(from).Round(time.Millisecond))
	l.awaitMore(2, 100, 30*time.Second, "100 more acknowledged publishes per producer at the end")

	acks, failures := l.finish()
	done := map[string]bool{}
	caughtUp := func() bool {
		sa.poll()
		for _, e := range sa.events {
			if e.kind == "done" {
				done[e.id] = true
			}
		}
		for _, a := range acks {
			if !done[a.id] {
				return false
			}
		}
		c, end := committedPositions(t, nodes[0])
		for p, e := range end {
			if c[p] < e {
				return false
			}
		}
		return len(end) == scalePartitions
	}
	for deadline := time.Now().Add(60 * time.Second); !caughtUp(); {
		if time.Now().After(deadline) {
			c, end := committedPositions(t, nodes[0])
			t.Errorf("60 s after the load stopped, not every acknowledged publish is completed or the group has not committed to the end (committed %v, ends %v)", c, end)
			break
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
	positions.finish()
	sa.poll()
	t.Logf("%d acknowledged publishes (%d ids with a failed attempt); %d record lines", len(acks), len(failures), len(sa.events))
	checkScaleRun(t, sa.events, acks, failures, 2, killed, atKill)
	checkPositions(t, positions)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// A sidecar whose app's handlers hang (each takes a minute, longer than the
// revoke timeout of 3 s) does not hold a rebalance up: when a second
// sidecar joins, the partitions revoked from the first are handed back
// after the drain bound (two thirds of the revoke timeout), and the second
// sidecar's app completes every message of them, the hung ones included,
// long before the hung handlers would have returned.
func testKafkaGroupSlowHandler(t *testing.T, brk *testkafka.Broker) {
	cfg := kafkaShared(t, brk, "3s", "3s") + config("2m", "none")
	n1 := startNamedNode(t, "n1", "", cfg)
	c := n1.client(t.Context())
	ids := publishSeq(t, c, "orders", 0, 40, func(s int) string { return fmt.Sprintf("k%d", s) })
	dir := t.TempDir()
	slow := filepath.Join(dir, "slow")
	startApp(t, n1, slow, "--group", "workers", "--concurrency", "64", "--delay", "1m")
	eventually(t, 30*time.Second, "the slow app holds every message", func() bool { return len(readEvents(t, slow)) == len(ids) })

	n2 := startNamedNode(t, "n2", "", cfg)
	fast := filepath.Join(dir, "fast")
	joined := time.Now()
	startApp(t, n2, fast, "--group", "workers", "--concurrency", "64")
	// Every message of a partition the fast app delivers, hung at the slow
	// app or not, is completed by the fast app.
	perPartition := map[int32]map[string]bool{}
	for _, e := range readEvents(t, slow) {
		if perPartition[e.partition] == nil {
			perPartition[e.partition] = map[string]bool{}
		}
		perPartition[e.partition][e.id] = true
	}
	// Both partitions the joiner is assigned are awaited: they are handed
	// over together, but the second one's first delivery can come after
	// the first one's last completion (once in CI this read one of two).
	var moved map[int32]bool
	eventually(t, 30*time.Second, "the fast app delivers two partitions and completes every message of them", func() bool {
		done := map[string]bool{}
		moved = map[int32]bool{}
		for _, e := range readEvents(t, fast) {
			moved[e.partition] = true
			if e.kind == "done" {
				done[e.id] = true
			}
		}
		if len(moved) < 2 {
			return false
		}
		for p := range moved {
			for id := range perPartition[p] {
				if !done[id] {
					return false
				}
			}
		}
		return true
	})
	t.Logf("partitions %v moved and their hung messages completed by the joining sidecar's app %v after it started (handlers hang 1m, revoke timeout 3s)",
		slices.Sorted(maps.Keys(moved)), time.Since(joined).Round(time.Millisecond))
	if len(moved) != 2 {
		t.Errorf("the joining sidecar delivers partitions %v; want 2 of the 4", slices.Sorted(maps.Keys(moved)))
	}
}

// checkKafkaSeesMembers checks Kafka's own view of group verify (what
// kafka-consumer-groups --describe shows): n members, the sidecars
// spoold-n1.., each assigned the partitions its app is delivering.
func checkKafkaSeesMembers(t *testing.T, brk *testkafka.Broker, sa *scaleApps, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brk.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kgroup := kafkaPrefix(t) + "verify"
	described, err := kadm.NewClient(cl).DescribeGroups(ctx, kgroup)
	if err != nil {
		t.Fatal(err)
	}
	g := described[kgroup]
	if len(g.Members) != n || g.Protocol != "cooperative-sticky" || g.State != "Stable" {
		t.Fatalf("Kafka describes group %s with %d members, protocol %q, state %s; want %d, cooperative-sticky, Stable", kgroup, len(g.Members), g.Protocol, g.State, n)
	}
	owners := sa.owners()
	for _, m := range g.Members {
		a, _ := m.Assigned.AsConsumer()
		var parts []int32
		for _, tp := range a.Topics {
			parts = append(parts, tp.Partitions...)
		}
		for _, p := range parts {
			if want := fmt.Sprintf("spoold-n%d", owners[p]+1); owners != nil && m.ClientID != want {
				t.Errorf("Kafka assigns partition %d to %s; the sidecar delivering it is %s", p, m.ClientID, want)
			}
		}
		t.Logf("Kafka: member %s (%s) assigned %v", m.ClientID, m.MemberID, parts)
	}
}
