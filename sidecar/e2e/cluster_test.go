package e2e

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/internal/buildinfo"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// Cluster tests: real spoold processes on 127.0.0.1 forming one cluster
// (cluster.listen, cluster.join), talking gRPC, writing to real disks.
// docs/replication.md, "Cluster tests with real spoold processes".

// spoolCluster is spoold processes forming one cluster: node 0
// bootstraps it, the others join through node 0.
type spoolCluster struct {
	t     *testing.T
	nodes []*node
	seed  string     // node 0's cluster address
	creds *peerCreds // mutual TLS and the join secret, for every node
	extra string     // more of the cluster section, for every node
	tail  string     // the rest of every node's config (topics, subscriptions, ...)
	drain string     // node.drain_timeout ("": 5s)
	bin   string     // the spoold binary of the next node addNode starts ("": this tree's)
}

// clusterTopics is the topic and subscription every node of the tests
// declares: each sidecar delivers all partitions of its subscriptions to
// its own app (no consumer groups across sidecars yet).
const clusterTopics = `
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: verify
    visibility_timeout: 30s
`

// startCluster starts size nodes one after the other, each ready (a member
// of the cluster) before the next starts. clusterExtra is more of the
// cluster section (indented YAML lines).
func startCluster(t *testing.T, size int, clusterExtra string) *spoolCluster {
	t.Helper()
	return startClusterWith(t, size, clusterExtra, clusterTopics)
}

// startClusterWith is startCluster with the rest of the config (topics,
// subscriptions, redis, ...) instead of clusterTopics.
func startClusterWith(t *testing.T, size int, clusterExtra, config string) *spoolCluster {
	t.Helper()
	sc := &spoolCluster{t: t, creds: newPeerCreds(t), extra: clusterExtra, tail: config}
	for range size {
		sc.addNode()
	}
	return sc
}

// addNode starts one more node (node id n<count>, on a fresh data dir),
// joining the cluster through every node not gone, as a pod joins through
// its peers' headless Service (the first node bootstraps it), and waits
// until it is ready.
func (sc *spoolCluster) addNode() *node {
	t := sc.t
	t.Helper()
	i := len(sc.nodes)
	dir := t.TempDir()
	n := &node{t: t, dataDir: filepath.Join(dir, "data"), cfgPath: filepath.Join(dir, "spool.yaml"), logPath: filepath.Join(dir, "spoold.log"), bin: sc.bin}
	addrs := freeAddrs(t, 3)
	n.app, n.admin = addrs[0], addrs[1]
	peer := addrs[2]
	n.peer = peer
	join := ""
	if i == 0 {
		sc.seed = peer
	} else {
		var peers []string
		for _, o := range sc.nodes {
			if !o.gone {
				peers = append(peers, fmt.Sprintf("%q", o.peer))
			}
		}
		join = fmt.Sprintf("  join: [%s]\n", strings.Join(peers, ", "))
	}
	name := fmt.Sprintf("n%d", i+1)
	cfg := fmt.Sprintf("node:\n  id: %s\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n  drain_timeout: %s\ncluster:\n  listen: %q\n%s%s%s",
		name, n.dataDir, n.app, n.admin, cmp.Or(sc.drain, "5s"), peer, sc.creds.nodeYAML(t, name), join, sc.extra) + sc.tail
	if err := os.WriteFile(n.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			b, _ := os.ReadFile(n.logPath)
			t.Logf("spoold %s log:\n%s", name, tail(string(b), 40))
		}
	})
	n.start()
	sc.nodes = append(sc.nodes, n)
	return n
}

// publisherClient is the raw gRPC publisher of a node, for exact codes,
// reasons and messages.
func (n *node) publisherClient() spoolv1.PublisherServiceClient {
	n.t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+n.app, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { conn.Close() })
	return spoolv1.NewPublisherServiceClient(conn)
}

// ack is one acknowledged publish.
type ack struct {
	id        string
	producer  int
	key       string
	seq       int // position in its producer's sequence
	partition int32
	offset    int64
	attempts  int // publish calls it took (1 = no error seen)
	at        time.Time
}

// load is producers publishing keyed messages with unique ids, each
// producer sequentially (one message at a time, retried with the same id
// until acknowledged), each through its own sidecar.
type load struct {
	t        *testing.T
	keys     int           // keys k0, k1, ... in turn
	every    time.Duration // at most one message per producer this often (0: as fast as acknowledged)
	mu       sync.Mutex
	acks     []ack
	failures map[string][]string // id → errors of its failed attempts
	stop     chan struct{}
	wg       sync.WaitGroup
	errs     chan error
}

const (
	loadKeys = 8
	// loadMessageTimeout bounds how long one message may take to be
	// acknowledged, retries included, while a majority of the nodes runs.
	loadMessageTimeout = 30 * time.Second
)

func startLoad(t *testing.T, sidecars []*node) *load {
	t.Helper()
	return startLoadWith(t, sidecars, loadKeys, 0)
}

// startLoadWith is startLoad with keys k0..k<keys-1> and each producer
// paced to at most one message every every (0: unpaced).
func startLoadWith(t *testing.T, sidecars []*node, keys int, every time.Duration) *load {
	t.Helper()
	l := &load{t: t, keys: keys, every: every, failures: map[string][]string{}, stop: make(chan struct{}), errs: make(chan error, len(sidecars))}
	for p, n := range sidecars {
		c := n.client(context.Background())
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if err := l.produce(p, c); err != nil {
				l.errs <- err
			}
		}()
	}
	return l
}

// produce publishes messages p-0, p-1, ... with keys k0..k<keys-1> in turn
// until stop is closed; each is retried with the same id until
// acknowledged.
func (l *load) produce(p int, c *spool.Client) error {
	var pace <-chan time.Time
	if l.every > 0 {
		tick := time.NewTicker(l.every)
		defer tick.Stop()
		pace = tick.C
	}
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			return nil
		default:
		}
		if pace != nil {
			select {
			case <-pace: // the producer's rate, not a wait for a condition
			case <-l.stop:
				return nil
			}
		}
		id := fmt.Sprintf("p%d-%d", p, seq)
		key := fmt.Sprintf("k%d", seq%l.keys)
		deadline := time.Now().Add(loadMessageTimeout)
		for attempt := 1; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := c.Publish(ctx, "orders", []byte(key), []byte(id), spool.WithID(id))
			cancel()
			if err == nil {
				l.mu.Lock()
				l.acks = append(l.acks, ack{id: id, producer: p, key: key, seq: seq, partition: res.Partition, offset: res.Offset, attempts: attempt, at: time.Now()})
				l.mu.Unlock()
				break
			}
			l.mu.Lock()
			l.failures[id] = append(l.failures[id], err.Error())
			l.mu.Unlock()
			if time.Now().After(deadline) {
				return fmt.Errorf("producer %d: message %s not acknowledged after %v and %d attempts; last error: %w", p, id, loadMessageTimeout, attempt, err)
			}
			select {
			case <-time.After(time.Duration(min(attempt, 10)) * 20 * time.Millisecond): // retry backoff of a producer, not a wait for a condition
			case <-l.stop:
				// Stopping: the message stays unacknowledged (it may be
				// stored; it is never counted as acknowledged).
				return nil
			}
		}
	}
}

// acked is how many messages producer p has had acknowledged (p < 0: all).
func (l *load) acked(p int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p < 0 {
		return len(l.acks)
	}
	k := 0
	for _, a := range l.acks {
		if a.producer == p {
			k++
		}
	}
	return k
}

// awaitMore waits until every producer has had more messages acknowledged
// than now, by at least k each.
func (l *load) awaitMore(producers, k int, timeout time.Duration, what string) {
	l.t.Helper()
	base := make([]int, producers)
	for p := range producers {
		base[p] = l.acked(p)
	}
	eventually(l.t, timeout, what, func() bool {
		select {
		case err := <-l.errs:
			l.t.Fatal(err)
		default:
		}
		for p := range producers {
			if l.acked(p) < base[p]+k {
				return false
			}
		}
		return true
	})
}

// finish stops the producers and returns what was acknowledged and the
// failed attempts by id.
func (l *load) finish() ([]ack, map[string][]string) {
	l.t.Helper()
	close(l.stop)
	l.wg.Wait()
	close(l.errs)
	for err := range l.errs {
		l.t.Error(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acks, l.failures
}

// longestGap is the longest time between two consecutive acks of one
// producer: how long publishing stalled.
func longestGap(acks []ack) time.Duration {
	last := map[int]time.Time{}
	var gap time.Duration
	for _, a := range acks {
		if prev, ok := last[a.producer]; ok {
			gap = max(gap, a.at.Sub(prev))
		}
		last[a.producer] = a.at
	}
	return gap
}

// delivery is one message handed to the verifying consumer.
type delivery struct {
	id        string
	partition int32
	offset    int64
}

// consumeAll subscribes to the verify group on n with the SDK, acks every
// message, and returns once the group has finished every partition up to
// its end (ListGroups: committed == end) and every id in want was
// delivered.
func consumeAll(t *testing.T, n *node, want []ack) []delivery {
	t.Helper()
	var mu sync.Mutex
	var got []delivery
	seen := map[string]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	c := n.client(context.Background())
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- c.Subscribe(ctx, "verify", []string{"orders"}, func(_ context.Context, m *spool.Message) error {
			mu.Lock()
			got = append(got, delivery{id: m.ID, partition: m.Partition, offset: m.Offset})
			seen[m.ID] = true
			mu.Unlock()
			return nil
		}, spool.WithConcurrency(16), spool.WithLogger(quiet))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("subscribe: %v", err)
		}
	}()
	admin := n.adminClient()
	eventually(t, 30*time.Second, "every acknowledged id delivered and the group caught up with the log", func() bool {
		mu.Lock()
		for _, a := range want {
			if !seen[a.id] {
				mu.Unlock()
				return false
			}
		}
		mu.Unlock()
		resp, err := admin.ListGroups(context.Background(), &spoolv1.ListGroupsRequest{Group: "verify"})
		if err != nil {
			return false
		}
		for _, g := range resp.GetGroups() {
			for _, p := range g.GetPartitions() {
				if p.GetCommittedOffset() < p.GetEndOffset() {
					return false
				}
			}
		}
		return len(resp.GetGroups()) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	return append([]delivery(nil), got...)
}

// verifyNothingLost checks what the consumer got against what was
// acknowledged: every acknowledged id was delivered, the record at the
// acknowledged partition and offset is that message, ids stored twice are
// only ids whose publish failed and was retried, and the acknowledged
// messages of each producer and key are stored in publish order.
func verifyNothingLost(t *testing.T, acks []ack, failures map[string][]string, got []delivery) {
	t.Helper()
	type pos struct {
		partition int32
		offset    int64
	}
	at := map[pos]string{}
	stored := map[string]map[pos]bool{}
	for _, d := range got {
		p := pos{d.partition, d.offset}
		if prev, ok := at[p]; ok && prev != d.id {
			t.Errorf("partition %d offset %d delivered as %s and as %s", d.partition, d.offset, prev, d.id)
		}
		at[p] = d.id
		if stored[d.id] == nil {
			stored[d.id] = map[pos]bool{}
		}
		stored[d.id][p] = true
	}
	lost := 0
	for _, a := range acks {
		if len(stored[a.id]) == 0 {
			lost++
			if lost <= 10 {
				t.Errorf("LOST: %s acknowledged at partition %d offset %d (after %d attempts) was never delivered", a.id, a.partition, a.offset, a.attempts)
			}
			continue
		}
		if id := at[pos{a.partition, a.offset}]; id != a.id {
			t.Errorf("%s acknowledged at partition %d offset %d, but that offset holds %q", a.id, a.partition, a.offset, id)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged messages lost", lost, len(acks))
	}
	// Duplicates in the log: one id at two offsets.
	var dups []string
	for id, ps := range stored {
		if len(ps) < 2 {
			continue
		}
		dups = append(dups, id)
		if len(failures[id]) == 0 {
			var where []string
			for p := range ps {
				where = append(where, fmt.Sprintf("%d@%d", p.partition, p.offset))
			}
			sort.Strings(where)
			ackedAt := "never acknowledged"
			for _, a := range acks {
				if a.id == id {
					ackedAt = fmt.Sprintf("acknowledged at %d@%d at %s", a.partition, a.offset, a.at.Format("15:04:05.000"))
				}
			}
			t.Errorf("DUPLICATE: %s is stored %d times (partition@offset %v) but its publish never returned an error (%s): spoold stored it twice on its own", id, len(ps), where, ackedAt)
		}
	}
	sort.Strings(dups)
	retried := 0
	for range failures {
		retried++
	}
	t.Logf("%d acknowledged, %d deliveries, %d ids published with at least one failed attempt, %d of them stored twice or more: %v",
		len(acks), len(got), retried, len(dups), dups)
	// Per-key order: a producer publishes one message at a time, so its
	// acknowledged messages of a key are at increasing offsets of the
	// key's partition.
	type pk struct {
		producer int
		key      string
	}
	last := map[pk]ack{}
	for _, a := range acks { // in acknowledgement order, which is seq order per producer
		k := pk{a.producer, a.key}
		if prev, ok := last[k]; ok {
			if prev.partition != a.partition {
				t.Errorf("key %s: %s in partition %d, %s in partition %d", a.key, prev.id, prev.partition, a.id, a.partition)
			} else if a.offset <= prev.offset {
				t.Errorf("key %s of producer %d: %s (seq %d) at offset %d, after %s (seq %d) at offset %d: publish order broken",
					a.key, a.producer, a.id, a.seq, a.offset, prev.id, prev.seq, prev.offset)
			}
		}
		last[k] = a
	}
}

// failureSample is a few distinct failed-attempt errors, for the log.
func failureSample(failures map[string][]string) []string {
	set := map[string]bool{}
	for _, errs := range failures {
		for _, e := range errs {
			set[e] = true
		}
	}
	var out []string
	for e := range set {
		out = append(out, e)
	}
	sort.Strings(out)
	return out[:min(len(out), 5)]
}

// awaitPlaced waits until a publish through n succeeds (the topic's
// partitions are placed and have leaders).
func awaitPlaced(t *testing.T, n *node) {
	t.Helper()
	c := n.client(context.Background())
	eventually(t, 30*time.Second, "a first publish (topic placed, leaders elected)", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for k := range loadKeys { // one per key: every partition the load uses
			if _, err := c.Publish(ctx, "orders", []byte(fmt.Sprintf("k%d", k)), []byte("warm-up"), spool.WithID(fmt.Sprintf("warm-up-%d", k))); err != nil {
				return false
			}
		}
		return true
	})
}

// Three nodes, a topic of 4 partitions, two producers publishing through
// two sidecars; the bootstrap node (it leads the controller, and leads
// some partitions) is killed with SIGKILL mid-load. Publishing goes on
// through the survivors; the node comes back. A consumer on a survivor then
// receives every acknowledged message at the offset its publish returned;
// duplicates come only from publishes that failed and were retried; each
// producer's messages of a key are stored in publish order.
func TestClusterKillLeaderUnderLoad(t *testing.T) {
	start := time.Now()
	sc := startCluster(t, 3, "  produce_timeout: 3s\n")
	awaitPlaced(t, sc.nodes[1])
	t.Logf("cluster up and topic placed in %v", time.Since(start).Round(time.Millisecond))

	// Four producers, two through each surviving sidecar: several
	// publishes are in flight at the leaders when the kill comes.
	l := startLoad(t, []*node{sc.nodes[1], sc.nodes[2], sc.nodes[1], sc.nodes[2]})
	l.awaitMore(4, 30, 20*time.Second, "30 acknowledged publishes per producer before the kill")
	killedAt := time.Now()
	sc.nodes[0].kill() // SIGKILL
	t.Logf("node 1 killed at %s", killedAt.Format("15:04:05.000"))
	l.awaitMore(4, 30, 30*time.Second, "30 more acknowledged publishes per producer with node 1 down")
	t.Logf("publishing resumed through the survivors %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	sc.nodes[0].start()
	l.awaitMore(4, 30, 30*time.Second, "30 more acknowledged publishes per producer after node 1 is back")
	acks, failures := l.finish()
	t.Logf("%d acknowledged; longest stall of a producer %v; sample of failed attempts: %q",
		len(acks), longestGap(acks).Round(time.Millisecond), failureSample(failures))

	got := consumeAll(t, sc.nodes[2], acks)
	verifyNothingLost(t, acks, failures, got)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// Each node in turn is stopped with SIGTERM and started again under
// continuous publishing through every sidecar; nothing acknowledged is
// lost, and the restarted cluster delivers it all.
func TestClusterRollingRestartUnderLoad(t *testing.T) {
	start := time.Now()
	sc := startCluster(t, 3, "  produce_timeout: 3s\n")
	awaitPlaced(t, sc.nodes[0])

	l := startLoad(t, sc.nodes)
	l.awaitMore(3, 30, 20*time.Second, "30 acknowledged publishes per producer before the first restart")
	for i, n := range sc.nodes {
		stopped := time.Now()
		n.stop()
		n.start()
		t.Logf("node %d restarted in %v", i+1, time.Since(stopped).Round(time.Millisecond))
		l.awaitMore(3, 30, 30*time.Second, fmt.Sprintf("30 more acknowledged publishes per producer after node %d restarted", i+1))
	}
	acks, failures := l.finish()
	t.Logf("%d acknowledged; longest stall of a producer %v; sample of failed attempts: %q",
		len(acks), longestGap(acks).Round(time.Millisecond), failureSample(failures))

	got := consumeAll(t, sc.nodes[0], acks)
	verifyNothingLost(t, acks, failures, got)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// With two of three nodes killed, a publish on the survivor fails within
// produce_timeout with UNAVAILABLE/NO_LEADER (or UNKNOWN/OUTCOME_UNKNOWN
// when the leader took it but cannot commit), a message naming the
// partition and what to do, and no result; once one node is back,
// publishing succeeds again. A publish refused with NO_LEADER is never
// stored.
func TestClusterTwoOfThreeDown(t *testing.T) {
	start := time.Now()
	const produceTimeout = 2 * time.Second
	sc := startCluster(t, 3, "  produce_timeout: 2s\n")
	survivor := sc.nodes[2]
	awaitPlaced(t, survivor)
	pub := survivor.publisherClient()
	publish := func(id string) (*spoolv1.PublishResponse, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		t0 := time.Now()
		resp, err := pub.Publish(ctx, &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{{Id: id, Key: []byte("k1"), Payload: []byte(id)}}})
		return resp, time.Since(t0), err
	}
	var acks []ack
	if resp, _, err := publish("before"); err != nil {
		t.Fatalf("publish with all nodes up: %v", err)
	} else {
		r := resp.GetResults()[0]
		acks = append(acks, ack{id: "before", key: "k1", partition: r.GetPartition(), offset: r.GetOffset(), attempts: 1})
	}

	sc.nodes[0].kill() // SIGKILL
	sc.nodes[1].kill() // SIGKILL
	var refused []string
	for i := range 2 { // the first meets the leader (if it was here) still in office
		id := fmt.Sprintf("refused-%d", i)
		resp, took, err := publish(id)
		if err == nil {
			t.Fatalf("publish %s with 2 of 3 nodes down succeeded (%v): a minority acknowledged it", id, resp.GetResults())
		}
		st := status.Convert(err)
		t.Logf("publish with 2 of 3 down failed after %v: code %v, reason %s, message %q", took.Round(time.Millisecond), st.Code(), reason(st), st.Message())
		if resp != nil {
			t.Errorf("a failed publish returned results: %v", resp.GetResults())
		}
		if took > produceTimeout+3*time.Second {
			t.Errorf("the publish failed after %v, want within produce_timeout %v (plus slack)", took, produceTimeout)
		}
		switch st.Code() {
		case codes.Unavailable: // nothing was stored
			refused = append(refused, id)
			if reason(st) != "NO_LEADER" {
				t.Errorf("UNAVAILABLE with reason %q, want NO_LEADER (the SDK reads UNAVAILABLE without a reason as \"sidecar unreachable\"): %s", reason(st), st.Message())
			}
			if !strings.Contains(st.Message(), "start the stopped spoold") {
				t.Errorf("UNAVAILABLE message %q does not say what to do (start the stopped spoold, retry with the same ids)", st.Message())
			}
		case codes.Unknown: // the leader took it and cannot commit
			if reason(st) != "OUTCOME_UNKNOWN" {
				t.Errorf("UNKNOWN with reason %q, want OUTCOME_UNKNOWN: %s", reason(st), st.Message())
			}
			if !strings.Contains(st.Message(), "retry with the same message ids") {
				t.Errorf("OUTCOME_UNKNOWN message %q does not say what to do", st.Message())
			}
		default:
			t.Errorf("publish with 2 of 3 down: code %v reason %q (%s), want UNAVAILABLE/NO_LEADER or UNKNOWN/OUTCOME_UNKNOWN", st.Code(), reason(st), st.Message())
		}
		if !strings.Contains(st.Message(), "orders/") {
			t.Errorf("message %q does not name the partition (orders/N)", st.Message())
		}
	}
	if len(refused) == 0 {
		t.Errorf("no publish was refused (UNAVAILABLE) once the leader was gone")
	}

	sc.nodes[1].start()
	var after string
	eventually(t, 20*time.Second, "a publish succeeds with 2 of 3 nodes up", func() bool {
		after = fmt.Sprintf("after-%d", time.Now().UnixNano())
		resp, _, err := publish(after)
		if err != nil {
			return false
		}
		r := resp.GetResults()[0]
		acks = append(acks, ack{id: after, key: "k1", partition: r.GetPartition(), offset: r.GetOffset(), attempts: 1})
		return true
	})

	got := consumeAll(t, survivor, acks)
	verifyNothingLost(t, acks, nil, got)
	for _, d := range got {
		for _, id := range refused {
			if d.id == id {
				t.Errorf("%s was refused (UNAVAILABLE) but is stored at partition %d offset %d", id, d.partition, d.offset)
			}
		}
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// The admin API describes the cluster: every node reports the same cluster
// id and the three members, and ListTopics names the leader of every
// partition (raft's, the same on every node once elections settle).
func TestClusterAdminShowsLeaders(t *testing.T) {
	sc := startCluster(t, 3, "")
	awaitPlaced(t, sc.nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var clusterID string
	for _, n := range sc.nodes {
		st, err := n.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetClusterId() == "" || st.GetClusterId() == "single-node" || len(st.GetNodes()) != 3 {
			t.Fatalf("ClusterStatus: cluster %q, %d nodes; want a cluster id and 3 nodes", st.GetClusterId(), len(st.GetNodes()))
		}
		if clusterID != "" && st.GetClusterId() != clusterID {
			t.Fatalf("nodes report clusters %q and %q", clusterID, st.GetClusterId())
		}
		clusterID = st.GetClusterId()
	}
	eventually(t, 20*time.Second, "every node names the same leader for every partition", func() bool {
		var want []string
		for i, n := range sc.nodes {
			resp, err := n.adminClient().ListTopics(ctx, &spoolv1.ListTopicsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ti := range resp.GetTopics() {
				for _, p := range ti.GetPartitions() {
					if p.GetLeader() == "" {
						return false
					}
					got = append(got, ti.GetName()+"/"+p.GetLeader())
				}
			}
			if i == 0 {
				want = got
			} else if !slices.Equal(got, want) {
				return false
			}
		}
		return len(want) > 0
	})
}

// TestClusterVersionFinalize: real spoold processes of this release report,
// for every node, the release and the cluster versions it speaks, and the
// cluster at version 1 with version 2 available (finalization pending:
// with cluster.finalize manual a new cluster is born at version 1, not at
// its release's); a scheduled publish is refused until FinalizeClusterVersion
// on any node raises every node to version 2.
func TestClusterVersionFinalize(t *testing.T) {
	sc := startCluster(t, 3, "  finalize: manual\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clusterStatus := func(n *node) *spoolv1.ClusterStatusResponse {
		st, err := n.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, n := range sc.nodes {
		eventually(t, 20*time.Second, "every node's release and cluster versions, a finalization pending", func() bool {
			st := clusterStatus(n)
			for _, ni := range st.GetNodes() {
				if ni.GetReleaseVersion() != buildinfo.Version || ni.GetClusterVersionMin() != 1 || ni.GetClusterVersionMax() != 2 {
					return false
				}
			}
			return len(st.GetNodes()) == 3 && st.GetClusterVersion() == 1 && st.GetClusterVersionAvailable() == 2
		})
	}
	// Scheduled delivery is gated (meta.ScheduledDelivery): a member of
	// 0.1.0 would deliver a scheduled message at once.
	scheduled := func() error {
		_, err := sc.nodes[0].publisherClient().Publish(ctx, &spoolv1.PublishRequest{Topic: "orders",
			Messages: []*spoolv1.PublishMessage{{Payload: []byte("later"), DeliverAfterMs: 60_000}}})
		return err
	}
	if err := scheduled(); status.Code(err) != codes.FailedPrecondition || reason(status.Convert(err)) != "CLUSTER_VERSION" || !strings.Contains(err.Error(), "needs cluster version 2") {
		t.Fatalf("a scheduled publish at cluster version 1: %v; want FAILED_PRECONDITION CLUSTER_VERSION saying it needs cluster version 2", err)
	}
	resp, err := sc.nodes[1].adminClient().FinalizeClusterVersion(ctx, &spoolv1.FinalizeClusterVersionRequest{})
	if err != nil || resp.GetPreviousVersion() != 1 || resp.GetClusterVersion() != 2 {
		t.Fatalf("FinalizeClusterVersion: %v, %v", resp, err)
	}
	for _, n := range sc.nodes {
		eventually(t, 20*time.Second, "every node at cluster version 2", func() bool {
			st := clusterStatus(n)
			return st.GetClusterVersion() == 2 && st.GetClusterVersionAvailable() == 2
		})
	}
	if err := scheduled(); err != nil {
		t.Fatalf("a scheduled publish once finalized: %v", err)
	}
	_, err = sc.nodes[0].adminClient().FinalizeClusterVersion(ctx, &spoolv1.FinalizeClusterVersionRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "nothing to finalize") {
		t.Fatalf("finalizing again: %v", err)
	}
}
