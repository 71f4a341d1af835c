package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
)

// When a round of chores runs: the first at once; then only on a change of
// the state, the roles or the peers, a wake, or a deadline the last round
// left — an idle node's rounds stop.
func TestChoresPlanDue(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	every := time.Second
	st, st2 := &meta.State{}, &meta.State{}
	in := choresInputs{state: st, roles: 7, peers: " 2 3/2"}
	settled := func() choresPlan {
		p := choresPlan{every: every, balanceEvery: 5 * every, balanced: t0}
		p.ran(in, t0, true, choresPending{})
		return p
	}
	cases := []struct {
		name  string
		plan  func() choresPlan
		in    choresInputs
		at    time.Duration // after t0
		woken bool
		want  bool
	}{
		{"first round", func() choresPlan { return choresPlan{every: every} }, in, 0, false, true},
		{"idle: nothing changed", settled, in, time.Hour, false, false},
		{"woken", settled, in, time.Second, true, true},
		{"state applied", settled, choresInputs{state: st2, roles: 7, peers: in.peers}, time.Second, false, true},
		{"a leader changed", settled, choresInputs{state: st, roles: 8, peers: in.peers}, time.Second, false, true},
		{"a peer lost", settled, choresInputs{state: st, roles: 7, peers: " 2/2"}, time.Second, false, true},
		{"a partition quarantined by a read", settled, choresInputs{state: st, roles: 7, peers: in.peers, quarantines: 1}, time.Second, false, true},
		{"a peer reconnected", settled, choresInputs{state: st, roles: 7, peers: " 2 3/3"}, time.Second, false, true},
		{"work pending, before the next interval", func() choresPlan {
			p := settled()
			p.ran(in, t0, false, choresPending{work: true})
			return p
		}, in, every / 2, false, false},
		{"work pending, at the next interval", func() choresPlan {
			p := settled()
			p.ran(in, t0, false, choresPending{work: true})
			return p
		}, in, every, false, true},
		{"finalization waiting", func() choresPlan {
			p := settled()
			p.ran(in, t0, false, choresPending{finalizeAt: t0.Add(time.Minute)})
			return p
		}, in, time.Minute - time.Millisecond, false, false},
		{"finalization due", func() choresPlan {
			p := settled()
			p.ran(in, t0, false, choresPending{finalizeAt: t0.Add(time.Minute)})
			return p
		}, in, time.Minute, false, true},
		{"hand-back asked: balance again", func() choresPlan {
			p := settled()
			p.ran(in, t0, true, choresPending{handBack: true})
			return p
		}, in, 5 * every, false, true},
		{"roles changed since the last balance", func() choresPlan {
			p := settled()
			p.ran(choresInputs{state: st, roles: 9, peers: in.peers}, t0.Add(time.Second), false, choresPending{})
			return p
		}, choresInputs{state: st, roles: 9, peers: in.peers}, 5 * every, false, true},
	}
	for _, c := range cases {
		p := c.plan()
		if got := p.due(c.in, t0.Add(c.at), c.woken); got != c.want {
			t.Errorf("%s: due = %v, want %v", c.name, got, c.want)
		}
	}
}

// Leaderships are balanced after the roles changed or a hand-back was
// asked, and never more often than balanceEvery.
func TestChoresPlanBalance(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	in := choresInputs{roles: 3}
	p := choresPlan{every: time.Second, balanceEvery: 5 * time.Second, balanced: t0}
	if p.balance(in, t0.Add(time.Second)) {
		t.Fatal("balanced 1 s after the last")
	}
	if !p.balance(in, t0.Add(5*time.Second)) {
		t.Fatal("roles changed and 5 s passed: not balanced")
	}
	p.ran(in, t0.Add(5*time.Second), true, choresPending{})
	if p.balance(in, t0.Add(time.Hour)) {
		t.Fatal("balanced again with nothing changed")
	}
	p.ran(in, t0.Add(time.Hour), true, choresPending{handBack: true})
	if !p.balance(in, t0.Add(time.Hour+5*time.Second)) {
		t.Fatal("a hand-back was asked: not looked at again")
	}
}

// An idle cluster's members stop running chores rounds: nothing the
// rounds read changes (the inputs are stable without traffic), so no
// round walks the replicas until something happens — and a change (a new
// topic) runs one again.
func TestClusterIdleRunsNoChores(t *testing.T) {
	tc := newTestCluster(t, 3)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	rounds := func() (sum uint64) {
		for _, cn := range tc.nodes {
			sum += cn.n.asMember().choresRounds.Load()
		}
		return sum
	}
	// The chores interval is 200 ms here (10 ticks of 20 ms): a second
	// without a round on any node is five intervals skipped.
	last, since := rounds(), time.Now()
	awaitCond(t, 30*time.Second, "a second without a chores round on any node", func() error {
		if r := rounds(); r != last {
			last, since = r, time.Now()
		}
		if d := time.Since(since); d < time.Second {
			return fmt.Errorf("a round %v ago (%d in all)", d.Round(time.Millisecond), last)
		}
		return nil
	})
	if err := tc.nodes[1].n.EnsureTopic(engine.TopicSpec{Name: "payments", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "a chores round after a topic was created", func() error {
		if r := rounds(); r == last {
			return fmt.Errorf("still %d rounds", r)
		}
		return nil
	})
}
