package raft

import (
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"pgregory.net/rapid"
)

func TestLeaderQuiesce(t *testing.T) {
	follower := func(id uint64) followerView {
		return followerView{ID: id, Match: 9, Replicating: true, RecentActive: true, Live: true}
	}
	idle := func() leaderView {
		return leaderView{Leader: true, Last: 9, Commit: 9, Applied: 9, Followers: []followerView{follower(2), follower(3)}}
	}
	cases := []struct {
		name   string
		change func(v *leaderView)
		want   string
	}{
		{"idle", func(*leaderView) {}, ""},
		{"single voter", func(v *leaderView) { v.Followers = nil }, ""},
		{"follower", func(v *leaderView) { v.Leader = false }, "not the leader"},
		{"busy", func(v *leaderView) { v.Busy = true }, "work in this visit"},
		{"proposal", func(v *leaderView) { v.Pending = 1 }, "proposals or reads in flight"},
		{"transfer", func(v *leaderView) { v.Transferring = true }, "a leadership transfer in flight"},
		{"joint", func(v *leaderView) { v.Joint = true }, "a configuration change in flight"},
		{"moving", func(v *leaderView) { v.Moving = true }, "a configuration change in flight"},
		{"uncommitted", func(v *leaderView) { v.Last = 10 }, "entries not committed"},
		{"unapplied", func(v *leaderView) { v.Applied = 8 }, "entries not applied"},
		{"follower behind", func(v *leaderView) { v.Followers[1].Match = 8 }, "a follower lacks entries"},
		{"follower probed", func(v *leaderView) { v.Followers[0].Replicating = false }, "a follower is probed or sent a snapshot"},
		{"follower silent", func(v *leaderView) { v.Followers[1].RecentActive = false }, "a follower not heard from since the last quorum check"},
		{"follower's node dead", func(v *leaderView) { v.Followers[0].Live = false }, "a follower's node is not live"},
	}
	for _, c := range cases {
		v := idle()
		c.change(&v)
		if got := leaderQuiesce(v); got != c.want {
			t.Errorf("%s: leaderQuiesce = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestFollowerQuiesce(t *testing.T) {
	m := raftpb.Message{Type: raftpb.MsgHeartbeat, From: 1, To: 2, Term: 4, Commit: 9, Context: quiesceContext}
	ok := followerState{Follower: true, Term: 4, Lead: 1, Last: 9, LeaderLive: true}
	cases := []struct {
		name   string
		change func(s *followerState)
		want   string
	}{
		{"agrees", func(*followerState) {}, ""},
		{"candidate", func(s *followerState) { s.Follower = false }, "not a follower"},
		{"older term", func(s *followerState) { s.Term = 3 }, "not from this follower's leader of this term"},
		{"another leader", func(s *followerState) { s.Lead = 3 }, "not from this follower's leader of this term"},
		{"no leader known", func(s *followerState) { s.Lead = 0 }, "not from this follower's leader of this term"},
		{"behind", func(s *followerState) { s.Last = 8 }, "its log does not end at the leader's commit"},
		{"ahead", func(s *followerState) { s.Last = 10 }, "its log does not end at the leader's commit"},
		{"leader's node dead", func(s *followerState) { s.LeaderLive = false }, "the leader's node is not live"},
	}
	for _, c := range cases {
		s := ok
		c.change(&s)
		if got := followerQuiesce(s, m); got != c.want {
			t.Errorf("%s: followerQuiesce = %q, want %q", c.name, got, c.want)
		}
	}
	if !isQuiesce(&m) || isQuiesce(&raftpb.Message{Type: raftpb.MsgHeartbeat, Context: []byte("12345678")}) {
		t.Fatal("isQuiesce does not tell the quiesce heartbeat from a read-index one")
	}
}

// liveness is the node-level liveness of an hcluster's nodes as the
// transport would report it: a node is live to another while both run
// and no partition separates them.
type liveness struct {
	mu   sync.Mutex
	down map[uint64]bool
	cut  map[[2]uint64]bool
}

func newLiveness() *liveness {
	return &liveness{down: map[uint64]bool{}, cut: map[[2]uint64]bool{}}
}

func (l *liveness) live(self, node uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.down[node] && !l.cut[[2]uint64{self, node}]
}

// setDown marks node down (or up) and, like the transport's liveness
// monitor, tells every running host that lost it.
func (c *hcluster) setDown(node uint64, down bool) {
	c.liveness.mu.Lock()
	c.liveness.down[node] = down
	c.liveness.mu.Unlock()
	if down {
		for _, n := range c.nodes {
			if n.up && n.id != node {
				n.host.PeerUnreachable(node)
			}
		}
	}
}

// partitionLive cuts node off from the others (or heals every cut).
func (c *hcluster) partitionLive(node uint64, cut bool) {
	c.liveness.mu.Lock()
	if !cut {
		clear(c.liveness.cut)
	}
	for _, n := range c.nodes {
		if cut && n.id != node {
			c.liveness.cut[[2]uint64{node, n.id}] = true
			c.liveness.cut[[2]uint64{n.id, node}] = true
		}
	}
	c.liveness.mu.Unlock()
	if !cut {
		return
	}
	for _, n := range c.nodes {
		if !n.up {
			continue
		}
		if n.id == node {
			for _, o := range c.nodes {
				if o.id != node {
					n.host.PeerUnreachable(o.id)
				}
			}
		} else {
			n.host.PeerUnreachable(node)
		}
	}
}

func quiesced(n *hostNode) int { return n.host.Stats().GroupsQuiesced }

func quiesces(n *hostNode, g uint64) int {
	hg := n.host.group(g)
	hg.mu.Lock()
	defer hg.mu.Unlock()
	return hg.quiesces
}

// awaitQuiesced runs rounds until every group of every running node is
// quiesced.
func (c *hcluster) awaitQuiesced(t *testing.T, rounds int) int {
	t.Helper()
	for i := range rounds {
		all := true
		for _, n := range c.nodes {
			all = all && (!n.up || quiesced(n) == c.groups)
		}
		if all {
			return i
		}
		c.round()
	}
	for _, n := range c.nodes {
		t.Logf("node %d: %d of %d groups quiesced", n.id, quiesced(n), c.groups)
	}
	t.Fatalf("not every group quiesced within %d rounds", rounds)
	return rounds
}

// Idle groups quiesce on every replica and cost nothing: no visits, no
// messages, while each still names its leader. A proposal or a read wakes
// only its group, which quiesces again; when the leader's node is declared
// dead by node-level liveness, its followers elect within an election
// timeout or two, and stop naming it at once.
func TestHostQuiescence(t *testing.T) {
	const groups = 6
	c := newHCluster(t, 11, groups, HostConfig{Workers: 4, Quiesce: true})
	defer c.close()
	for g := uint64(1); g <= groups; g++ {
		if err := c.nodes[0].host.Campaign(g); err != nil {
			t.Fatal(err)
		}
	}
	c.awaitLeaders(100)
	for g := uint64(1); g <= groups; g++ {
		c.propose(c.leader(g), g)
	}
	c.awaitProposals(100)
	rounds := c.awaitQuiesced(t, 50)
	for _, n := range c.nodes { // a quiet group keeps no mailbox buffers
		for g := uint64(1); g <= groups; g++ {
			hg := n.host.group(g)
			hg.mu.Lock()
			held := 0
			for _, b := range []*mailbox{&hg.box, &hg.spare} {
				held += cap(b.msgs) + cap(b.props) + cap(b.unreachable) + cap(b.snaps) + cap(b.transfers)
			}
			hg.mu.Unlock()
			if held != 0 {
				t.Errorf("node %d, quiet group %d: its mailboxes hold room for %d messages, proposals and reports", n.id, g, held)
			}
		}
	}

	// Quiet: no visit, no message, the leader still named.
	before := make([]uint64, len(c.nodes))
	for i, n := range c.nodes {
		before[i] = n.host.Stats().Readies
	}
	sentBy := func() (k uint64) {
		for _, n := range c.nodes {
			k += n.ep.Stats().MessagesSent
		}
		return k
	}
	sent := sentBy()
	for range 100 {
		c.round()
	}
	for i, n := range c.nodes {
		if d := n.host.Stats().Readies - before[i]; d != 0 {
			t.Errorf("node %d processed %d readies in 100 quiet rounds", n.id, d)
		}
		for g := uint64(1); g <= groups; g++ {
			if st, _ := n.host.Status(g); st.Leader != 1 {
				t.Errorf("node %d names leader %d for quiet group %d, want 1", n.id, st.Leader, g)
			}
		}
	}
	if d := sentBy() - sent; d != 0 {
		t.Errorf("%d messages sent in 100 quiet rounds", d)
	}

	// A proposal and a read wake their group only, and it quiesces again.
	was := map[uint64]int{}
	for g := uint64(1); g <= groups; g++ {
		was[g] = quiesces(c.nodes[1], g)
	}
	c.propose(c.nodes[0], 1)
	c.awaitProposals(20)
	read := make(chan error, 1)
	c.nodes[0].host.ReadIndex(2, func(_ Proposed, err error) { read <- err })
	for i := 0; len(read) == 0; i++ {
		if i == 20 {
			t.Fatal("a read of a quiet group not answered within 20 rounds")
		}
		c.round()
	}
	if err := <-read; err != nil {
		t.Fatalf("read of a quiet group: %v", err)
	}
	c.awaitQuiesced(t, 50)
	for g := uint64(1); g <= groups; g++ {
		again := quiesces(c.nodes[1], g) - was[g]
		if woke := g <= 2; (again > 0) != woke {
			t.Errorf("group %d quiesced %d more times on a follower (woken: %v)", g, again, woke)
		}
	}

	// The leader's node dies: liveness says so, its followers stop naming
	// it and elect.
	c.stop(c.nodes[0], false)
	c.setDown(1, true)
	for _, n := range c.nodes[1:] {
		for g := uint64(1); g <= groups; g++ {
			if st, _ := n.host.Status(g); st.Leader == 1 {
				t.Errorf("node %d still names dead node 1 the leader of group %d", n.id, g)
			}
		}
	}
	elected, ok := c.awaitLeadersOtherThan(1, 40)
	if !ok {
		t.Fatal("quiet groups did not elect within 40 rounds of their leader's node declared dead")
	}
	t.Logf("quiesced %d rounds after the last proposal; elected %d rounds after the leader's node was declared dead", rounds, elected)
}

// TestHostRandomFaultsQuiesce is TestHostRandomFaults with quiescence on
// and node-level liveness following the faults, plus idle spells (in
// which groups quiesce), reads and leadership transfers drawn among the
// faults: no two leaders in one term, nothing acknowledged lost, every
// group converges and takes a new proposal once healed.
func TestHostRandomFaultsQuiesce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		groups := rapid.IntRange(1, 4).Draw(rt, "groups")
		c := newHCluster(rt, rapid.Uint64().Draw(rt, "netSeed"), groups, HostConfig{Workers: 2, ProposalTimeout: 3 * time.Second, Quiesce: true})
		defer c.close()
		terms := map[[2]uint64]uint64{} // (group, term) → leader node
		round := func() {
			c.round()
			for _, n := range c.nodes {
				for g := uint64(1); g <= uint64(groups) && n.up; g++ {
					st, _ := n.host.Status(g)
					if !st.IsLeader {
						continue
					}
					k := [2]uint64{g, st.Term}
					if l, seen := terms[k]; seen && l != n.id {
						rt.Fatalf("group %d has two leaders in term %d: nodes %d and %d", g, st.Term, l, n.id)
					}
					terms[k] = n.id
				}
			}
		}
		steps := rapid.IntRange(20, 60).Draw(rt, "steps")
		for range steps {
			g := uint64(rapid.IntRange(1, groups).Draw(rt, "group"))
			n := c.nodes[rapid.IntRange(0, 2).Draw(rt, "node")]
			switch a := rapid.IntRange(0, 99).Draw(rt, "action"); {
			case a < 35:
				if l := c.leader(g); l != nil && rapid.Bool().Draw(rt, "toLeader") {
					n = l
				}
				if n.up {
					c.propose(n, g)
				}
			case a < 42:
				if n.up {
					c.stop(n, true)
					c.setDown(n.id, true)
				}
			case a < 50:
				if !n.up {
					c.start(n)
					c.setDown(n.id, false)
				}
			case a < 56:
				c.net.Partition([]uint64{n.id}, others(n.id))
				c.partitionLive(n.id, true)
			case a < 64:
				c.net.Heal()
				c.partitionLive(0, false)
			case a < 70:
				if n.up {
					n.host.ReadIndex(g, func(Proposed, error) {})
				}
			case a < 76:
				if l := c.leader(g); l != nil {
					_ = l.host.TransferLeadership(g, n.id)
				}
			case a < 80:
				if n.up {
					_ = n.host.Campaign(g)
				}
			default: // an idle spell: groups quiesce
				for range rapid.IntRange(5, 40).Draw(rt, "idleRounds") {
					round()
				}
			}
			round()
		}
		c.net.Heal()
		c.partitionLive(0, false)
		for _, n := range c.nodes {
			if !n.up {
				c.start(n)
				c.setDown(n.id, false)
			}
		}
		c.converge(400)
		c.awaitProposals(150)
		c.check()
		for g := uint64(1); g <= uint64(groups); g++ {
			c.propose(c.leader(g), g)
		}
		c.awaitProposals(100)
		c.converge(100)
		c.check()
	})
}

func others(node uint64) []uint64 {
	var out []uint64
	for i := uint64(1); i <= 3; i++ {
		if i != node {
			out = append(out, i)
		}
	}
	return out
}

// RoleChanges moves with a group's leadership and not with its commits:
// proposals that commit leave it alone, a leadership transfer moves it.
func TestHostRoleChanges(t *testing.T) {
	c := newHCluster(t, 7, 2, HostConfig{TickInterval: -1})
	defer c.close()
	c.awaitLeaders(100)
	c.converge(50)
	roles := func() (sum uint64) {
		for _, n := range c.nodes {
			sum += n.host.Stats().RoleChanges
		}
		return sum
	}
	before := roles()
	if before == 0 {
		t.Fatal("RoleChanges 0 after the groups were added and elected leaders")
	}
	lead := c.leader(1)
	for range 5 {
		c.propose(lead, 1)
	}
	c.awaitProposals(100)
	if got := roles(); got != before {
		t.Fatalf("RoleChanges went from %d to %d with only commits", before, got)
	}
	var to uint64
	for _, n := range c.nodes {
		if n != lead {
			to = n.id
			break
		}
	}
	if err := lead.host.PreferLeader(1, to); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if l := c.leader(1); l != nil && l.id == to {
			break
		}
		c.round()
	}
	if l := c.leader(1); l == nil || l.id != to {
		t.Fatalf("leadership of group 1 did not move to node %d", to)
	}
	if got := roles(); got <= before {
		t.Fatalf("RoleChanges %d after a leadership transfer, want more than %d", got, before)
	}
}
