package raft

import (
	"context"
	"errors"
	"fmt"
	stdslog "log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
)

// hostNode is one node of a host cluster: a MemFS with one log store holding
// every group's partition, a Host driving the groups, an endpoint of the
// transport twin.
type hostNode struct {
	id         uint64
	fs         *slog.MemFS
	store      *slog.Store
	stopStore  context.CancelFunc
	storeDone  chan error
	host       *Host
	stopHost   context.CancelFunc
	hostDone   chan error
	ep         *transport.Endpoint
	up         bool
	partitions map[uint64]*slog.Partition
	// skew moves this host's clock from the virtual time (ns; tests of
	// clocks that disagree).
	skew atomic.Int64
}

// hcluster is 3 hosts holding the same groups, connected by the transport
// twin, which the test drives (Advance) between waits for every host's
// scheduler to be idle. Ticks come from the test (TickInterval < 0).
type hcluster struct {
	t      tb
	net    *transport.Network
	nodes  []*hostNode
	groups int
	opts   slog.Options
	hcfg   HostConfig
	// tweak, if set, adjusts each replica's config before it is added.
	tweak func(*ReplicaConfig)
	// liveness, if set, gives every host a NodeLive that follows the
	// faults the test makes (setLive, host_quiesce_test.go).
	liveness *liveness

	dbg     []string
	mu      sync.Mutex
	props   map[string]*hprop // by value
	nextVal int
}

// hprop is one proposal and what its done said.
type hprop struct {
	group uint64
	node  uint64
	value string
	calls int
	base  int64
	err   error
}

// hclusterEpochMs is where the hosts' virtual clocks start (unix ms) and
// the time of the records c.propose encodes.
const hclusterEpochMs = 1_700_000_000_000

func newHCluster(t tb, seed uint64, groups int, hcfg HostConfig) *hcluster {
	c := &hcluster{t: t, net: transport.NewNetwork(seed), groups: groups, props: map[string]*hprop{}, hcfg: hcfg,
		opts: slog.Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 1024}}
	if hcfg.Quiesce {
		c.liveness = newLiveness()
	}
	for i := uint64(1); i <= 3; i++ {
		n := &hostNode{id: i, fs: slog.NewMemFS()}
		c.nodes = append(c.nodes, n)
		c.start(n)
		for j := uint64(1); j <= 3; j++ {
			if j != i {
				if err := n.ep.AddPeer(j, ""); err != nil {
					t.Fatalf("AddPeer: %v", err)
				}
			}
		}
	}
	return c
}

func (c *hcluster) start(n *hostNode) {
	c.t.Helper()
	o := c.opts
	o.FS = n.fs
	o.MaintenanceInterval = time.Hour
	o.Logger = stdslog.New(stdslog.DiscardHandler)
	s, err := slog.OpenStore("/data", o)
	if err != nil {
		c.t.Fatalf("node %d: OpenStore: %v", n.id, err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	n.store, n.stopStore, n.storeDone = s, scancel, make(chan error, 1)
	go func() { n.storeDone <- s.Run(sctx) }()
	hc := c.hcfg
	hc.NodeID = n.id
	hc.TickInterval = -1
	hc.Send = func(msgs []transport.Message) { n.ep.Send(msgs) }
	if l := c.liveness; l != nil {
		self := n.id
		hc.NodeLive = func(node uint64) bool { return l.live(self, node) }
	}
	h, err := NewHost(hc)
	if err != nil {
		c.t.Fatalf("NewHost: %v", err)
	}
	// Virtual: rounds advance it, from the time the proposals' records carry.
	h.now = func() time.Time {
		return time.UnixMilli(hclusterEpochMs).Add(c.net.Now() + time.Duration(n.skew.Load()))
	}
	n.host = h
	n.ep = c.net.Endpoint(n.id, h)
	n.partitions = map[uint64]*slog.Partition{}
	for g := uint64(1); g <= uint64(c.groups); g++ {
		p, err := s.Partition(fmt.Sprintf("p%d", g))
		if err != nil {
			c.t.Fatalf("Partition: %v", err)
		}
		n.partitions[g] = p
		rc := ReplicaConfig{Partition: p, FS: n.fs, Dir: fmt.Sprintf("/raft/p%d", g), Voters: []uint64{1, 2, 3}}
		if c.tweak != nil {
			c.tweak(&rc)
		}
		if err := h.Add(g, rc); err != nil {
			c.t.Fatalf("node %d: Add(%d): %v", n.id, g, err)
		}
	}
	hctx, hcancel := context.WithCancel(context.Background())
	n.stopHost, n.hostDone = hcancel, make(chan error, 1)
	go func() { n.hostDone <- h.Run(hctx) }()
	n.up = true
}

// stop stops n's host; crash: then its store loses power (unsynced bytes
// gone, files abandoned); else the replicas and the store are closed.
func (c *hcluster) stop(n *hostNode, crash bool) {
	c.t.Helper()
	if !n.up {
		return
	}
	n.up = false
	n.stopHost()
	if err := <-n.hostDone; err != nil {
		c.t.Fatalf("node %d: Run: %v", n.id, err)
	}
	if !crash {
		for _, g := range n.host.Groups() {
			if err := n.host.Remove(g); err != nil {
				c.t.Fatalf("node %d: Remove(%d): %v", n.id, g, err)
			}
		}
	}
	n.stopStore()
	<-n.storeDone
	if crash {
		n.fs.Crash()
		return
	}
	if err := n.store.Close(); err != nil {
		c.t.Fatalf("node %d: close store: %v", n.id, err)
	}
}

func (c *hcluster) close() {
	for _, n := range c.nodes {
		c.stop(n, false)
	}
}

// idle waits until every running host has nothing queued or processing.
func (c *hcluster) idle() {
	for _, n := range c.nodes {
		if n.up {
			n.host.sched.waitIdle()
		}
	}
}

// round is one tick of every host and a tick's worth of network time in
// ten steps, each waiting for the hosts to be idle.
func (c *hcluster) round() {
	for _, n := range c.nodes {
		if n.up {
			n.host.Tick()
		}
	}
	for range 10 {
		c.idle()
		c.net.Advance(TickInterval / 10)
	}
	c.idle()
}

// leader returns the node whose host leads g with the highest term, or nil.
func (c *hcluster) leader(g uint64) *hostNode {
	var best *hostNode
	var term uint64
	for _, n := range c.nodes {
		if !n.up {
			continue
		}
		if st, ok := n.host.Status(g); ok && st.IsLeader && st.Term > term {
			best, term = n, st.Term
		}
	}
	return best
}

func (c *hcluster) awaitLeaders(rounds int) {
	c.t.Helper()
	for range rounds {
		ok := true
		for g := uint64(1); g <= uint64(c.groups); g++ {
			ok = ok && c.leader(g) != nil
		}
		if ok {
			return
		}
		c.round()
	}
	c.t.Fatalf("not every group has a leader after %d rounds", rounds)
}

// propose proposes one record with a fresh value to g through n.
func (c *hcluster) propose(n *hostNode, g uint64) {
	c.mu.Lock()
	c.nextVal++
	p := &hprop{group: g, node: n.id, value: fmt.Sprintf("g%d-v%d", g, c.nextVal)}
	c.props[p.value] = p
	c.mu.Unlock()
	data := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: []byte(p.value)}}, hclusterEpochMs)
	n.host.Propose(g, data, func(base int64, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		p.calls++
		p.base, p.err = base, err
	})
}

// pendingProps counts the proposals whose done has not been called.
func (c *hcluster) pendingProps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.props {
		if p.calls == 0 {
			n++
		}
	}
	return n
}

func (c *hcluster) awaitProposals(rounds int) {
	c.t.Helper()
	// Rounds are virtual time, but the log's fsyncs run on real time on its
	// own goroutine (waitIdle waits for the host's workers only): on a
	// loaded machine a write can outlast many rounds. So past the budget,
	// rounds go on for up to 10 s of real time before the test fails (once
	// in CI a proposal completed in its 20th round and was reported lost).
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < rounds || time.Now().Before(deadline); i++ {
		if c.pendingProps() == 0 {
			return
		}
		c.round()
	}
	if c.pendingProps() == 0 {
		return
	}
	c.mu.Lock()
	for _, p := range c.props {
		if p.calls == 0 {
			c.logf("pending %s via node %d (up %v)", p.value, p.node, c.nodes[p.node-1].up)
		}
	}
	c.mu.Unlock()
	for _, n := range c.nodes {
		if !n.up {
			continue
		}
		for g := uint64(1); g <= uint64(c.groups); g++ {
			hg := n.host.group(g)
			st, _ := n.host.Status(g)
			var idx []string
			for i, ps := range hg.track.byIndex {
				for _, p := range ps {
					idx = append(idx, fmt.Sprintf("%d@%d", i, p.term))
				}
			}
			hg.mu.Lock()
			inbox, closed := len(hg.box.props), hg.closed
			hg.mu.Unlock()
			n.host.sched.mu.Lock()
			queued, processing := hg.queued, hg.processing
			n.host.sched.mu.Unlock()
			c.logf("node %d group %d: status %+v tracked %v unmatched %d; waiting in the mailbox %d (closed %v, queued %v, processing %v)",
				n.id, g, st, idx, len(hg.track.unmatched), inbox, closed, queued, processing)
		}
	}
	c.t.Fatalf("%d proposals not completed after %d rounds:\n%s", c.pendingProps(), rounds, strings.Join(c.dbg, "\n"))
}

// converge runs rounds until, in every group, every running node has
// applied the same index, with a leader among them.
func (c *hcluster) converge(rounds int) {
	c.t.Helper()
	for range rounds {
		c.round()
		ok := true
		for g := uint64(1); g <= uint64(c.groups) && ok; g++ {
			l := c.leader(g)
			if l == nil {
				ok = false
				break
			}
			ls, _ := l.host.Status(g)
			for _, n := range c.nodes {
				if n.up {
					st, _ := n.host.Status(g)
					ok = ok && st.CommitIndex == ls.CommitIndex && st.CommitIndex == n.partitions[g].LastIndex() && st.Err == nil
				}
			}
		}
		if ok {
			return
		}
	}
	c.t.Fatalf("groups not converged after %d rounds", rounds)
}

// check verifies the proposals' outcomes against the committed logs of the
// running nodes: every done called once; every success at its base with
// its bytes on every running replica; every loss absent; every committed
// value stored once.
func (c *hcluster) check() (ok, lost, unknown, notLeader int) {
	c.t.Helper()
	committed := map[uint64][]string{} // group → values by offset, from the first running node
	for _, n := range c.nodes {
		if !n.up {
			continue
		}
		for g := uint64(1); g <= uint64(c.groups); g++ {
			st, _ := n.host.Status(g)
			vals := readRecords(c.t, n.partitions[g], 0, st.CommittedEnd)
			if ref, seen := committed[g]; seen {
				for i := range min(len(ref), len(vals)) {
					if ref[i] != vals[i] {
						c.t.Fatalf("group %d offset %d: node %d holds %q, another node %q", g, i, n.id, vals[i], ref[i])
					}
				}
				if len(vals) > len(ref) {
					committed[g] = vals
				}
			} else {
				committed[g] = vals
			}
		}
	}
	where := map[string]int64{}
	for g, vals := range committed {
		for off, v := range vals {
			if prev, dup := where[v]; dup {
				c.t.Fatalf("group %d: value %q at offsets %d and %d", g, v, prev, off)
			}
			where[v] = int64(off)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.props {
		if p.calls != 1 {
			c.t.Fatalf("%s: done called %d times", p.value, p.calls)
		}
		off, in := where[p.value]
		var nl *NotLeaderError
		switch {
		case p.err == nil:
			ok++
			if !in || off != p.base {
				c.t.Fatalf("%s acknowledged at offset %d, committed: %v at %d", p.value, p.base, in, off)
			}
		case errors.Is(p.err, ErrProposalLost):
			lost++
			if in {
				c.t.Fatalf("%s reported lost (%v) but committed at %d", p.value, p.err, off)
			}
		case errors.Is(p.err, ErrOutcomeUnknown):
			unknown++
		case errors.As(p.err, &nl):
			notLeader++
			if in {
				c.t.Fatalf("%s refused as not leader (%v) but committed at %d", p.value, p.err, off)
			}
		default:
			c.t.Fatalf("%s: unexpected error %v", p.value, p.err)
		}
	}
	return ok, lost, unknown, notLeader
}

// TestHostManyGroups: 3 hosts × 64 groups elect (campaigns spread over the
// hosts), proposals to the leaders are acknowledged, and every
// acknowledged record is at its offset with the same bytes on all three.
func TestHostManyGroups(t *testing.T) {
	c := newHCluster(t, 1, 64, HostConfig{Workers: 4})
	defer c.close()
	for g := uint64(1); g <= 64; g++ {
		if err := c.nodes[g%3].host.Campaign(g); err != nil {
			t.Fatalf("Campaign: %v", err)
		}
	}
	c.awaitLeaders(100)
	for range 5 {
		for g := uint64(1); g <= 64; g++ {
			l := c.leader(g)
			for range 3 {
				c.propose(l, g)
			}
		}
		c.round()
	}
	c.awaitProposals(100)
	c.converge(100)
	ok, lost, unknown, notLeader := c.check()
	if ok != 64*15 {
		t.Fatalf("%d acknowledged, %d lost, %d unknown, %d not leader; want all %d acknowledged", ok, lost, unknown, notLeader, 64*15)
	}
	leaders := map[uint64]int{}
	for g := uint64(1); g <= 64; g++ {
		leaders[c.leader(g).id]++
	}
	if len(leaders) != 3 {
		t.Fatalf("leaders not spread: %v", leaders)
	}
	if st := c.nodes[0].host.Stats(); st.Groups != 64 || st.Readies == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestHostLeaderStopsUnderLoad: the host leading every group stops (its
// Run cancelled, its replicas and log store closed) with proposals in
// flight; the others elect and go on. Every proposal completes exactly
// once, every acknowledged one is committed at its offset, none reported
// lost or refused is committed.
func TestHostLeaderStopsUnderLoad(t *testing.T) {
	c := newHCluster(t, 2, 8, HostConfig{Workers: 4})
	defer c.close()
	for g := uint64(1); g <= 8; g++ {
		if err := c.nodes[0].host.Campaign(g); err != nil {
			t.Fatalf("Campaign: %v", err)
		}
	}
	c.awaitLeaders(100)
	load := func(rounds int) {
		for range rounds {
			for g := uint64(1); g <= 8; g++ {
				if l := c.leader(g); l != nil {
					c.propose(l, g)
					c.propose(l, g)
				} else {
					c.propose(c.nodes[1], g) // no leader known: not-leader
				}
			}
			c.round()
		}
	}
	load(5)
	// Proposals reach the leader and the host stops before they commit.
	for g := uint64(1); g <= 8; g++ {
		c.propose(c.nodes[0], g)
	}
	c.idle()
	c.stop(c.nodes[0], false)
	load(40)
	c.awaitProposals(200)
	c.converge(200)
	ok, lost, unknown, notLeader := c.check()
	t.Logf("ok %d lost %d unknown %d not-leader %d", ok, lost, unknown, notLeader)
	if ok == 0 || unknown == 0 {
		t.Fatalf("want acknowledged proposals and unknown ones (in flight at the stop): ok %d unknown %d", ok, unknown)
	}
	for _, n := range c.nodes[1:] {
		for g := uint64(1); g <= 8; g++ {
			if st, _ := n.host.Status(g); st.Leader == 1 {
				t.Fatalf("group %d still led by the stopped node", g)
			}
		}
	}
}

// TestHostRandomFaults: under dropped, duplicated and reordered messages,
// partitions and power loss of a host (unsynced bytes lost) and its
// restart from disk, every proposal completes exactly once, every
// acknowledged record is committed at its offset on every replica, none
// reported lost is committed, and after healing every group converges.
// The hosts' workers run concurrently, so a seed replays the faults, not
// the exact interleaving: every draw is made whatever the cluster's state
// (whether a group has a leader depends on the interleaving), so that a
// seed or fail file replays the same choices (TestRapidFailFilesReplay).
func TestHostRandomFaults(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		groups := rapid.IntRange(1, 6).Draw(rt, "groups")
		c := newHCluster(rt, rapid.Uint64().Draw(rt, "netSeed"), groups, HostConfig{Workers: 2, ProposalTimeout: 3 * time.Second})
		defer c.close()
		steps := rapid.IntRange(20, 80).Draw(rt, "steps")
		for range steps {
			g := uint64(rapid.IntRange(1, groups).Draw(rt, "group"))
			switch a := rapid.IntRange(0, 99).Draw(rt, "action"); {
			case a < 45:
				n, toLeader := c.nodes[rapid.IntRange(0, 2).Draw(rt, "via")], rapid.Bool().Draw(rt, "toLeader")
				if l := c.leader(g); l != nil && toLeader {
					n = l
				}
				if k := rapid.IntRange(1, 4).Draw(rt, "count"); n.up {
					for range k {
						c.propose(n, g)
					}
				}
			case a < 52:
				c.stop(c.nodes[rapid.IntRange(0, 2).Draw(rt, "crash")], true)
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
				if n := c.nodes[rapid.IntRange(0, 2).Draw(rt, "candidate")]; n.up {
					_ = n.host.Campaign(g)
				}
			case a < 86:
				c.net.SetFaults(transport.Faults{
					Drop:      rapid.Float64Range(0, 0.3).Draw(rt, "drop"),
					Duplicate: rapid.Float64Range(0, 0.2).Draw(rt, "dup"),
					Jitter:    time.Duration(rapid.IntRange(0, 30).Draw(rt, "jitterMs")) * time.Millisecond,
				})
			}
			c.round()
		}
		c.net.Heal()
		c.net.SetFaults(transport.Faults{})
		for _, n := range c.nodes {
			if !n.up {
				c.start(n)
			}
		}
		c.converge(400)
		// Proposals still pending are at indexes the logs no longer hold
		// (truncated by a newer leader): their outcome stays unknown until
		// the ProposalTimeout (a node holding them could still lead).
		// ProposalTimeout is 30 rounds of virtual time, but 50 rounds were
		// not always enough for the last unknown ones to be reported (about
		// one run in eight; each was reported shortly after): 150 rounds
		// still bound the wait.
		c.awaitProposals(150)
		c.check()
		// Liveness: one more proposal per group is acknowledged.
		for g := uint64(1); g <= uint64(groups); g++ {
			c.propose(c.leader(g), g)
		}
		c.awaitProposals(100)
		c.converge(100)
		c.check()
	})
}

func (c *hcluster) logf(format string, args ...any) {
	c.dbg = append(c.dbg, fmt.Sprintf(format, args...))
}
