package raft

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"pgregory.net/rapid"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
)

// retained makes the cluster's replicas keep about keepBytes of log,
// checking every few ticks.
func retained(keepBytes int64, lagTicks int) func(*ReplicaConfig) {
	return func(rc *ReplicaConfig) {
		rc.RetentionBytes = keepBytes
		rc.RetentionCheckTicks = 3
		rc.RetentionLagTicks = lagTicks
	}
}

// checkRetained checks what retention promises once the cluster has
// converged: every replica gave up the same records (one start offset,
// past 0), and every committed record from there on is readable on every
// replica at its offset with its value.
func (c *wcluster) checkRetained() {
	c.t.Helper()
	start := c.nodes[0].r.Partition().StartOffset()
	for _, n := range c.nodes {
		p := n.r.Partition()
		if p.StartOffset() != start {
			c.t.Fatalf("node %d starts at offset %d, node 1 at %d", n.id, p.StartOffset(), start)
		}
		if n.r.Snapshot().Index == 0 || p.FirstIndex() > n.r.Snapshot().Index+1 {
			c.t.Fatalf("node %d: snapshot at %d, log from %d", n.id, n.r.Snapshot().Index, p.FirstIndex())
		}
		end := n.r.CommittedEnd()
		for i, v := range readRecords(c.t, p, start, end) {
			off := start + int64(i)
			if want, ok := c.committed[off]; ok && want != v {
				c.t.Fatalf("node %d: offset %d holds %q, committed as %q", n.id, off, v, want)
			}
		}
		if end != int64(c.nextVal) {
			c.t.Fatalf("node %d: committed end %d, %d records proposed", n.id, end, c.nextVal)
		}
	}
	if start == 0 {
		c.t.Fatalf("retention gave up nothing")
	}
}

// TestReplicaRetentionSamePrefix: with retention by size, the leader's
// log-start commands make every replica give up the same records, keep
// every committed record after them at the same offset, and save a
// snapshot at the entry before the first one kept; a restart opens with it.
func TestReplicaRetentionSamePrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newWCluster(t, ctx, 3, slog.Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 256}, false)
	c.tweak = retained(6<<10, 1000)
	for _, n := range c.nodes { // reopen with retention
		c.stop(n)
		c.start(n)
	}
	defer c.close()
	l := c.waitLeader(50)
	for i := range 150 {
		if err := c.propose(l, 1+i%4); err != nil {
			t.Fatalf("propose: %v", err)
		}
		if i%5 == 0 {
			c.round()
		}
	}
	c.converge(100)
	for range 10 { // the last log-start commands commit and apply
		c.round()
	}
	c.converge(100)
	c.checkIdentical()
	c.checkRetained()
	for _, n := range c.nodes {
		c.stop(n)
		c.start(n)
	}
	c.converge(100)
	c.checkRetained()
	c.checkIdentical()
}

// TestReplicaSnapshotCatchUp: a follower is stopped while the others
// compact past its log; restarted, it gets a snapshot (the leader no longer
// holds the entries it needs), installs it, and then every committed entry
// after it, so that it serves the same records at the same offsets from
// the snapshot's offset on. The application's state in the snapshot
// (SnapshotApp of the replica that took it) reaches the follower's
// OnSnapshot at the install and again when it reopens from the snapshot.
func TestReplicaSnapshotCatchUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newWCluster(t, ctx, 5, slog.Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 256}, false)
	got := map[uint64][]string{} // per node, the App of each OnSnapshot call
	c.tweak = func(rc *ReplicaConfig) {
		retained(6<<10, 1000)(rc)
		id := rc.Group.ID
		rc.SnapshotApp = func() []byte { return fmt.Appendf(nil, "state of node %d", id) }
		rc.OnSnapshot = func(app []byte) { got[id] = append(got[id], string(app)) }
	}
	for _, n := range c.nodes {
		c.stop(n)
		c.start(n)
	}
	defer c.close()
	l := c.waitLeader(50)
	for range 5 {
		if err := c.propose(l, 2); err != nil {
			t.Fatal(err)
		}
		c.round()
	}
	c.converge(100)
	var down *wnode
	for _, n := range c.nodes {
		if n != l {
			down = n
			break
		}
	}
	c.stop(down)
	downLast := down.r.Partition().LastIndex()
	for i := 0; l.r.Partition().FirstIndex() <= downLast+1 || i < 200; i++ {
		if i > 2000 {
			t.Fatalf("the leader's log still starts at %d, the stopped follower's ends at %d", l.r.Partition().FirstIndex(), downLast)
		}
		if err := c.propose(l, 1+i%4); err != nil {
			t.Fatalf("propose: %v", err)
		}
		if i%5 == 0 {
			c.round()
		}
	}
	for range 20 {
		c.round()
	}
	before := c.snapshots
	c.start(down)
	c.converge(200)
	for range 10 {
		c.round()
	}
	if c.snapshots == before {
		t.Fatal("the restarted follower caught up without a snapshot")
	}
	if down.r.Snapshot().Index <= downLast {
		t.Fatalf("the follower's snapshot is at %d, its log ended at %d", down.r.Snapshot().Index, downLast)
	}
	want := fmt.Sprintf("state of node %d", l.id)
	if g := got[down.id]; len(g) != 1 || g[0] != want {
		t.Fatalf("the follower's OnSnapshot calls at the install: %q, want [%q] (the leader's state)", g, want)
	}
	c.stop(down)
	c.start(down)
	if g := got[down.id]; len(g) != 2 || g[1] != want {
		t.Fatalf("the follower's OnSnapshot calls after reopening: %q, want the install's state again", g)
	}
	c.converge(200)
	// More after the install, and a restart of the follower from it.
	for range 20 {
		if err := c.propose(l, 3); err != nil {
			t.Fatal(err)
		}
		c.round()
	}
	c.stop(down)
	c.start(down)
	// It has taken snapshots of its own since (log-start commands), with
	// its own state.
	if g := got[down.id]; len(g) != 3 || g[2] != fmt.Sprintf("state of node %d", down.id) {
		t.Fatalf("the follower's OnSnapshot calls after reopening again: %q, want its own state last", g)
	}
	c.converge(200)
	for range 10 {
		c.round()
	}
	c.converge(100)
	c.checkIdentical()
	c.checkRetained()
}

// TestReplicaRetentionRandomFaults is TestReplicaRandomFaults with
// retention on: the replicas compact and lagging ones install snapshots
// while nodes lose power at random points (disk faults on any of the next
// file-system operations included, so inside a compaction or an install),
// messages are lost, duplicated and reordered, and the network partitions.
// Every record seen committed stays at its offset on every replica that
// still holds it, the replicas give up the same prefix, and after healing
// every replica catches up. Nodes whose visits stall make messages pile
// up and be stepped together before one Ready, as in a busy Host: a MsgSnap
// and the next MsgApp then reach one Append (the snapshot, the entries
// after it and a commit covering them); how many did is logged (-v), and a
// full run must reach it. Replay a failure as TestReplicaRandomFaults says.
func TestReplicaRetentionRandomFaults(t *testing.T) {
	var cv coverage
	rapid.Check(t, func(rt *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newWCluster(rt, ctx, rapid.Uint64().Draw(rt, "netSeed"), slog.Options{SegmentBytes: 1 << 10, IndexIntervalBytes: 256}, true)
		c.tweak = retained(2<<10, rapid.IntRange(5, 50).Draw(rt, "lagTicks"))
		for _, n := range c.nodes {
			c.stop(n)
			c.start(n)
		}
		defer c.close()
		c.setBusy(rapid.Float64Range(0, 0.5).Draw(rt, "busy"), rapid.Float64Range(0, 0.5).Draw(rt, "overlap"), rapid.Uint64().Draw(rt, "visitSeed"))
		c.elect(c.nodes[0])
		steps := rapid.IntRange(50, 250).Draw(rt, "steps")
		for range steps {
			switch a := rapid.IntRange(0, 99).Draw(rt, "action"); {
			case a < 50:
				l := c.leader()
				for range rapid.IntRange(1, 4).Draw(rt, "batches") {
					if k := rapid.IntRange(1, 8).Draw(rt, "records"); l != nil {
						_ = c.propose(l, k)
					}
				}
			case a < 55:
				c.crash(c.nodes[rapid.IntRange(0, 2).Draw(rt, "crash")])
			case a < 62:
				n, ops := c.nodes[rapid.IntRange(0, 2).Draw(rt, "faulty")], rapid.IntRange(1, 40).Draw(rt, "faultAfterOps")
				if n.up {
					c.armFault(n, ops)
				}
			case a < 70:
				for _, n := range c.nodes {
					if !n.up {
						c.start(n)
						break
					}
				}
			case a < 75:
				c.isolate(uint64(rapid.IntRange(1, 3).Draw(rt, "isolate")))
			case a < 82:
				c.net.Heal()
			case a < 86:
				c.elect(c.nodes[rapid.IntRange(0, 2).Draw(rt, "candidate")])
			case a < 90:
				c.net.SetFaults(transport.Faults{
					Drop:      rapid.Float64Range(0, 0.3).Draw(rt, "drop"),
					Duplicate: rapid.Float64Range(0, 0.2).Draw(rt, "dup"),
					Jitter:    time.Duration(rapid.IntRange(0, 30).Draw(rt, "jitterMs")) * time.Millisecond,
				})
			case a < 95:
				c.nodes[rapid.IntRange(0, 2).Draw(rt, "stall")].stall = rapid.IntRange(1, 30).Draw(rt, "stallVisits")
			case a < 100:
				c.returnBehind(rt)
			}
			c.round()
			c.checkIdentical()
		}
		cv.add(c, len(c.committed) > 0)
		c.heal(rt)
		c.converge(400)
		if err := c.propose(c.leader(), 1); err != nil {
			rt.Fatalf("propose after healing: %v", err)
		}
		c.converge(200)
		c.checkIdentical()
		start := c.nodes[0].r.Partition().StartOffset()
		for _, n := range c.nodes {
			if n.r.CommittedEnd() != c.nodes[0].r.CommittedEnd() {
				rt.Fatalf("node %d: committed end %d, node 1's %d", n.id, n.r.CommittedEnd(), c.nodes[0].r.CommittedEnd())
			}
			start = max(start, n.r.Partition().StartOffset())
		}
		for off := range c.committed {
			if off >= c.nodes[0].r.CommittedEnd() {
				rt.Fatalf("offset %d was committed and is past the converged committed end %d", off, c.nodes[0].r.CommittedEnd())
			}
		}
		for off := start; off < c.nodes[0].r.CommittedEnd(); off++ {
			if _, ok := c.committed[off]; !ok {
				rt.Fatalf("offset %d is committed on every replica but was never seen committed", off)
			}
		}
	})
	cv.check(t, 0.8)
	if cv.cases >= minCoverageCases && cv.casesWithEnts*10 < cv.cases {
		t.Errorf("only %d of %d cases installed a snapshot with the entries after it in one Ready, want at least 10%%", cv.casesWithEnts, cv.cases)
	}
}

// returnBehind takes a follower away or brings one back behind the
// leader's log start. With every node up, a drawn follower loses power.
// Otherwise the leader goes on without the first node down (batches
// proposed, rounds run) until its snapshot is past what that node held,
// then the node is started (its links healed). Half the time the leader's
// snapshot and the append after it are then put in its inbox together, as
// a busy Host gets them when a heartbeat response crossed the snapshot
// (the transport reports a snapshot done once queued; the leader then
// probes from its index), and half of those times a disk fault is armed
// for the visit that installs; otherwise raft sends its snapshot itself.
func (c *wcluster) returnBehind(rt *rapid.T) {
	away, together := rapid.IntRange(0, 2).Draw(rt, "away"), rapid.Bool().Draw(rt, "together")
	fault, ops := rapid.Bool().Draw(rt, "faultInInstall"), rapid.IntRange(1, 60).Draw(rt, "installFaultAfterOps")
	var f *wnode
	for _, n := range c.nodes {
		if !n.up && f == nil {
			f = n
		}
	}
	if f == nil {
		if f = c.nodes[away]; f != c.leader() {
			c.crash(f)
		}
		return
	}
	l := c.leader()
	for i := 0; i < 50 && l != nil && l.r.Snapshot().Index <= f.downAt; i++ {
		_ = c.propose(l, 8)
		c.round()
		l = c.leader()
	}
	c.start(f)
	c.net.Heal()
	if l == nil || l == f || f.r.Partition().LastIndex() >= l.r.Snapshot().Index || !together {
		return
	}
	f.inbox = append(f.inbox, snapThenApp(rt, l, f)...)
	if fault {
		c.armFault(f, ops)
	}
}

// lagBehind builds the cluster of TestReplicaSnapshotCatchUp up to the
// point where the stopped follower needs a snapshot, and returns it with
// the follower and the index its log ends at.
func lagBehind(t *testing.T, ctx context.Context, seed uint64) (*wcluster, *wnode, uint64) {
	c := newWCluster(t, ctx, seed, slog.Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 256}, false)
	c.tweak = retained(6<<10, 1000)
	for _, n := range c.nodes {
		c.stop(n)
		c.start(n)
	}
	l := c.waitLeader(50)
	for range 5 {
		if err := c.propose(l, 2); err != nil {
			t.Fatal(err)
		}
		c.round()
	}
	c.converge(100)
	down := c.nodes[0]
	if down == l {
		down = c.nodes[1]
	}
	c.stop(down)
	last := down.r.Partition().LastIndex()
	for i := 0; l.r.Partition().FirstIndex() <= last+1 || i < 100; i++ {
		if i > 2000 {
			t.Fatalf("the leader's log still starts at %d", l.r.Partition().FirstIndex())
		}
		if err := c.propose(l, 1+i%4); err != nil {
			t.Fatalf("propose: %v", err)
		}
		if i%5 == 0 {
			c.round()
		}
	}
	for range 20 {
		c.round()
	}
	return c, down, last
}

// TestReplicaInstallCrashAtEveryStep: the follower that needs a snapshot
// loses power at its k-th file-system change after it restarts, for every
// k until the install and the catch-up complete without the fault firing:
// restarted again, it recovers (OpenReplica finishes the install or starts
// over) and converges to the same records at the same offsets.
func TestReplicaInstallCrashAtEveryStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for k := 1; ; k++ {
		c, down, last := lagBehind(t, ctx, 7)
		c.start(down)
		c.armFault(down, k)
		for i := 0; i < 60 && down.up; i++ {
			c.round()
		}
		fired := !down.up
		if down.faulty {
			c.crash(down)
		}
		if !down.up {
			c.start(down)
		}
		c.converge(200)
		for range 10 {
			c.round()
		}
		c.converge(100)
		c.checkIdentical()
		c.checkRetained()
		if down.r.Snapshot().Index <= last {
			t.Fatalf("fault after %d changes: the follower's snapshot is at %d, its log ended at %d", k, down.r.Snapshot().Index, last)
		}
		c.close()
		if !fired {
			if k < 4 {
				t.Fatalf("the install took only %d file-system changes", k)
			}
			t.Logf("the follower's restart, install and catch-up take %d file-system changes", k-1)
			return
		}
	}
}

// TestReplicaRetainFrom: SetRetainFrom makes the leader give up the records
// before an offset on every replica, at the entry boundary the offset
// starts; an offset inside an entry gives up nothing, and a lower offset
// later never moves the start back.
func TestReplicaRetainFrom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newWCluster(t, ctx, 3, slog.Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 256}, false)
	c.tweak = func(rc *ReplicaConfig) { rc.RetentionCheckTicks = 3 }
	for _, n := range c.nodes {
		c.stop(n)
		c.start(n)
	}
	defer c.close()
	l := c.waitLeader(50)
	for i := range 40 { // entries of 3 records: offsets 0, 3, 6, ...
		if err := c.propose(l, 3); err != nil {
			t.Fatalf("propose: %v", err)
		}
		if i%5 == 0 {
			c.round()
		}
	}
	c.converge(100)
	starts := func() []int64 {
		var out []int64
		for _, n := range c.nodes {
			out = append(out, n.r.Partition().StartOffset())
		}
		return out
	}
	for _, n := range c.nodes {
		n.r.SetRetainFrom(61) // inside the entry holding 60-62
	}
	for range 20 {
		c.round()
	}
	c.converge(100)
	if s := starts(); s[0] != 0 || s[1] != 0 || s[2] != 0 {
		t.Fatalf("an offset inside an entry moved the log starts to %v", s)
	}
	for _, n := range c.nodes {
		n.r.retainFrom = 0 // SetRetainFrom only moves up; start over
		n.r.SetRetainFrom(60)
	}
	for range 20 {
		c.round()
	}
	c.converge(100)
	for _, n := range c.nodes {
		if s := n.r.Partition().StartOffset(); s != 60 {
			t.Fatalf("node %d: log starts at %d, want 60 (all: %v)", n.id, s, starts())
		}
		n.r.SetRetainFrom(30)
	}
	for range 20 {
		c.round()
	}
	c.converge(100)
	c.checkIdentical()
	c.checkRetained()
	for _, n := range c.nodes {
		c.stop(n)
		c.start(n)
	}
	c.converge(100)
	c.checkRetained()
	if s := starts(); s[0] != 60 || s[1] != 60 || s[2] != 60 {
		t.Fatalf("after a restart the log starts at %v, want 60 everywhere", s)
	}
}

// TestReplicaInstallWithEntriesCrashAtEveryStep: a follower steps the
// leader's MsgSnap and the MsgApp that follows it before one Ready, as a
// Host visit does when both wait in the mailbox (the transport reports a
// snapshot done once the receiver queued it, and the leader then probes
// from the snapshot's index). Raft hands out one Append with the snapshot,
// the entries after it and a HardState whose commit covers them. For every
// k until the whole Append is written without the fault firing, the
// follower loses power at its k-th file-system change (files cut back to
// what was fsynced): restarted, it must open and converge. Saving that
// commit before the entries were durable left a commit index past the end
// of the log, and the replica refused to open.
func TestReplicaInstallWithEntriesCrashAtEveryStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for k := 1; ; k++ {
		c, down, last := lagBehind(t, ctx, 7)
		l := c.leader()
		c.start(down)
		msgs := snapThenApp(t, l, down)
		if msgs == nil {
			t.Fatalf("the leader holds no snapshot with entries after it")
		}
		var oneReady bool
		down.r.onReady = func(w *Work) {
			for _, a := range w.Appends {
				if a.Snapshot != nil && len(a.Entries) > 0 && a.HardState.Commit > a.Snapshot.Metadata.Index {
					oneReady = true
				}
			}
		}
		c.armFault(down, k)
		for _, m := range msgs {
			if err := down.r.Step(m); err != nil {
				t.Fatalf("fault after %d changes: step %v: %v", k, m.Type, err)
			}
		}
		if err := down.r.Process(ctx, down.send); err != nil {
			c.failed(down, "Process", err)
		}
		if !oneReady {
			t.Fatalf("the follower did not get the snapshot, the entries after it and a commit covering them in one Ready")
		}
		fired := !down.up
		if down.faulty {
			c.crash(down)
		}
		if !down.up {
			c.start(down) // fails the test if the replica refuses to open
		}
		c.converge(200)
		for range 10 {
			c.round()
		}
		c.converge(100)
		c.checkIdentical()
		c.checkRetained()
		if down.r.Snapshot().Index <= last {
			t.Fatalf("fault after %d changes: the follower's snapshot is at %d, its log ended at %d", k, down.r.Snapshot().Index, last)
		}
		c.close()
		if !fired {
			if k < 6 {
				t.Fatalf("the install and its entries took only %d file-system changes", k-1)
			}
			t.Logf("the install with its entries takes %d file-system changes", k-1)
			return
		}
	}
}

// snapThenApp is what leader l sends follower down, which lags behind l's
// log start: its snapshot, and the entries after it with l's commit index
// (the MsgApp l sends once the snapshot is reported done and a heartbeat
// response comes back). Nil if l has no snapshot or no entry after it.
func snapThenApp(t tb, l, down *wnode) []raftpb.Message {
	t.Helper()
	snap, err := l.r.storage.Snapshot()
	if err != nil {
		t.Fatalf("leader's snapshot: %v", err)
	}
	st := l.r.Status()
	lo, hi := snap.Metadata.Index+1, l.r.Partition().LastIndex()
	if snap.Metadata.Index == 0 || hi < lo {
		return nil
	}
	ents, err := l.r.storage.Entries(lo, hi+1, 1<<20)
	if err != nil {
		t.Fatalf("leader's entries %d-%d: %v", lo, hi, err)
	}
	ents = slices.Clone(ents)
	return []raftpb.Message{
		{Type: raftpb.MsgSnap, From: l.id, To: down.id, Term: st.Term, Snapshot: &snap},
		{Type: raftpb.MsgApp, From: l.id, To: down.id, Term: st.Term, LogTerm: snap.Metadata.Term, Index: snap.Metadata.Index,
			Entries: ents, Commit: min(st.Commit, ents[len(ents)-1].Index)},
	}
}
