package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// groupDelivery is one delivery to one sidecar's app.
type groupDelivery struct {
	delivery
	node int
	at   time.Time
}

// groupApps is one app per sidecar, all consuming the verify group.
type groupApps struct {
	mu   sync.Mutex
	got  []groupDelivery
	stop []func()
}

func startGroupApps(t *testing.T, nodes []*node) *groupApps {
	t.Helper()
	ga := &groupApps{}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i, n := range nodes {
		c := n.client(context.Background())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- c.Subscribe(ctx, "verify", []string{"orders"}, func(_ context.Context, m *spool.Message) error {
				ga.mu.Lock()
				ga.got = append(ga.got, groupDelivery{delivery: delivery{id: m.ID, partition: m.Partition, offset: m.Offset}, node: i, at: time.Now()})
				ga.mu.Unlock()
				return nil
			}, spool.WithConcurrency(8), spool.WithLogger(quiet))
		}()
		ga.stop = append(ga.stop, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("app of node %d: subscribe: %v", i+1, err)
			}
		})
	}
	t.Cleanup(func() {
		for _, s := range ga.stop {
			s()
		}
	})
	return ga
}

func (ga *groupApps) deliveries() []groupDelivery {
	ga.mu.Lock()
	defer ga.mu.Unlock()
	return append([]groupDelivery(nil), ga.got...)
}

// deliveredAll reports whether every acknowledged message has been
// delivered to one of the apps.
func (ga *groupApps) deliveredAll(acks []ack) bool {
	seen := map[string]bool{}
	for _, d := range ga.deliveries() {
		seen[d.id] = true
	}
	for _, a := range acks {
		if !seen[a.id] {
			return false
		}
	}
	return true
}

// committedPositions reads the group's committed offsets through n's admin API.
func committedPositions(t *testing.T, n *node) (map[int32]int64, map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := n.adminClient().ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: "verify"})
	if err != nil {
		t.Fatalf("list groups: %v", err)
	}
	committed, end := map[int32]int64{}, map[int32]int64{}
	for _, g := range resp.GetGroups() {
		for _, p := range g.GetPartitions() {
			committed[p.GetPartition()], end[p.GetPartition()] = p.GetCommittedOffset(), p.GetEndOffset()
		}
	}
	return committed, end
}

// Three sidecars of a cluster, each with its own app, all in one group:
// the partitions are shared (each delivered by one sidecar at a time in
// steady state, without duplicates), a rolling restart (SIGTERM, start) of
// every sidecar under load loses nothing, and the committed positions
// never go backwards.
func TestClusterGroupSharedAcrossSidecars(t *testing.T) {
	start := time.Now()
	sc := startCluster(t, 3, "  produce_timeout: 3s\n")
	awaitPlaced(t, sc.nodes[0])
	ga := startGroupApps(t, sc.nodes)

	// Every sidecar gets a share: 4 partitions over 3 members.
	l := startLoad(t, sc.nodes)
	eventually(t, 60*time.Second, "every sidecar's app receiving deliveries", func() bool {
		seen := map[int]bool{}
		for _, d := range ga.deliveries() {
			seen[d.node] = true
		}
		return len(seen) == 3
	})
	l.awaitMore(3, 20, 30*time.Second, "20 acknowledged publishes per producer once the group settled")
	steadyFrom := time.Now()
	l.awaitMore(3, 60, 60*time.Second, "60 more acknowledged publishes per producer in steady state")
	steadyTo := time.Now()

	var samples []map[int32]int64
	sample := func() {
		c, _ := committedPositions(t, sc.nodes[0])
		samples = append(samples, c)
	}
	sample()
	for i, n := range sc.nodes {
		stopped := time.Now()
		n.stop()
		n.start()
		t.Logf("node %d restarted in %v", i+1, time.Since(stopped).Round(time.Millisecond))
		l.awaitMore(3, 30, 60*time.Second, fmt.Sprintf("30 more acknowledged publishes per producer after node %d restarted", i+1))
		sample()
	}
	acks, failures := l.finish()
	eventually(t, 90*time.Second, "every acknowledged id delivered and the group committed up to the end of every partition", func() bool {
		if !ga.deliveredAll(acks) {
			return false
		}
		c, end := committedPositions(t, sc.nodes[1])
		for p, e := range end {
			if c[p] < e {
				return false
			}
		}
		return len(end) > 0
	})
	sample()

	got := ga.deliveries()
	var all []delivery
	for _, d := range got {
		all = append(all, d.delivery)
	}
	verifyNothingLost(t, acks, failures, all)

	// Steady state: one sidecar per partition, no id delivered twice.
	owners := map[int32]map[int]bool{}
	count := map[string]int{}
	steadyDup := 0
	for _, d := range got {
		count[d.id]++
	}
	for _, d := range got {
		if d.at.Before(steadyFrom) || d.at.After(steadyTo) {
			continue
		}
		if owners[d.partition] == nil {
			owners[d.partition] = map[int]bool{}
		}
		owners[d.partition][d.node] = true
		if count[d.id] > 1 {
			steadyDup++
		}
	}
	for p, ns := range owners {
		if len(ns) != 1 {
			t.Errorf("partition %d delivered by %d sidecars at once in steady state: %v", p, len(ns), ns)
		}
	}
	if steadyDup > 0 {
		t.Errorf("%d deliveries in steady state were of ids delivered more than once", steadyDup)
	}
	dups := 0
	for _, n := range count {
		dups += n - 1
	}
	t.Logf("%d deliveries of %d ids; %d redeliveries in all (rebalances without the ledger redeliver unfinished messages)", len(got), len(count), dups)

	// Committed positions never go backwards.
	for i := 1; i < len(samples); i++ {
		for p, prev := range samples[i-1] {
			if cur := samples[i][p]; cur < prev {
				t.Errorf("partition %d: committed offset went back from %d to %d (sample %d)", p, prev, cur, i)
			}
		}
	}
	t.Logf("committed positions after each restart: %v", samples)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// A member of the group is killed (SIGKILL) under load: after the
// session timeout the coordinator expires it and the other sidecars take
// its partitions, starting from the committed positions; nothing
// acknowledged is lost (a message the killed sidecar had handed out but
// not committed is delivered again: at-least-once without the ledger),
// committed positions never go back, and the sidecar started again
// rejoins and gets partitions back.
func TestClusterGroupMemberKilled(t *testing.T) {
	start := time.Now()
	sc := startCluster(t, 3, "  produce_timeout: 3s\n  group_session_timeout: 3s\n")
	awaitPlaced(t, sc.nodes[0])
	ga := startGroupApps(t, sc.nodes)
	l := startLoad(t, sc.nodes[:2])
	eventually(t, 60*time.Second, "every sidecar's app receiving deliveries", func() bool {
		seen := map[int]bool{}
		for _, d := range ga.deliveries() {
			seen[d.node] = true
		}
		return len(seen) == 3
	})
	l.awaitMore(2, 20, 30*time.Second, "20 acknowledged publishes per producer once the group settled")
	before, _ := committedPositions(t, sc.nodes[0])

	killedAt := time.Now()
	sc.nodes[2].kill() // SIGKILL: no leave, no commit
	// Its partitions move to the two others: deliveries of every partition
	// resume there.
	parts := map[int32]bool{}
	for _, d := range ga.deliveries() {
		parts[d.partition] = true
	}
	eventually(t, 60*time.Second, "every partition delivered by a surviving sidecar after the kill", func() bool {
		seen := map[int32]bool{}
		for _, d := range ga.deliveries() {
			if d.node != 2 && d.at.After(killedAt) {
				seen[d.partition] = true
			}
		}
		for p := range parts {
			if !seen[p] {
				return false
			}
		}
		return true
	})
	t.Logf("the killed member's partitions delivered elsewhere %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	l.awaitMore(2, 30, 30*time.Second, "30 more acknowledged publishes per producer with node 3 down")
	after, _ := committedPositions(t, sc.nodes[0])

	sc.nodes[2].start()
	l.awaitMore(2, 30, 60*time.Second, "30 more acknowledged publishes per producer after node 3 is back")
	acks, failures := l.finish()
	eventually(t, 90*time.Second, "every acknowledged id delivered and the group committed up to the end", func() bool {
		if !ga.deliveredAll(acks) {
			return false
		}
		c, end := committedPositions(t, sc.nodes[0])
		for p, e := range end {
			if c[p] < e {
				return false
			}
		}
		return len(end) > 0
	})
	final, _ := committedPositions(t, sc.nodes[0])
	var all []delivery
	count := map[string]int{}
	for _, d := range ga.deliveries() {
		all = append(all, d.delivery)
		count[d.id]++
	}
	verifyNothingLost(t, acks, failures, all)
	for _, pair := range [][2]map[int32]int64{{before, after}, {after, final}} {
		for p, prev := range pair[0] {
			if cur := pair[1][p]; cur < prev {
				t.Errorf("partition %d: committed offset went back from %d to %d", p, prev, cur)
			}
		}
	}
	dups := 0
	for _, n := range count {
		dups += n - 1
	}
	t.Logf("%d deliveries of %d ids; %d redeliveries (messages the killed member had not committed); committed %v → %v → %v; total %v",
		len(all), len(count), dups, before, after, final, time.Since(start).Round(time.Millisecond))
}

// A sidecar with storage off (cluster.storage: off: a client of the
// cluster, for autoscaled app pods) is a member of its app's group like
// any other: here it is the only one with an app, so its app gets every
// message. It failed before members could join without a node: a
// storage-off node has no node id in the cluster, the sidecar's membership
// waited for one, and the coordinator refused a Join with node 0, so the
// subscription never joined and its app got nothing, with nothing logged.
func TestClusterGroupOnStorageOffSidecar(t *testing.T) {
	sc := startCluster(t, 3, "  produce_timeout: 3s\n")
	awaitPlaced(t, sc.nodes[0])
	client := startNode(t, fmt.Sprintf("cluster:\n%s  storage: off\n  join: [%q]\n", sc.creds.yaml, sc.seed)+clusterTopics)
	ga := startGroupApps(t, []*node{client})
	l := startLoad(t, sc.nodes[:1])
	l.awaitMore(1, 50, 30*time.Second, "50 acknowledged publishes")
	acks, _ := l.finish()
	eventually(t, 30*time.Second, "every acknowledged message delivered to the storage-off sidecar's app", func() bool { return ga.deliveredAll(acks) })
}

// Three sidecars of a cluster, each with its own app in one group: spool
// group describe, asked of any of them, counts the group's three apps,
// not the answering sidecar's one. (Each said 1 before members reported
// their counts to the coordinator.)
func TestClusterGroupDescribeCountsEverySidecarsApps(t *testing.T) {
	sc := startCluster(t, 3, "  produce_timeout: 3s\n")
	awaitPlaced(t, sc.nodes[0])
	startGroupApps(t, sc.nodes)
	for i, n := range sc.nodes {
		adm := n.adminClient()
		said := uint32(1 << 31) // none yet
		eventually(t, 30*time.Second, fmt.Sprintf("node %d describing group verify with 3 consumers", i+1), func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := adm.ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: "verify"})
			if err != nil || len(resp.GetGroups()) != 1 {
				return false
			}
			c := resp.GetGroups()[0].GetConsumers()
			if c != said {
				t.Logf("node %d describes group verify with %d consumers", i+1, c)
				said = c
			}
			return c == 3
		})
	}
}

// Every sidecar of a group and its app stopped at once (kubectl delete of
// the whole deployment), with the default drain budget
// (node.drain_timeout, 30 s): each spoold exits well within it, with exit
// code 0 and no ERROR line after the SIGTERM. Handing partitions over and
// leaving the group need the group's coordinator, whose nodes are stopping
// too. Measured 3.1 s (the leadership hand-off's 3 s bound: the peers it
// would hand to are stopping); the 25 s and the "handing a revoked
// partition over failed" ERROR lines of a fault run did not reproduce in
// this form (4 partitions, 1 ms handlers).
func TestClusterGroupWholeDeploymentStop(t *testing.T) {
	sc := &spoolCluster{t: t, creds: newPeerCreds(t), extra: "  produce_timeout: 3s\n", tail: clusterTopics, drain: "30s"}
	for range 3 {
		sc.addNode()
	}
	awaitPlaced(t, sc.nodes[0])
	ga := startGroupApps(t, sc.nodes)
	l := startLoad(t, sc.nodes)
	eventually(t, 60*time.Second, "every sidecar's app receiving deliveries", func() bool {
		seen := map[int]bool{}
		for _, d := range ga.deliveries() {
			seen[d.node] = true
		}
		return len(seen) == 3
	})
	l.awaitMore(3, 20, 30*time.Second, "20 acknowledged publishes per producer once the group settled")
	l.finish()
	from := make([]int64, len(sc.nodes))
	for i, n := range sc.nodes {
		st, err := os.Stat(n.logPath)
		if err != nil {
			t.Fatal(err)
		}
		from[i] = st.Size()
	}
	const budget = 6 * time.Second // well within node.drain_timeout
	stopped := time.Now()
	for _, n := range sc.nodes {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
	var apps sync.WaitGroup
	for _, stop := range ga.stop { // the apps' containers stop too
		apps.Go(stop)
	}
	ga.stop = nil
	defer apps.Wait()
	took := make([]time.Duration, len(sc.nodes))
	for i, n := range sc.nodes {
		select {
		case <-n.exited:
			took[i] = time.Since(stopped)
		case <-time.After(60 * time.Second):
			t.Fatalf("node %d did not exit within 60 s of SIGTERM", i+1)
		}
	}
	t.Logf("exited after %v", took)
	for i, n := range sc.nodes {
		if code := n.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("node %d exited with code %d", i+1, code)
		}
		if took[i] > budget+time.Second {
			t.Errorf("node %d exited %v after SIGTERM, past its drain budget %v", i+1, took[i].Round(time.Millisecond), budget)
		}
		b, err := os.ReadFile(n.logPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b[from[i]:]), "\n") {
			if strings.Contains(line, "level=ERROR") {
				t.Errorf("node %d logged after the SIGTERM: %s", i+1, line)
			}
		}
	}
}
