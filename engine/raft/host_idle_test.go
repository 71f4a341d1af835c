package raft

import (
	"testing"
)

// slowGroups counts the groups of n on the slow clock.
func slowGroups(n *hostNode) int {
	n.host.mu.RLock()
	defer n.host.mu.RUnlock()
	k := 0
	for _, g := range n.host.groups {
		if g == nil {
			continue
		}
		g.mu.Lock()
		if g.slow {
			k++
		}
		g.mu.Unlock()
	}
	return k
}

// wakes is how many times group g of n left the slow clock.
func wakes(n *hostNode, g uint64) int {
	n.host.mu.RLock()
	hg := n.host.groups[g]
	n.host.mu.RUnlock()
	hg.mu.Lock()
	defer hg.mu.Unlock()
	return hg.wakes
}

// Idle groups go on the slow clock (IdleTickEvery) and cost a fraction of
// the visits; a proposal wakes its group on every replica and commits as
// before; when the leader's host stops and its peers hear of it
// (PeerUnreachable, as the gRPC transport reports a failed connection),
// the followers elect at the normal pace.
func TestHostIdleGroupsSlowDown(t *testing.T) {
	const groups = 6
	c := newHCluster(t, 7, groups, HostConfig{Workers: 4, IdleTickEvery: 10, IdleAfterTicks: 5})
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

	// Idle: every group of every node slows down.
	for range 40 {
		c.round()
	}
	for _, n := range c.nodes {
		if k := slowGroups(n); k != groups {
			t.Fatalf("node %d: %d of %d idle groups on the slow clock", n.id, k, groups)
		}
	}
	before := c.nodes[1].host.Stats().Readies
	for range 100 {
		c.round()
	}
	slowReadies := c.nodes[1].host.Stats().Readies - before
	// On the normal clock a follower processes a heartbeat every 2 ticks per
	// group: 100 rounds × 6 groups / 2 = 300 readies. Slowed tenfold: ~30.
	if slowReadies > 100 {
		t.Fatalf("a follower processed %d readies in 100 idle rounds of %d groups: not slowed", slowReadies, groups)
	}
	for g := uint64(1); g <= groups; g++ {
		if l := c.leader(g); l == nil || l.id != 1 {
			t.Fatalf("group %d lost its leader while slowed", g)
		}
	}

	// A proposal wakes its group on every replica and commits; the other
	// groups stay slowed. (Whether group 1 is slowed again by the time the
	// proposal completes depends on how long the leader's fsync took in
	// rounds: once woken, a group idle for IdleAfterTicks slows again.)
	woke := map[[2]uint64]int{} // by node and group
	for _, n := range c.nodes {
		for g := uint64(1); g <= groups; g++ {
			woke[[2]uint64{n.id, g}] = wakes(n, g)
		}
	}
	c.propose(c.leader(1), 1)
	c.awaitProposals(20)
	for i := 0; ; i++ {
		var asleep []uint64
		for _, n := range c.nodes {
			if wakes(n, 1) == woke[[2]uint64{n.id, 1}] {
				asleep = append(asleep, n.id)
			}
		}
		if len(asleep) == 0 {
			break
		}
		if i == 20 {
			t.Fatalf("group 1 did not wake on nodes %v within 20 rounds of a proposal to it", asleep)
		}
		c.round()
	}
	for _, n := range c.nodes {
		for g := uint64(2); g <= groups; g++ {
			if w := wakes(n, g) - woke[[2]uint64{n.id, g}]; w != 0 {
				t.Fatalf("node %d: group %d woke %d times though nothing was proposed to it", n.id, g, w)
			}
		}
	}

	// The leader goes away while its groups are slowed; its peers' failed
	// connections wake them and they elect within a normal election time.
	for range 40 {
		c.round()
	}
	c.stop(c.nodes[0], false)
	for _, n := range c.nodes[1:] {
		n.host.PeerUnreachable(1)
	}
	rounds, ok := c.awaitLeadersOtherThan(1, 60)
	if !ok {
		t.Fatalf("slowed groups did not elect within 60 rounds of their leader's loss")
	}
	t.Logf("idle follower: %d readies in 100 rounds; elected %d rounds after the leader's loss", slowReadies, rounds)
}

// When a follower's connection to its leader fails (PeerUnreachable, as
// the gRPC transport reports it the moment a killed leader's streams
// break), its election clock jumps by an election timeout: it elects at
// its randomized timeout instead of first waiting out the lost leader's
// lease. Only the groups that peer leads are hastened; a follower peer's
// failure changes nothing. (What it is worth is measured by the
// `failover` load scenario.)
func TestHostLeaderUnreachableHastensElection(t *testing.T) {
	const groups = 6
	c := newHCluster(t, 3, groups, HostConfig{Workers: 4})
	defer c.close()
	for g := uint64(1); g <= groups; g++ {
		if err := c.nodes[0].host.Campaign(g); err != nil {
			t.Fatal(err)
		}
	}
	c.awaitLeaders(100)
	for range 10 {
		c.round()
	}
	hastened := func(n *hostNode) uint64 { return n.host.Stats().ElectionsHastened }
	// A follower's connection to another follower fails: nothing jumps.
	c.nodes[1].host.PeerUnreachable(3)
	c.round()
	if h := hastened(c.nodes[1]); h != 0 {
		t.Fatalf("a follower peer's failure hastened %d elections", h)
	}
	c.stop(c.nodes[0], false)
	for _, n := range c.nodes[1:] {
		n.host.PeerUnreachable(1)
	}
	c.round()
	for _, n := range c.nodes[1:] {
		if h := hastened(n); h != groups {
			t.Fatalf("node %d: %d elections hastened after its leader's connection failed; want %d (one per group)", n.id, h, groups)
		}
	}
	if _, ok := c.awaitLeadersOtherThan(1, 60); !ok {
		t.Fatal("the groups of the lost leader did not elect within 60 rounds")
	}
}

// awaitLeadersOtherThan runs rounds until every group is led by a node
// other than lost, at most max of them; it returns how many it ran.
func (c *hcluster) awaitLeadersOtherThan(lost uint64, max int) (int, bool) {
	for rounds := 0; rounds <= max; rounds++ {
		all := true
		for g := uint64(1); g <= uint64(c.groups); g++ {
			l := c.leader(g)
			all = all && l != nil && l.id != lost
		}
		if all {
			return rounds, true
		}
		c.round()
	}
	return max, false
}
