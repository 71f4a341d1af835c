package raft

import (
	"context"
	"errors"
	"fmt"
	stdslog "log/slog"
	"math/rand/v2"
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

	// inbox holds the messages delivered since the node's last visit and
	// snaps the outcomes of the snapshots it sent; a visit (process) steps
	// the messages, reports the snapshots, then carries out one Ready, as a
	// Host's visit does with its mailbox. stall skips the node's next
	// visits (a Host worker busy elsewhere), so that messages pile up.
	inbox []raftpb.Message
	snaps []snapReport
	stall int
	// downAt is the last index of the node's log when it went down (what
	// survived is at most that).
	downAt uint64
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
	snapshots int // MsgSnap queued for a replica
	// installs counts the Appends that carried a snapshot, and
	// installsWithEntries those that also carried entries after it (a
	// MsgSnap and the next MsgApp stepped in one visit).
	installs, installsWithEntries int
	// tweak, if set, adjusts each replica's config before it opens.
	tweak func(*ReplicaConfig)
	// busy is the probability that a node's visit is skipped (its Host's
	// workers busy with other groups), overlap that the others run during
	// a visit (visit), both drawn from rnd; 0 and 0 visit every node at
	// every step, one after the other.
	busy, overlap float64
	overlapping   bool
	rnd           *rand.Rand
}

// setBusy sets busy and overlap, the choices drawn from seed.
func (c *wcluster) setBusy(busy, overlap float64, seed uint64) {
	c.busy, c.overlap, c.rnd = busy, overlap, rand.New(rand.NewPCG(seed, 1))
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
	r.onReady = c.countInstalls
	n.r, n.up, n.inbox, n.snaps, n.stall = r, true, nil, nil, 0
}

func (c *wcluster) countInstalls(w *Work) {
	for _, a := range w.Appends {
		if a.Snapshot != nil && !etcdraft.IsEmptySnap(*a.Snapshot) {
			c.installs++
			if len(a.Entries) > 0 {
				c.installsWithEntries++
			}
		}
	}
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
	n.downAt = n.r.Partition().LastIndex()
	n.cancel()
	<-n.done
	n.fs.Crash()
	n.fs.SetFault(nil)
	n.up, n.r, n.faulty, n.inbox, n.snaps = false, nil, false, nil, nil
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
	n.downAt = n.r.Partition().LastIndex()
	n.cancel()
	<-n.done
	n.inbox, n.snaps = nil, nil
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

// transport.Handler: messages wait in the node's inbox for its next visit
// (process), as in a Host's mailbox; a snapshot too, reported done once
// queued, as the Host does.
func (n *wnode) HandleMessage(m transport.Message) error {
	if !n.up {
		return nil
	}
	if m.Group != wireGroup {
		return transport.ErrUnknownGroup
	}
	n.inbox = append(n.inbox, m.Msg)
	return nil
}
func (n *wnode) HandleSnapshot(_ context.Context, m transport.Message) error {
	if !n.up {
		return errors.New("node down")
	}
	if err := checkSnapshot(m.Msg.Snapshot); err != nil {
		return err
	}
	n.inbox = append(n.inbox, m.Msg)
	n.c.snapshots++
	return nil
}
func (n *wnode) PeerUnreachable(uint64) {}
func (n *wnode) SnapshotDone(_, peer uint64, err error) {
	if n.up {
		n.snaps = append(n.snaps, snapReport{peer, err})
	}
}

func (n *wnode) send(msgs []raftpb.Message) {
	out := make([]transport.Message, len(msgs))
	for i, m := range msgs {
		out[i] = transport.Message{Group: wireGroup, Msg: m}
	}
	n.ep.Send(out)
}

// process visits every node (visit).
func (c *wcluster) process() {
	c.t.Helper()
	for _, n := range c.nodes {
		c.visit(n)
	}
}

// visit is one visit of node n, as a Host worker makes it: it takes the
// inbox and the snapshot reports, steps the messages, reports the
// snapshots, then carries out the pending Ready (several messages, say a
// MsgSnap and the next MsgApp, then reach one Ready). A stalled node only
// counts the visit down; a busy one (probability busy) is not visited.
// With probability overlap the other nodes' workers run while this visit
// has taken its inbox: the network delivers what is due and the others are
// visited, and what reaches n meanwhile waits for its next visit.
func (c *wcluster) visit(n *wnode) {
	c.t.Helper()
	if n.stall > 0 {
		n.stall--
		return
	}
	if !n.up || c.busy > 0 && c.rnd.Float64() < c.busy {
		return
	}
	in, snaps := n.inbox, n.snaps
	n.inbox, n.snaps = nil, nil
	if !c.overlapping && c.overlap > 0 && c.rnd.Float64() < c.overlap {
		c.overlapping = true
		c.net.Advance(0)
		for _, o := range c.nodes {
			if o != n {
				c.visit(o)
			}
		}
		c.overlapping = false
	}
	for _, m := range in {
		if !n.up {
			break
		}
		if err := n.r.Step(m); errors.Is(err, ErrReplicaStopped) {
			c.failed(n, "Step", err)
		}
	}
	for _, s := range snaps {
		if n.up {
			n.r.ReportSnapshot(s.peer, s.err)
		}
	}
	for n.up && n.r.HasReady() {
		if err := n.r.Process(c.ctx, n.send); err != nil {
			c.failed(n, "Process", err)
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
	return n.r.ProposeRecords(slog.EncodeRecords(nil, slog.BatchHeader{}, recs, 1_700_000_000_000), 1_700_000_000_000)
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

// coverage counts, over the cases of a random fault test, how many reached
// what the test is for: a case whose faults left no leader long enough to
// commit anything checks little.
type coverage struct {
	cases, committed   int // cases; those that committed a record during the faults
	installs, withEnts int // Appends with a snapshot; with entries after it too
	casesWithEnts      int // cases with at least one of the latter
}

func (cv *coverage) add(c *wcluster, committed bool) {
	cv.cases++
	if committed {
		cv.committed++
	}
	cv.installs += c.installs
	cv.withEnts += c.installsWithEntries
	if c.installsWithEntries > 0 {
		cv.casesWithEnts++
	}
}

// check logs the coverage (go test -v) and, over a full run (at least
// minCoverageCases cases, not a replay of one seed), fails the test if
// fewer than floor of the cases committed a record during the faults.
func (cv *coverage) check(t *testing.T, floor float64) {
	t.Helper()
	if cv.cases == 0 {
		return
	}
	share := float64(cv.committed) / float64(cv.cases)
	t.Logf("%d of %d cases (%.0f%%) committed a record during the faults", cv.committed, cv.cases, 100*share)
	if cv.installs > 0 {
		t.Logf("snapshot installs: %d, %d of them with the entries after the snapshot in the same Ready (in %d cases)", cv.installs, cv.withEnts, cv.casesWithEnts)
	}
	if cv.cases >= minCoverageCases && share < floor {
		t.Errorf("only %.0f%% of the cases committed a record during the faults, want at least %.0f%%: the generator no longer reaches the states the test is for", 100*share, 100*floor)
	}
}

const minCoverageCases = 50

// isolate cuts node i off from the others.
func (c *wcluster) isolate(i uint64) {
	var others []uint64
	for _, n := range c.nodes {
		if n.id != i {
			others = append(others, n.id)
		}
	}
	c.net.Partition([]uint64{i}, others)
}

// TestReplicaRandomFaults: under dropped, duplicated and reordered
// messages, partitions, nodes whose visits stall (messages pile up and are
// stepped together before one Ready, as in a busy Host), and power loss of
// any node at any point between rounds, no record a replica showed as
// committed is lost or changed, each offset holds one value on every
// replica, and the replicas hold identical entries and records up to the
// lowest commit index; after healing every replica catches up.
//
// Elections are manual (replayable): node 1 is elected first, and a
// proposal drawn while there is no leader elects a drawn candidate first,
// so that most cases commit during the faults; the share that does is
// logged (-v) and must stay at least 80% over a full run.
//
// Replay: a failing run prints -rapid.seed=N and writes
// testdata/rapid/TestReplicaRandomFaults/*.fail; run
// go test ./engine/raft -run 'TestReplicaRandomFaults$' -rapid.seed=N (or
// -rapid.failfile=PATH) -rapid.v to see every draw. Every draw is made
// whatever the cluster's state (an action draws all its values before
// looking at it), so a seed replays the same choices even where the log
// store's goroutine makes a run differ in detail (how many writes a group
// commit took). A fail file kept there is replayed by every run, and
// TestRapidFailFilesReplay fails once it no longer replays: remove it (or
// keep a new one) when the generator changes.
func TestReplicaRandomFaults(t *testing.T) {
	var cv coverage
	rapid.Check(t, func(rt *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := newWCluster(rt, ctx, rapid.Uint64().Draw(rt, "netSeed"), slog.Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 256}, true)
		defer c.close()
		c.setBusy(rapid.Float64Range(0, 0.5).Draw(rt, "busy"), rapid.Float64Range(0, 0.5).Draw(rt, "overlap"), rapid.Uint64().Draw(rt, "visitSeed"))
		c.elect(c.nodes[0])
		steps := rapid.IntRange(30, 200).Draw(rt, "steps")
		for range steps {
			switch a := rapid.IntRange(0, 99).Draw(rt, "action"); {
			case a < 40:
				cand, k := rapid.IntRange(0, 2).Draw(rt, "candidate"), rapid.IntRange(1, 4).Draw(rt, "records")
				if c.leader() == nil {
					c.elect(c.nodes[cand])
				}
				if l := c.leader(); l != nil {
					_ = c.propose(l, k)
				}
			case a < 46:
				c.crash(c.nodes[rapid.IntRange(0, 2).Draw(rt, "crash")])
			case a < 52:
				// A disk fault on one of the next FS operations: the node's
				// replica (or store) fails mid-write and the node loses power.
				n, ops := c.nodes[rapid.IntRange(0, 2).Draw(rt, "faulty")], rapid.IntRange(1, 30).Draw(rt, "faultAfterOps")
				if n.up {
					c.armFault(n, ops)
				}
			case a < 62:
				for _, n := range c.nodes {
					if !n.up {
						c.start(n)
						break
					}
				}
			case a < 68:
				c.isolate(uint64(rapid.IntRange(1, 3).Draw(rt, "isolate")))
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
			case a < 92:
				c.nodes[rapid.IntRange(0, 2).Draw(rt, "stall")].stall = rapid.IntRange(1, 30).Draw(rt, "stallVisits")
			}
			c.round()
			c.checkIdentical()
		}
		cv.add(c, len(c.committed) > 0)
		c.heal(rt)
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
	cv.check(t, 0.8)
}

// heal ends the faults: the network delivers everything, nodes with an
// armed disk fault lose power, and every node is started.
func (c *wcluster) heal(t tb) {
	t.Helper()
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
}
