package raft

import (
	"context"
	"errors"
	"fmt"
	stdslog "log/slog"
	"slices"
	"testing"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"pgregory.net/rapid"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
)

const (
	wireGroup = 1
	wirePart  = "orders-0"
	wireData  = "/data"
	wireRaft  = "/raft/orders-0"
)

// wnode is one node of the wired cluster: its own MemFS holding a log
// store and the group's state file, a Replica over them, and an endpoint of
// the in-memory transport twin.
type wnode struct {
	c      *wcluster
	id     uint64
	fs     *slog.MemFS // nil on a real file system
	fsys   slog.FS     // fs, or the real one
	root   string      // prefix of the node's paths
	store  *slog.Store
	cancel context.CancelFunc
	done   chan error
	r      *Replica
	ep     *transport.Endpoint
	up     bool
	readTo int64 // committed records read so far
	faulty bool  // an injected disk fault is armed: a failure is expected

	stopErr     error // what the replica stopped with, if it did while faulty
	quarantined bool  // whether its partition was quarantined then
}

var errInjected = errors.New("injected disk fault")

// armFault makes the ops-th next file-system operation of n fail (and
// every one after it, as a dead disk would).
func (c *wcluster) armFault(n *wnode, ops int) {
	n.faulty = true
	n.fs.SetFault(func(op, name string) error {
		if ops--; ops <= 0 {
			return errInjected
		}
		return nil
	})
}

// failed handles a replica error: expected after an injected fault (the
// node then loses power), a test failure otherwise.
func (c *wcluster) failed(n *wnode, what string, err error) {
	c.t.Helper()
	if !n.faulty {
		c.t.Fatalf("node %d: %s: %v", n.id, what, err)
	}
	n.stopErr, n.quarantined = err, n.r.Partition().Quarantined() != nil
	c.crash(n)
}

// wcluster is 3 replicas of one partition connected by the transport twin.
// Every record any replica shows as committed goes into committed (offset
// → value), which must never hold two values for one offset.
type wcluster struct {
	t         tb
	ctx       context.Context
	net       *transport.Network
	nodes     []*wnode
	committed map[int64]string
	nextVal   int
	opts      slog.Options
	// manual, if set, makes elections happen only when the test calls
	// elect: raft draws election timeouts from its own crypto/rand source,
	// which would make runs unreplayable. Election timeouts are then
	// manualElectionTicks long and rounds tick only leaders (heartbeats,
	// CheckQuorum), so no follower's random timeout is ever reached.
	manual    bool
	snapshots int // MsgSnap stepped into a replica
	// tweak, if set, adjusts each replica's config before it opens.
	tweak func(*ReplicaConfig)
}

const manualElectionTicks = 1000

func newWCluster(t tb, ctx context.Context, seed uint64, opts slog.Options, manual bool) *wcluster {
	return newWClusterOn(t, ctx, seed, opts, manual, "")
}

// newWClusterOn is newWCluster on MemFS (root "") or under root on the
// real file system (no crashes then).
func newWClusterOn(t tb, ctx context.Context, seed uint64, opts slog.Options, manual bool, root string) *wcluster {
	c := &wcluster{t: t, ctx: ctx, net: transport.NewNetwork(seed), committed: map[int64]string{}, opts: opts, manual: manual}
	for i := uint64(1); i <= 3; i++ {
		n := &wnode{c: c, id: i, fsys: slog.OSFS{}, root: fmt.Sprintf("%s/node%d", root, i)}
		if root == "" {
			n.fs = slog.NewMemFS()
			n.fsys, n.root = n.fs, ""
		}
		n.ep = c.net.Endpoint(i, n)
		for j := uint64(1); j <= 3; j++ {
			if j != i {
				if err := n.ep.AddPeer(j, ""); err != nil {
					t.Fatalf("AddPeer: %v", err)
				}
			}
		}
		c.nodes = append(c.nodes, n)
		c.start(n)
	}
	return c
}

func (c *wcluster) start(n *wnode) {
	c.t.Helper()
	o := c.opts
	o.FS = n.fsys
	o.MaintenanceInterval = time.Hour // no background FS operations: fault counts replay by seed
	o.Logger = stdslog.New(stdslog.DiscardHandler)
	s, err := slog.OpenStore(n.root+wireData, o)
	if err != nil {
		c.t.Fatalf("node %d: OpenStore: %v", n.id, err)
	}
	p, err := s.Partition(wirePart)
	if err != nil {
		c.t.Fatalf("node %d: Partition: %v", n.id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.store, n.cancel, n.done = s, cancel, make(chan error, 1)
	go func() { n.done <- s.Run(ctx) }()
	rc := ReplicaConfig{
		Partition: p, FS: n.fsys, Dir: n.root + wireRaft, Voters: []uint64{1, 2, 3},
		Group: GroupConfig{ID: n.id, ElectionTicks: c.electionTicks()},
	}
	if c.tweak != nil {
		c.tweak(&rc)
	}
	r, err := OpenReplica(rc)
	if err != nil {
		c.t.Fatalf("node %d: OpenReplica: %v", n.id, err)
	}
	n.r, n.up = r, true
}

// crash is power loss: the store's goroutine stops, unsynced bytes are
// lost, the old store and state file are abandoned as a dead process's.
func (c *wcluster) electionTicks() int {
	if c.manual {
		return manualElectionTicks
	}
	return 0
}

// elect makes cand campaign, replayably. In manual mode no follower is
// ever ticked (their random election timeouts are never reached), so a
// follower is made to campaign as a leadership transfer would (a
// MsgTimeoutNow: an election without pre-vote whose vote requests
// followers grant even while they still follow a leader, if cand's log is
// up to date). A (pre-)candidate, which ignores that, is ticked in isolation
// until its own timeout starts a new campaign: however many ticks that
// takes, nothing else happens meanwhile.
func (c *wcluster) elect(cand *wnode) {
	c.t.Helper()
	c.process()
	if !cand.up {
		return
	}
	var err error
	switch cand.r.Status().RaftState {
	case etcdraft.StateLeader:
	case etcdraft.StateFollower:
		err = cand.r.stepLocal(raftpb.Message{Type: raftpb.MsgTimeoutNow, From: cand.id, To: cand.id})
	default:
		for i := 0; i < 2*manualElectionTicks && !cand.r.HasReady(); i++ {
			cand.r.Tick()
		}
	}
	if errors.Is(err, ErrReplicaStopped) {
		c.failed(cand, "elect", err)
	}
}

// stepLocal steps m into raft as the replica's own message: a test's
// MsgTimeoutNow to itself (term 0, which Step refuses from a peer).
func (r *Replica) stepLocal(m raftpb.Message) error {
	if r.failed != nil {
		return r.failed
	}
	return r.guard(func() error { return r.g.Step(m) })
}

func (c *wcluster) crash(n *wnode) {
	if !n.up {
		return
	}
	n.cancel()
	<-n.done
	n.fs.Crash()
	n.fs.SetFault(nil)
	n.up, n.r, n.faulty = false, nil, false
}

// stop closes a node cleanly (end of test).
func (c *wcluster) stop(n *wnode) {
	if !n.up {
		return
	}
	if n.faulty {
		c.crash(n) // its files may be half written: abandon them
		return
	}
	n.cancel()
	<-n.done
	if err := n.r.Close(); err != nil {
		c.t.Fatalf("node %d: close replica: %v", n.id, err)
	}
	if err := n.store.Close(); err != nil {
		c.t.Fatalf("node %d: close store: %v", n.id, err)
	}
	n.up = false
}

func (c *wcluster) close() {
	for _, n := range c.nodes {
		c.stop(n)
	}
}

// transport.Handler: messages go straight into the replica (on the
// goroutine calling the network's Advance).
func (n *wnode) HandleMessage(m transport.Message) error {
	if !n.up {
		return nil
	}
	if m.Group != wireGroup {
		return transport.ErrUnknownGroup
	}
	if err := n.r.Step(m.Msg); errors.Is(err, ErrReplicaStopped) {
		n.c.failed(n, "Step", err)
	}
	return nil
}
func (n *wnode) HandleSnapshot(_ context.Context, m transport.Message) error {
	if !n.up {
		return errors.New("node down")
	}
	if err := n.r.Step(m.Msg); err != nil {
		if errors.Is(err, ErrReplicaStopped) {
			n.c.failed(n, "Step snapshot", err)
		}
		return err
	}
	n.c.snapshots++
	return nil
}
func (n *wnode) PeerUnreachable(uint64) {}
func (n *wnode) SnapshotDone(_, peer uint64, err error) {
	if n.up {
		n.r.ReportSnapshot(peer, err)
	}
}

func (n *wnode) send(msgs []raftpb.Message) {
	out := make([]transport.Message, len(msgs))
	for i, m := range msgs {
		out[i] = transport.Message{Group: wireGroup, Msg: m}
	}
	n.ep.Send(out)
}

// process carries out every node's pending Ready.
func (c *wcluster) process() {
	c.t.Helper()
	for _, n := range c.nodes {
		for n.up && n.r.HasReady() {
			if err := n.r.Process(c.ctx, n.send); err != nil {
				c.failed(n, "Process", err)
			}
		}
	}
}

// round is one tick of every node and a tick's worth of network time, in
// ten steps of processing and delivery.
func (c *wcluster) round() {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.up && (!c.manual || n.r.Status().RaftState == etcdraft.StateLeader) {
			n.r.Tick()
		}
	}
	for range 10 {
		c.process()
		c.net.Advance(TickInterval / 10)
	}
	c.process()
	c.observe()
}

func (c *wcluster) leader() *wnode {
	var best *wnode
	for _, n := range c.nodes {
		if n.up && n.r.Status().RaftState == etcdraft.StateLeader {
			if best == nil || n.r.Status().Term > best.r.Status().Term {
				best = n
			}
		}
	}
	return best
}

func (c *wcluster) waitLeader(rounds int) *wnode {
	c.t.Helper()
	for range rounds {
		if l := c.leader(); l != nil {
			return l
		}
		c.round()
	}
	c.t.Fatalf("no leader after %d rounds", rounds)
	return nil
}

// propose proposes a batch of k records with fresh values through n.
func (c *wcluster) propose(n *wnode, k int) error {
	recs := make([]slog.Record, k)
	for i := range recs {
		c.nextVal++
		recs[i] = slog.Record{Key: []byte("k"), Value: []byte(fmt.Sprintf("v%d", c.nextVal))}
	}
	return n.r.ProposeRecords(slog.EncodeRecords(nil, slog.BatchHeader{}, recs, 1_700_000_000_000))
}

// readRecords returns the values of p's records in [from, to).
func readRecords(t tb, p *slog.Partition, from, to int64) []string {
	t.Helper()
	var out []string
	for from < to {
		recs, err := p.Read(from, 1<<20, to, nil)
		if err != nil {
			t.Fatalf("%s: Read(%d, up to %d): %v", p.Name(), from, to, err)
		}
		for _, r := range recs {
			if r.Offset != from {
				t.Fatalf("%s: record at offset %d, want %d", p.Name(), r.Offset, from)
			}
			out = append(out, string(r.Value))
			from++
		}
	}
	return out
}

// observe reads what each replica shows as committed since last time and
// checks it against every other replica's view.
func (c *wcluster) observe() {
	c.t.Helper()
	for _, n := range c.nodes {
		if !n.up {
			continue
		}
		end := n.r.CommittedEnd()
		n.readTo = max(n.readTo, n.r.Partition().StartOffset())
		if end <= n.readTo {
			continue
		}
		for i, v := range readRecords(c.t, n.r.Partition(), n.readTo, end) {
			off := n.readTo + int64(i)
			if old, ok := c.committed[off]; ok && old != v {
				c.t.Fatalf("node %d: offset %d committed as %q, elsewhere %q", n.id, off, v, old)
			}
			c.committed[off] = v
		}
		n.readTo = end
	}
}

// converge runs rounds until every node is up, has one leader and has
// applied everything the leader committed (and the leader has committed
// its last entry).
func (c *wcluster) converge(rounds int) {
	c.t.Helper()
	for i := range rounds {
		c.round()
		l := c.leader()
		if l == nil {
			if c.manual && i%10 == 9 {
				c.elect(c.nodes[i/10%3])
			}
			continue
		}
		st := l.r.Status()
		if st.Commit != l.r.Partition().LastIndex() {
			continue
		}
		ok := true
		for _, n := range c.nodes {
			ok = ok && n.up && n.r.CommitIndex() == st.Commit && n.r.Partition().LastIndex() == st.Commit
		}
		if ok {
			return
		}
	}
	var b []string
	for _, n := range c.nodes {
		if n.up {
			b = append(b, fmt.Sprintf("node %d: %+v applied %d last %d", n.id, n.r.Status().HardState, n.r.CommitIndex(), n.r.Partition().LastIndex()))
		}
	}
	c.t.Fatalf("not converged after %d rounds: %v", rounds, b)
}

// checkIdentical checks that every replica holds the same entries up to
// the lowest commit index, and the same records at the same offsets up to
// the lowest committed end; and that every record ever seen committed is
// still there, once.
func (c *wcluster) checkIdentical() {
	c.t.Helper()
	var up []*wnode
	for _, n := range c.nodes {
		if n.up {
			up = append(up, n)
		}
	}
	minIdx, minEnd := uint64(1<<63), int64(1<<62)
	fromIdx, fromOff := uint64(1), int64(0) // past what retention gave up anywhere
	for _, n := range up {
		minIdx, minEnd = min(minIdx, n.r.CommitIndex()), min(minEnd, n.r.CommittedEnd())
		fromIdx, fromOff = max(fromIdx, n.r.Snapshot().Index+1), max(fromOff, n.r.Partition().StartOffset())
	}
	if len(up) == 0 || minIdx == 0 {
		return
	}
	if minEnd < fromOff {
		minEnd = fromOff
	}
	ref := entriesFrom(c.t, up[0].r.Partition(), fromIdx, minIdx)
	for _, n := range up[1:] {
		got := entriesFrom(c.t, n.r.Partition(), fromIdx, minIdx)
		for i := range ref {
			if got[i].Index != ref[i].Index || got[i].Term != ref[i].Term || got[i].Type != ref[i].Type || string(got[i].Data) != string(ref[i].Data) {
				c.t.Fatalf("node %d entry %d (term %d, %v) differs from node %d's (term %d, %v)", n.id, got[i].Index, got[i].Term, got[i].Type, up[0].id, ref[i].Term, ref[i].Type)
			}
		}
	}
	refRecs := readRecords(c.t, up[0].r.Partition(), fromOff, minEnd)
	for _, n := range up[1:] {
		if got := readRecords(c.t, n.r.Partition(), fromOff, minEnd); !slices.Equal(got, refRecs) {
			c.t.Fatalf("node %d records differ from node %d's in [%d, %d)", n.id, up[0].id, fromOff, minEnd)
		}
	}
	seen := map[string]int64{}
	for i, v := range refRecs {
		off := fromOff + int64(i)
		if prev, dup := seen[v]; dup {
			c.t.Fatalf("value %q at offsets %d and %d", v, prev, off)
		}
		seen[v] = off
	}
	for off, v := range c.committed {
		if off >= fromOff && off < minEnd && refRecs[off-fromOff] != v {
			c.t.Fatalf("offset %d was committed as %q, the replicas now hold %q", off, v, refRecs[off-fromOff])
		}
	}
}

func entriesFrom(t tb, p *slog.Partition, from, upTo uint64) []slog.Entry {
	t.Helper()
	var out []slog.Entry
	for lo := from; lo <= upTo; {
		ents, err := p.Entries(lo, upTo+1, 1<<20)
		if err != nil {
			t.Fatalf("%s: Entries(%d, %d): %v", p.Name(), lo, upTo+1, err)
		}
		for _, e := range ents {
			e.Data = slices.Clone(e.Data)
			out = append(out, e)
		}
		lo += uint64(len(ents))
	}
	return out
}

func entriesOf(t tb, p *slog.Partition, upTo uint64) []slog.Entry {
	t.Helper()
	var out []slog.Entry
	for lo := uint64(1); lo <= upTo; {
		ents, err := p.Entries(lo, upTo+1, 1<<20)
		if err != nil {
			t.Fatalf("%s: Entries(%d, %d): %v", p.Name(), lo, upTo+1, err)
		}
		for _, e := range ents {
			e.Data = slices.Clone(e.Data)
			out = append(out, e)
		}
		lo += uint64(len(ents))
	}
	return out
}

// TestReplicaElectReplicateFailover: three replicas on three log stores
// elect a leader and replicate record batches; every partition log ends
// with the same entries and the same records at the same offsets. The
// leader loses power (unsynced bytes gone), a new leader commits more, the
// old one restarts from its disk and catches up; nothing committed is lost.
func TestReplicaElectReplicateFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newWCluster(t, ctx, 1, slog.Options{SegmentBytes: 4 << 10, IndexIntervalBytes: 512}, false)
	defer c.close()

	l := c.waitLeader(50)
	for i := range 20 {
		if err := c.propose(l, 1+i%5); err != nil {
			t.Fatalf("propose: %v", err)
		}
		if i%3 == 0 {
			c.round()
		}
	}
	c.converge(50)
	c.checkIdentical()
	if got := len(c.committed); got != c.nextVal {
		t.Fatalf("%d records committed, %d proposed", got, c.nextVal)
	}
	for _, n := range c.nodes {
		if n.r.CommittedEnd() != int64(c.nextVal) || n.r.Partition().NextOffset() != int64(c.nextVal) {
			t.Fatalf("node %d: committed end %d, next offset %d, want %d", n.id, n.r.CommittedEnd(), n.r.Partition().NextOffset(), c.nextVal)
		}
	}

	// The leader proposes one more batch and crashes before anyone hears of it.
	if err := c.propose(l, 3); err != nil {
		t.Fatalf("propose: %v", err)
	}
	c.crash(l)
	before := c.nextVal
	nl := c.waitLeader(100)
	if nl == l {
		t.Fatalf("the crashed node leads")
	}
	for range 10 {
		if err := c.propose(nl, 2); err != nil {
			t.Fatalf("propose to the new leader: %v", err)
		}
		c.round()
	}
	c.start(l)
	c.converge(100)
	c.checkIdentical()
	if got := len(c.committed); got != before-3+20 {
		t.Fatalf("%d records committed, want %d (the crashed leader's last batch was never replicated)", got, before-3+20)
	}
	for _, n := range c.nodes {
		if n.r.CommittedEnd() != int64(len(c.committed)) {
			t.Fatalf("node %d: committed end %d, want %d", n.id, n.r.CommittedEnd(), len(c.committed))
		}
	}
}

// TestReplicaRandomFaults: under dropped, duplicated and reordered
// messages, partitions, and power loss of any node at any point between
// rounds, no record a replica showed as committed is lost or changed, each
// offset holds one value on every replica, and the replicas hold identical
// entries and records up to the lowest commit index; after healing every
// replica catches up. Replay a failure with -rapid.seed.
func TestReplicaRandomFaults(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newWCluster(rt, ctx, rapid.Uint64().Draw(rt, "netSeed"), slog.Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 256}, true)
		defer c.close()
		steps := rapid.IntRange(30, 200).Draw(rt, "steps")
		for range steps {
			switch a := rapid.IntRange(0, 99).Draw(rt, "action"); {
			case a < 40:
				if l := c.leader(); l != nil {
					_ = c.propose(l, rapid.IntRange(1, 4).Draw(rt, "records"))
				}
			case a < 46:
				c.crash(c.nodes[rapid.IntRange(0, 2).Draw(rt, "crash")])
			case a < 52:
				// A disk fault on one of the next FS operations: the node's
				// replica (or store) fails mid-write and the node loses power.
				n := c.nodes[rapid.IntRange(0, 2).Draw(rt, "faulty")]
				if n.up {
					c.armFault(n, rapid.IntRange(1, 30).Draw(rt, "faultAfterOps"))
				}
			case a < 62:
				for _, n := range c.nodes {
					if !n.up {
						c.start(n)
						break
					}
				}
			case a < 68:
				i := uint64(rapid.IntRange(1, 3).Draw(rt, "isolate"))
				var others []uint64
				for _, n := range c.nodes {
					if n.id != i {
						others = append(others, n.id)
					}
				}
				c.net.Partition([]uint64{i}, others)
			case a < 76:
				c.net.Heal()
			case a < 80:
				c.elect(c.nodes[rapid.IntRange(0, 2).Draw(rt, "candidate")])
			case a < 86:
				c.net.SetFaults(transport.Faults{
					Drop:      rapid.Float64Range(0, 0.3).Draw(rt, "drop"),
					Duplicate: rapid.Float64Range(0, 0.2).Draw(rt, "dup"),
					Jitter:    time.Duration(rapid.IntRange(0, 30).Draw(rt, "jitterMs")) * time.Millisecond,
				})
			}
			c.round()
			c.checkIdentical()
		}
		c.net.Heal()
		c.net.SetFaults(transport.Faults{})
		for _, n := range c.nodes {
			if n.faulty {
				c.crash(n)
			}
			if !n.up {
				c.start(n)
			}
		}
		c.converge(300)
		c.checkIdentical()
		// Liveness after healing: one more batch commits everywhere.
		if err := c.propose(c.leader(), 1); err != nil {
			rt.Fatalf("propose after healing: %v", err)
		}
		c.converge(100)
		c.checkIdentical()
		if c.nodes[0].r.CommittedEnd() != int64(len(c.committed)) {
			rt.Fatalf("committed end %d, %d records seen committed", c.nodes[0].r.CommittedEnd(), len(c.committed))
		}
		for off := range c.committed {
			if off >= c.nodes[0].r.CommittedEnd() {
				rt.Fatalf("offset %d was committed and is past the converged committed end %d", off, c.nodes[0].r.CommittedEnd())
			}
		}
	})
}
