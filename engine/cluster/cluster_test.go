package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/internal/table"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/internal/testport"
)

// testCluster runs engine Nodes as cluster members in this process, over
// the real gRPC transport on 127.0.0.1, with real disks (t.TempDir).
type testCluster struct {
	t     testing.TB
	nodes []*clusterNode
}

type clusterNode struct {
	dir, addr string
	join      []string
	tls       ClusterTLS
	secret    string            // JoinSecret
	client    bool              // StorageOff: storage off
	segBytes  int64             // log segment size; default the log's
	joinWait  time.Duration     // JoinTimeout; default 20 s
	deadAfter time.Duration     // DeadNodeTimeout; default the engine's
	ckEvery   int               // GroupsCheckpointRecords; default the engine's
	expect    int               // BootstrapExpect
	versions  meta.VersionRange // ClusterVersions; zero: this release's
	finalize  time.Duration     // AutoFinalizeAfter; default the engine's
	hooks     table.Hooks       // Hooks
	fs        *log.MemFS        // the node's file system; nil: the real disk
	logs      *logLines         // the node's log lines, if set (else discarded)
	// hold, if set, bounds how far the node applies the controller's log
	// (the next offset it may apply; math.MaxInt64: no bound).
	hold   *atomic.Int64
	n      *Node
	cancel context.CancelFunc
	done   chan error
}

func freeTCPAddr(t testing.TB) string {
	t.Helper()
	// Not a port from listen(":0"): that is an ephemeral one, which the
	// nodes' own outgoing connections may take before the node listens
	// there ("bind: address already in use", once in a few runs of
	// ./engine). See internal/testport.
	addr, err := testport.Free("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// start opens and runs a node (again, after stop, on the same data dir).
func (tc *testCluster) start(cn *clusterNode) {
	t := tc.t
	t.Helper()
	n, err := Open(Config{
		DataDir: cn.dir,
		Log:     log.Options{MaintenanceInterval: time.Hour, SegmentBytes: cn.segBytes, FS: cn.fsys()},
		Logger:  cn.logger(),
		Hooks:   cn.hooks,
		Cluster: ClusterConfig{Listen: cn.addr, Join: cn.join, TickInterval: 20 * time.Millisecond, ProduceTimeout: 5 * time.Second, JoinTimeout: cmp.Or(cn.joinWait, 20*time.Second), TLS: cn.tls, JoinSecret: []byte(cn.secret), StorageOff: cn.client, DeadNodeTimeout: cn.deadAfter, GroupsCheckpointRecords: cn.ckEvery, BootstrapExpect: cn.expect,
			ClusterVersions: cn.versions, AutoFinalizeAfter: cn.finalize},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cn.hold != nil {
		n.asMember().applyBound = cn.hold.Load
	}
	ctx, cancel := context.WithCancel(context.Background())
	cn.n, cn.cancel, cn.done = n, cancel, make(chan error, 1)
	go func() { cn.done <- n.Run(ctx) }()
}

// fsys is the node's file system for log.Options (nil: the real disk).
func (cn *clusterNode) fsys() log.FS {
	if cn.fs == nil {
		return nil
	}
	return cn.fs
}

// logger is the node's: into logs if set, else quietLogger.
func (cn *clusterNode) logger() *slog.Logger {
	if cn.logs == nil {
		return quietLogger()
	}
	return slog.New(cn.logs)
}

// logLines is a slog.Handler that keeps the messages of the lines logged
// at Info and above, with their attributes, for tests that count log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelInfo }

func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}

// WithAttrs and WithGroup: the attributes go into every line (groups are
// not kept apart: tests match on text).
func (l *logLines) WithAttrs(as []slog.Attr) slog.Handler {
	return &logLinesView{l, as}
}
func (l *logLines) WithGroup(string) slog.Handler { return l }

// matching counts the lines containing every one of subs.
// all is a copy of the lines logged so far.
func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func (l *logLines) matching(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}

// logLinesView is a logLines with attributes added (WithAttrs).
type logLinesView struct {
	l     *logLines
	attrs []slog.Attr
}

func (v *logLinesView) Enabled(ctx context.Context, lvl slog.Level) bool {
	return v.l.Enabled(ctx, lvl)
}
func (v *logLinesView) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(v.attrs...)
	return v.l.Handle(ctx, r)
}
func (v *logLinesView) WithAttrs(as []slog.Attr) slog.Handler {
	return &logLinesView{v.l, append(slices.Clone(v.attrs), as...)}
}
func (v *logLinesView) WithGroup(string) slog.Handler { return v }

// stop ends a node's Run and closes it.
func (tc *testCluster) stop(cn *clusterNode) {
	if cn.n == nil {
		return
	}
	cn.cancel()
	if err := <-cn.done; err != nil {
		tc.t.Logf("node at %s stopped with: %v", cn.addr, err)
	}
	_ = cn.n.Close()
	cn.n = nil
}

// newTestCluster bootstraps a cluster of size nodes: the first creates it,
// the others join through it. configure, if set, adjusts node i before it
// starts (TLS files, segment size).
func newTestCluster(t testing.TB, size int, configure ...func(i int, cn *clusterNode)) *testCluster {
	tc := &testCluster{t: t}
	for i := range size {
		cn := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t)}
		for _, f := range configure {
			f(i, cn)
		}
		if i > 0 {
			cn.join = []string{tc.nodes[0].addr}
		}
		tc.nodes = append(tc.nodes, cn)
		tc.start(cn)
	}
	t.Cleanup(func() {
		for _, cn := range tc.nodes {
			tc.stop(cn)
		}
	})
	return tc
}

// produce appends one record and waits for the outcome.
func produce(n *Node, topic string, p int32, value string) (int64, error) {
	type res struct {
		base int64
		err  error
	}
	ch := make(chan res, 1)
	n.Produce(topic, p, []log.Record{{ID: []byte(value), Value: []byte(value)}}, func(base int64, err error) { ch <- res{base, err} })
	r := <-ch
	return r.base, r.err
}

// awaitCond polls cond until it holds or d passes.
func awaitCond(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling a condition of nodes' state (no event to wait on)
	}
}

// readAll reads a partition from offset 0 to its committed end on n.
func readAll(n *Node, topic string, p int32) ([]log.Record, error) {
	_, end, err := n.Offsets(topic, p)
	if err != nil {
		return nil, err
	}
	var out []log.Record
	for off := int64(0); off < end; {
		recs, err := n.Fetch(topic, p, off, 1<<20, nil)
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			return nil, fmt.Errorf("fetch at %d returned nothing below the end %d", off, end)
		}
		out = append(out, recs...)
		off = recs[len(recs)-1].Offset + 1
	}
	return out, nil
}

// Three nodes form a cluster through --join, a topic created on one is
// placed on all three, a record published on any node is committed once
// and readable at the same offset on every node; with the leader of a
// partition stopped, publishing goes on through the survivors, and nothing
// acknowledged is lost.
func TestClusterJoinReplicateFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	acked := map[int32]map[int64]string{0: {}, 1: {}}
	var mu sync.Mutex
	publish := func(from *Node, p int32, v string) error {
		base, err := produce(from, "orders", p, v)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := acked[p][base]; dup {
			t.Fatalf("offset %d of partition %d acknowledged twice: %q and %q", base, p, prev, v)
		}
		acked[p][base] = v
		return nil
	}
	awaitCond(t, 20*time.Second, "a first publish", func() error { return publish(tc.nodes[0].n, 0, "first") })
	for i, cn := range tc.nodes {
		for p := range int32(2) {
			for k := range 5 {
				v := fmt.Sprintf("n%d-p%d-%d", i, p, k)
				if err := publish(cn.n, p, v); err != nil {
					t.Fatalf("publish %s: %v", v, err)
				}
			}
		}
	}
	checkReplicas := func(live []*clusterNode) {
		t.Helper()
		for p := range int32(2) {
			awaitCond(t, 10*time.Second, "every acknowledged record on every live node", func() error {
				for _, cn := range live {
					recs, err := readAll(cn.n, "orders", p)
					if err != nil {
						return err
					}
					got := map[int64]string{}
					for _, r := range recs {
						got[r.Offset] = string(r.Value)
					}
					mu.Lock()
					for off, v := range acked[p] {
						if got[off] != v {
							mu.Unlock()
							return fmt.Errorf("node %s partition %d offset %d: %q, acknowledged %q", cn.addr, p, off, got[off], v)
						}
					}
					mu.Unlock()
				}
				return nil
			})
		}
	}
	checkReplicas(tc.nodes)

	// Stop the leader of partition 0; the others elect and go on.
	var leader *clusterNode
	for _, cn := range tc.nodes {
		part, _ := cn.n.partition("orders", 0)
		if st, ok := cn.n.asMember().host.Status(part.X.raftGroup); ok && st.IsLeader {
			leader = cn
		}
	}
	if leader == nil {
		t.Fatal("no node leads partition 0")
	}
	tc.stop(leader)
	var live []*clusterNode
	for _, cn := range tc.nodes {
		if cn != leader {
			live = append(live, cn)
		}
	}
	for k := range 10 {
		v := fmt.Sprintf("after-%d", k)
		if err := publish(live[k%2].n, 0, v); err != nil {
			t.Fatalf("publish %s with the leader down: %v", v, err)
		}
	}
	checkReplicas(live)

	// The old leader comes back and catches up.
	tc.start(leader)
	checkReplicas(tc.nodes)
}

// With two of three nodes down, a publish fails with ErrNoLeader after
// ProduceTimeout, saying why; nothing is acknowledged.
func TestClusterNoQuorumRefuses(t *testing.T) {
	tc := newTestCluster(t, 3)
	if err := tc.nodes[2].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[2].n, "orders", 0, "x"); return err })
	tc.stop(tc.nodes[0])
	tc.stop(tc.nodes[1])
	_, err := produce(tc.nodes[2].n, "orders", 0, "y")
	if !errors.Is(err, engine.ErrNoLeader) && !errors.Is(err, engine.ErrOutcomeUnknown) {
		t.Fatalf("publish with 2 of 3 nodes down: %v, want ErrNoLeader (or ErrOutcomeUnknown)", err)
	}
	t.Logf("the error a user sees: %v", err)
}

// A node with storage off (StorageOff) holds no replicas and is not a
// member: it learns the cluster from a member, creates topics through the
// controller, publishes through the leaders and reads from the replicas,
// and its watchers hear of records committed elsewhere.
func TestClusterClientNode(t *testing.T) {
	tc := newTestCluster(t, 3)
	client := &clusterNode{dir: t.TempDir(), join: []string{tc.nodes[1].addr}, client: true}
	tc.nodes = append(tc.nodes, client) // stopped with the others
	tc.start(client)
	if err := client.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	if st, _ := client.n.ClusterStatus(); st.NodeID != 0 || len(st.Replicas) != 0 || len(st.Members) != 3 {
		t.Fatalf("client status: node %d, %d replicas, %d members; want no id, no replicas, 3 members", st.NodeID, len(st.Replicas), len(st.Members))
	}
	watch := make(chan struct{}, 1)
	cancel, err := client.n.Watch([]string{"orders"}, watch)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	var base int64
	awaitCond(t, 20*time.Second, "a publish through the storage-off node", func() (err error) {
		base, err = produce(client.n, "orders", 1, "from-client")
		return err
	})
	if _, err := produce(tc.nodes[0].n, "orders", 1, "from-member"); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "both records read through the storage-off node", func() error {
		recs, err := readAll(client.n, "orders", 1)
		if err != nil {
			return err
		}
		if len(recs) != 2 || recs[0].Offset != base || string(recs[0].Value) != "from-client" || string(recs[1].Value) != "from-member" {
			return fmt.Errorf("read %d records", len(recs))
		}
		return nil
	})
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's watcher was never signalled of records committed on the members")
	}
	if err := client.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 3}); !errors.As(err, new(*engine.TopicConflictError)) {
		t.Fatalf("EnsureTopic with other partitions through the client: %v, want a TopicConflictError", err)
	}
}

// A batch sent again with the same producer id and sequence (its first
// answer lost) is stored once: the leader answers it with the first
// copy's offset — also a new leader, after the one that stored it is
// stopped, and also when the copies arrive together.
func TestClusterProducerDedupe(t *testing.T) {
	tc := newTestCluster(t, 3)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "first"); return err })
	awaitCond(t, 20*time.Second, "the topic placed on every node", func() error {
		for _, cn := range tc.nodes {
			if part, err := cn.n.partition("orders", 0); err != nil || part.X.raftGroup == 0 {
				return fmt.Errorf("not on node at %s yet", cn.addr)
			}
		}
		return nil
	})
	batch := func(seq int32, v string) []byte {
		return log.EncodeRecords(nil, log.BatchHeader{ProducerID: 42, BaseSequence: seq}, []log.Record{{ID: []byte(v), Value: []byte(v)}}, time.Now().UnixMilli())
	}
	send := func(cn *clusterNode, data []byte) int64 { t.Helper(); return sendBatch(t, cn, "orders", 0, data) }
	count := func(cn *clusterNode, v string) int {
		t.Helper()
		recs, err := readAll(cn.n, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range recs {
			if string(r.Value) == v {
				n++
			}
		}
		return n
	}
	leaderOf := func() *clusterNode {
		for _, cn := range tc.nodes {
			if cn.n == nil {
				continue
			}
			part, err := cn.n.partition("orders", 0)
			if err != nil {
				continue // restarted, not caught up with the controller yet
			}
			if st, ok := cn.n.asMember().host.Status(part.X.raftGroup); ok && st.IsLeader {
				return cn
			}
		}
		return nil
	}

	b1 := send(tc.nodes[1], batch(7, "seven"))
	if again := send(tc.nodes[2], batch(7, "seven")); again != b1 {
		t.Fatalf("the resent batch got offset %d, the first copy %d", again, b1)
	}
	// Sent together: one proposal, both answered with it.
	ch := make(chan int64, 2)
	for _, cn := range tc.nodes[1:] {
		go func() { ch <- send(cn, batch(8, "eight")) }()
	}
	b8 := <-ch
	if y := <-ch; b8 != y {
		t.Fatalf("two copies sent together got offsets %d and %d", b8, y)
	}
	// A new leader knows what the old one stored.
	old := leaderOf()
	if old == nil {
		t.Fatal("no leader")
	}
	tc.stop(old)
	var survivor *clusterNode
	for _, cn := range tc.nodes {
		if cn.n != nil {
			survivor = cn
		}
	}
	if again := send(survivor, batch(8, "eight")); again != b8 {
		t.Fatalf("resent to the new leader: offset %d, the first copy %d", again, b8)
	}
	// An older batch than the producer's last is a stray copy: refused.
	part, _ := survivor.n.partition("orders", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := survivor.n.produceAtLeader(ctx, part.X.raftGroup, "orders", 0, part.X.replicas(), batch(7, "seven"), engine.AcksAll); err == nil || !strings.Contains(err.Error(), "older than its last") {
		t.Fatalf("a stray copy of an older batch: %v, want it refused", err)
	}
	if b9 := send(survivor, batch(9, "nine")); b9 <= b8 {
		t.Fatalf("a new batch got offset %d, not after %d", b9, b8)
	}
	// Every node restarts after an election that saved a commit index past
	// the batch (so the replicas do not apply it again): the tables are
	// rebuilt from the logs' tails.
	tc.start(old)
	b10 := send(survivor, batch(10, "ten"))
	awaitCond(t, 10*time.Second, "every replica applied the batch", func() error {
		for _, cn := range tc.nodes {
			part, err := cn.n.partition("orders", 0)
			if err != nil {
				return err
			}
			if st, ok := cn.n.asMember().host.Status(part.X.raftGroup); !ok || st.CommittedEnd <= b10 {
				return fmt.Errorf("node at %s: committed end %d", cn.addr, st.CommittedEnd)
			}
		}
		return nil
	})
	if l := leaderOf(); l != nil {
		tc.stop(l)
	}
	for _, cn := range tc.nodes {
		if cn.n != nil {
			if _, err := produce(cn.n, "orders", 0, "after-election"); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	for _, cn := range tc.nodes {
		tc.stop(cn)
	}
	for _, cn := range tc.nodes {
		tc.start(cn)
	}
	awaitCond(t, 20*time.Second, "the topic back on a restarted node", func() error {
		_, err := tc.nodes[0].n.partition("orders", 0)
		return err
	})
	if again := send(tc.nodes[0], batch(10, "ten")); again != b10 {
		t.Fatalf("resent after every node restarted: offset %d, the first copy %d", again, b10)
	}
	survivor = tc.nodes[0]
	awaitCond(t, 10*time.Second, "each batch stored once", func() error {
		for v, want := range map[string]int{"seven": 1, "eight": 1, "nine": 1, "ten": 1} {
			if got := count(survivor, v); got != want {
				return fmt.Errorf("%q stored %d times", v, got)
			}
		}
		return nil
	})
}

// Retention of a replicated partition gives up the same records on every
// replica (the leader proposes the log start); what is above it stays
// readable at the same offsets; a replica that was down while the others
// gave up its next entries catches up (from a snapshot) when it returns.
func TestClusterRetention(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, cn *clusterNode) { cn.segBytes = 16 << 10 })
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1, RetentionBytes: 64 << 10}); err != nil {
			t.Fatal(err)
		}
	}
	value := strings.Repeat("x", 1000)
	publishN := func(from *Node, n int) {
		t.Helper()
		for i := range n {
			if _, err := produce(from, "orders", 0, fmt.Sprintf("%s-%d", value, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	awaitCond(t, 20*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "first"); return err })
	down := tc.nodes[2]
	tc.stop(down)
	publishN(tc.nodes[0].n, 300) // ~300 KiB: well past 64 KiB of retention
	live := tc.nodes[:2]
	awaitCond(t, 30*time.Second, "the same log start on the live replicas, above 0", func() error {
		var starts []int64
		for _, cn := range live {
			start, _, err := cn.n.Offsets("orders", 0)
			if err != nil {
				return err
			}
			starts = append(starts, start)
		}
		if starts[0] == 0 || starts[0] != starts[1] {
			return fmt.Errorf("log starts %v", starts)
		}
		return nil
	})
	tc.start(down)
	publishN(tc.nodes[0].n, 5)
	awaitCond(t, 30*time.Second, "the returning replica caught up, same records above the log start", func() error {
		var ref []log.Record
		for i, cn := range tc.nodes {
			start, end, err := cn.n.Offsets("orders", 0)
			if err != nil {
				return err
			}
			if start == 0 {
				return fmt.Errorf("node %d: log start still 0", i)
			}
			var recs []log.Record
			for off := start; off < end; {
				got, err := cn.n.Fetch("orders", 0, off, 1<<20, nil)
				if err != nil {
					return fmt.Errorf("node %d: fetch at %d: %w", i, off, err)
				}
				if len(got) == 0 {
					return fmt.Errorf("node %d: nothing at %d below %d", i, off, end)
				}
				recs = append(recs, got...)
				off = got[len(got)-1].Offset + 1
			}
			if i == 0 {
				ref = recs
				continue
			}
			tail := min(len(ref), len(recs))
			if tail == 0 || recs[len(recs)-1].Offset != ref[len(ref)-1].Offset {
				return fmt.Errorf("node %d ends at another offset", i)
			}
			for k := 1; k <= tail; k++ {
				a, b := ref[len(ref)-k], recs[len(recs)-k]
				if a.Offset != b.Offset || string(a.Value) != string(b.Value) {
					return fmt.Errorf("node %d differs at offset %d", i, a.Offset)
				}
			}
		}
		return nil
	})
}

// Leadership returns to each partition's preferred leader (the first
// replica placement chose) once it has caught up after a restart, so that
// a restarted node does not leave another leading everything.
func TestClusterLeadershipRebalances(t *testing.T) {
	tc := newTestCluster(t, 3)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	preferredLead := func() error {
		for p := range int32(3) {
			var leaders []uint64
			var preferred uint64
			for _, cn := range tc.nodes {
				part, err := cn.n.partition("orders", p)
				if err != nil || part.X.raftGroup == 0 {
					return fmt.Errorf("partition %d not placed on %s", p, cn.addr)
				}
				preferred = part.X.replicas()[0]
				if st, ok := cn.n.asMember().host.Status(part.X.raftGroup); ok && st.IsLeader {
					leaders = append(leaders, cn.n.id.NodeID)
				}
			}
			if len(leaders) != 1 || leaders[0] != preferred {
				return fmt.Errorf("partition %d led by %v, preferred %d", p, leaders, preferred)
			}
		}
		return nil
	}
	awaitCond(t, 20*time.Second, "every partition led by its preferred leader", preferredLead)
	for p := range int32(3) {
		if _, err := produce(tc.nodes[0].n, "orders", p, "x"); err != nil {
			t.Fatal(err)
		}
	}
	// The preferred leader of some partition goes away and comes back.
	victim := tc.nodes[1]
	tc.stop(victim)
	for p := range int32(3) {
		awaitCond(t, 20*time.Second, "publishing with a node down", func() error { _, err := produce(tc.nodes[0].n, "orders", p, "y"); return err })
	}
	tc.start(victim)
	awaitCond(t, 30*time.Second, "leadership back with the preferred leaders", preferredLead)
}

// A replica that installs a snapshot (it was down while the others gave
// up the entries it lacked) learns the producers' last batches from it: as
// the partition's leader it answers a resend of a batch stored before the
// snapshot with the first copy's offset instead of storing it twice.
func TestClusterProducerTableInSnapshot(t *testing.T) {
	tc := newTestCluster(t, 3, func(_ int, cn *clusterNode) { cn.segBytes = 16 << 10 })
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1, RetentionBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "first"); return err })
	byID := map[uint64]*clusterNode{}
	awaitCond(t, 20*time.Second, "the topic placed on every node", func() error {
		for _, cn := range tc.nodes {
			cs, _ := cn.n.ClusterStatus()
			byID[cs.NodeID] = cn
			if part, err := cn.n.partition("orders", 0); err != nil || part.X.raftGroup == 0 {
				return fmt.Errorf("not on node at %s yet", cn.addr)
			}
		}
		return nil
	})
	part, _ := tc.nodes[0].n.partition("orders", 0)
	reps := part.X.replicas()
	preferred, down := byID[reps[0]], byID[reps[2]]
	batch := log.EncodeRecords(nil, log.BatchHeader{ProducerID: 42, BaseSequence: 5}, []log.Record{{ID: []byte("p"), Value: []byte("p")}}, time.Now().UnixMilli())
	send := func(cn *clusterNode) int64 { t.Helper(); return sendBatch(t, cn, "orders", 0, batch) }

	tc.stop(down)
	first := send(preferred)
	value := strings.Repeat("x", 1000)
	for i := range 300 { // ~300 KiB: well past 64 KiB of retention
		if _, err := produce(preferred.n, "orders", 0, fmt.Sprintf("%s-%d", value, i)); err != nil {
			t.Fatal(err)
		}
	}
	awaitCond(t, 30*time.Second, "the live replicas' log past the batch", func() error {
		for id, cn := range byID {
			if cn == down {
				continue
			}
			if start, _, err := cn.n.Offsets("orders", 0); err != nil || start <= first {
				return fmt.Errorf("node %d: log start %d (%v), the batch at %d", id, start, err, first)
			}
		}
		return nil
	})
	tc.start(down)
	awaitCond(t, 30*time.Second, "the returning replica caught up from a snapshot", func() error {
		start, end, err := down.n.Offsets("orders", 0)
		if err != nil {
			return err
		}
		_, want, _ := preferred.n.Offsets("orders", 0)
		if start <= first || end != want {
			return fmt.Errorf("offsets [%d, %d), want past %d up to %d", start, end, first, want)
		}
		return nil
	})
	// It leads: the preferred leader is stopped (nothing hands the
	// leadership back) and the other replica hands it over. The resend is
	// answered by it only if the leadership stays put meanwhile (a busy
	// machine may hold an election): the same batch is sent again until it
	// does, which a deduplicating leader answers with the first offset every
	// time.
	tc.stop(preferred)
	for attempt := 1; ; attempt++ {
		var term uint64
		awaitCond(t, 30*time.Second, "the returning replica leading", func() error {
			p, err := down.n.partition("orders", 0)
			if err != nil {
				return err
			}
			st, _ := down.n.asMember().host.Status(p.X.raftGroup)
			if st.IsLeader {
				term = st.Term
				return nil
			}
			if ld := tc.leaderOf("orders", 0); ld != nil {
				_ = ld.n.asMember().host.TransferLeadership(p.X.raftGroup, reps[2])
			}
			return fmt.Errorf("leader %d", st.Leader)
		})
		if again := send(down); again != first {
			t.Fatalf("the batch resent to a leader that installed a snapshot: offset %d, the first copy %d", again, first)
		}
		st, _ := down.n.asMember().host.Status(part.X.raftGroup)
		if st.IsLeader && st.Term == term {
			return
		}
		if attempt == 5 {
			t.Fatalf("the leadership moved while the resend was answered, 5 times (last: term %d, leader %d): the test proves nothing", st.Term, st.Leader)
		}
		t.Logf("the leadership moved while the resend was answered (term %d, leader %d); again", st.Term, st.Leader)
	}
}

// sendBatch sends an encoded batch (with its producer fields) through cn as
// its forwarder would, and returns the base offset its answer gives.
func sendBatch(t *testing.T, cn *clusterNode, topic string, p int32, data []byte) int64 {
	t.Helper()
	part, err := cn.n.partition(topic, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base, err := cn.n.produceAtLeader(ctx, part.X.raftGroup, topic, p, part.X.replicas(), data, engine.AcksAll)
	if err != nil {
		t.Fatal(err)
	}
	return base
}
