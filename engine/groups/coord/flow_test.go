package coord

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
)

// flow drives one group the way the driver and the sidecars will: every
// command stamped with a logical clock, every revocation answered (commit,
// then RevokeDone) when settle is called. It records, for each partition,
// every owner it had and whether it was ever revoked or left without an
// owner, so a test can tell the partitions that moved from those that
// kept flowing.
type flow struct {
	t        testing.TB
	s        *State
	group    string
	now      int64
	sessions map[string]string // member → session
	restarts int
	// Since the last mark:
	revoked map[TopicPartition]bool // ever being revoked
	gap     map[TopicPartition]bool // ever without an owner
	before  map[TopicPartition]string
}

func newFlow(t testing.TB) *flow {
	f := &flow{t: t, s: NewState(), group: "g", now: 1_000, sessions: map[string]string{}}
	f.mark()
	return f
}

func (f *flow) owners() map[TopicPartition]string {
	out := map[TopicPartition]string{}
	for _, m := range f.s.Members(f.group) {
		for _, o := range m.Owned {
			out[o.TopicPartition] = m.ID
		}
	}
	return out
}

// mark starts counting moves afresh.
func (f *flow) mark() {
	f.before = f.owners()
	f.revoked, f.gap = map[TopicPartition]bool{}, map[TopicPartition]bool{}
}

// apply applies a command that must be accepted and notes what it did.
func (f *flow) apply(c Command) Result {
	f.t.Helper()
	c.Group, c.AtMs = f.group, f.now
	f.now += 10
	r := f.s.Apply(c)
	if r.Err != nil {
		f.t.Fatalf("%s: %v", describe(c), r.Err)
	}
	if err := f.s.check(); err != nil {
		f.t.Fatalf("after %s: %v", describe(c), err)
	}
	owners := f.owners()
	for _, t := range f.s.Topics(f.group) {
		for p := range t.Partitions {
			if _, ok := owners[TopicPartition{t.Name, p}]; !ok {
				f.gap[TopicPartition{t.Name, p}] = true
			}
		}
	}
	for _, m := range f.s.Members(f.group) {
		for _, o := range m.Owned {
			if o.Revoking {
				f.revoked[o.TopicPartition] = true
			}
		}
	}
	return r
}

func topicsOf(names ...string) []Topic {
	var out []Topic
	for _, n := range names {
		// 12 partitions on nodes 1-5, three replicas each.
		t := Topic{Name: n, Partitions: 12}
		for p := range 12 {
			t.Replicas = append(t.Replicas, []NodeID{NodeID(p%5 + 1), NodeID((p+1)%5 + 1), NodeID((p+2)%5 + 1)})
		}
		out = append(out, t)
	}
	return out
}

func (f *flow) join(id string, node NodeID, topics ...string) {
	f.t.Helper()
	if topics == nil {
		topics = []string{"orders"}
	}
	if _, ok := f.sessions[id]; !ok {
		f.sessions[id] = "s0"
	}
	f.apply(Command{Join: &Join{Member: id, Session: f.sessions[id], Node: node, Topics: topicsOf(topics...)}})
}

// restart joins the member again as a new incarnation.
func (f *flow) restart(id string, node NodeID) {
	f.t.Helper()
	f.restarts++
	f.sessions[id] = fmt.Sprintf("s%d", f.restarts)
	f.join(id, node)
}

func (f *flow) leave(id string) {
	f.t.Helper()
	f.apply(Command{Leave: &Leave{Member: id, Session: f.sessions[id]}})
	delete(f.sessions, id)
}

// settle answers every revocation: the member commits each partition it
// gives up, then says RevokeDone, until nothing is being revoked.
func (f *flow) settle() {
	f.t.Helper()
	for range 100 {
		done := true
		for _, m := range f.s.Members(f.group) {
			a, _ := f.s.Assignment(f.group, m.ID)
			if len(a.Revoking) == 0 {
				continue
			}
			done = false
			for _, tp := range a.Revoking {
				f.apply(Command{Commit: &Commit{Member: m.ID, Generation: a.Generation, TopicPartition: tp, Position: Position{Next: f.now}}})
			}
			f.apply(Command{RevokeDone: &RevokeDone{Member: m.ID, Generation: a.Generation, Partitions: a.Revoking}})
		}
		if done {
			return
		}
	}
	f.t.Fatalf("revocations do not end")
}

// moved returns the partitions whose owner changed since the mark, and
// checks that every other one kept its owner throughout: never revoked,
// never without an owner.
func (f *flow) moved() int {
	f.t.Helper()
	after := f.owners()
	n := 0
	for _, tp := range slices.SortedFunc(maps.Keys(after), compareTP) {
		if was, ok := f.before[tp]; ok && was == after[tp] {
			if f.revoked[tp] || f.gap[tp] {
				f.t.Errorf("%s/%d stayed with %s but was revoked (%v) or without an owner (%v) on the way", tp.Topic, tp.Partition, was, f.revoked[tp], f.gap[tp])
			}
			continue
		}
		n++
	}
	return n
}

// counts returns the partitions each member owns.
func (f *flow) counts() map[string]int {
	out := map[string]int{}
	for _, m := range f.s.Members(f.group) {
		out[m.ID] = len(m.Owned)
	}
	return out
}

func wantCounts(t testing.TB, got map[string]int, want map[string]int) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Fatalf("partitions per member %v, want %v", got, want)
	}
}

// Three members share 12 partitions; one leaves: only its 4 partitions
// move, at once (no revocation), and the others keep flowing.
func TestFlowThreeMembersOneLeaves(t *testing.T) {
	f := newFlow(t)
	for i := range 3 {
		f.join(fmt.Sprintf("m%d", i+1), NodeID(i+1))
		f.settle()
	}
	wantCounts(t, f.counts(), map[string]int{"m1": 4, "m2": 4, "m3": 4})
	f.mark()
	f.leave("m3")
	if !f.s.groups[f.group].settled() {
		t.Fatalf("a leave started revocations")
	}
	if n := f.moved(); n != 4 {
		t.Fatalf("%d partitions moved, want the 4 of the member that left", n)
	}
	wantCounts(t, f.counts(), map[string]int{"m1": 6, "m2": 6})
	t.Logf("one of three leaves: 4 of 12 partitions moved, none revoked")
}

// A rolling restart: each member in turn stops (drains, commits, leaves)
// and starts again. Each restart moves the stopped member's partitions
// away and the fair share back, and nothing else.
func TestFlowRollingRestart(t *testing.T) {
	f := newFlow(t)
	for i := range 3 {
		f.join(fmt.Sprintf("m%d", i+1), NodeID(i+1))
		f.settle()
	}
	total := 0
	for i := range 3 {
		id := fmt.Sprintf("m%d", i+1)
		f.mark()
		f.leave(id)
		f.settle()
		out := f.moved()
		f.mark()
		f.join(id, NodeID(i+1))
		f.settle()
		back := f.moved()
		if out != 4 || back != 4 {
			t.Fatalf("restart of %s: %d partitions moved away and %d back, want 4 and 4", id, out, back)
		}
		wantCounts(t, f.counts(), map[string]int{"m1": 4, "m2": 4, "m3": 4})
		total += out + back
	}
	t.Logf("rolling restart of 3 members, 12 partitions, leaving on stop: %d partition moves in all", total)

	// A restart within the session timeout that does not leave (kill -9
	// and back, or a new process on the same node) moves nothing: the
	// member keeps its partitions in a new generation.
	for i := range 3 {
		id := fmt.Sprintf("m%d", i+1)
		old, _ := f.s.Assignment(f.group, id)
		f.mark()
		f.restart(id, NodeID(i+1))
		if n := f.moved(); n != 0 {
			t.Fatalf("a quick restart of %s moved %d partitions", id, n)
		}
		a, _ := f.s.Assignment(f.group, id)
		if a.Generation <= old.Generation {
			t.Fatalf("a restart kept generation %d", a.Generation)
		}
		// The previous incarnation's commits are fenced.
		c := Command{Group: f.group, AtMs: f.now, Commit: &Commit{Member: id, Generation: old.Generation, TopicPartition: a.Owned[0], Position: Position{Next: 1 << 40}}}
		if r := f.s.Apply(c); !errors.Is(r.Err, ErrFenced) {
			t.Fatalf("a commit of the previous incarnation (generation %d): %v, want ErrFenced", old.Generation, r.Err)
		}
	}
}

// Scale 3 → 5 → 3: each new member takes its share (at most ceil(P/N)
// partitions), taken from the others by revocation; each member that
// leaves hands its partitions over at once.
func TestFlowScale(t *testing.T) {
	f := newFlow(t)
	for i := range 3 {
		f.join(fmt.Sprintf("m%d", i+1), NodeID(i+1))
		f.settle()
	}
	f.mark()
	up := 0
	for i := 3; i < 5; i++ {
		f.join(fmt.Sprintf("m%d", i+1), NodeID(i+1))
		f.settle()
		n := f.moved()
		if n > ceilDiv(12, i+1) {
			t.Fatalf("member %d joining moved %d partitions, more than ceil(12/%d)", i+1, n, i+1)
		}
		up += n
		f.mark()
	}
	if c := f.counts(); slices.Max(slices.Collect(maps.Values(c)))-slices.Min(slices.Collect(maps.Values(c))) > 1 {
		t.Fatalf("after scaling up: %v", c)
	}
	down := 0
	for _, id := range []string{"m5", "m4"} {
		f.leave(id)
		f.settle()
		down += f.moved()
		f.mark()
	}
	wantCounts(t, f.counts(), map[string]int{"m1": 4, "m2": 4, "m3": 4})
	// 3 → 4 moves 3 (the new member's share), 4 → 5 moves 2; 5 → 4 moves
	// the leaver's 2, 4 → 3 the leaver's 3: the fewest any assignment
	// keeping counts one apart can move.
	if up != 5 || down != 5 {
		t.Fatalf("scaling 3 → 5 moved %d partitions and 5 → 3 moved %d, want 5 and 5", up, down)
	}
	t.Logf("scale 3 → 5 moved %d partitions, 5 → 3 moved %d (12 partitions)", up, down)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// A partition is never granted before its owner says RevokeDone, however
// long that takes, and goes at once when the owner's revocation times out.
func TestFlowRevocationWaitsThenTimesOut(t *testing.T) {
	f := newFlow(t)
	f.join("m1", 1)
	f.join("m2", 2)
	a, _ := f.s.Assignment(f.group, "m1")
	if len(a.Revoking) != 6 {
		t.Fatalf("m1 revokes %v, want 6 partitions", a.Revoking)
	}
	f.now += DefaultRevokeTimeoutMs - 100
	f.apply(Command{Heartbeat: &Heartbeat{Member: "m1", Session: "s0"}})
	f.apply(Command{Heartbeat: &Heartbeat{Member: "m2", Session: "s0"}})
	if b, _ := f.s.Assignment(f.group, "m2"); len(b.Owned) != 0 {
		t.Fatalf("m2 owns %v before m1 gave anything up", b.Owned)
	}
	due, wake := Next(f.s, f.now)
	if len(due) != 0 || wake == 0 {
		t.Fatalf("Next before the deadline: %v, wake at %d", due, wake)
	}
	f.now = wake
	due, _ = Next(f.s, f.now)
	if len(due) != 1 || due[0].Expire.Member != "m1" {
		t.Fatalf("Next at the deadline: %+v, want an Expire of m1", due)
	}
	r := f.s.Apply(due[0])
	if r.Err != nil || r.Expired != RevokeTimedOut {
		t.Fatalf("expire: %+v", r)
	}
	if b, _ := f.s.Assignment(f.group, "m2"); len(b.Owned) != 12 {
		t.Fatalf("m2 owns %v after m1 expired, want all 12", b.Owned)
	}
}

// Members join while others still give partitions up: whoever finishes
// first, no RevokeDone starts another revocation (the larger quota does
// not change hands halfway), and the group ends balanced with each
// partition moved at most once.
func TestFlowJoinsDuringRevocations(t *testing.T) {
	for _, order := range [][]string{{"m1", "m2"}, {"m2", "m1"}} {
		for p := int32(2); p <= 12; p++ {
			f := newFlow(t)
			join := func(id string, node NodeID) {
				f.apply(Command{Join: &Join{Member: id, Session: "s0", Node: node, Topics: []Topic{{Name: "orders", Partitions: p}}}})
			}
			join("m1", 1)
			join("m2", 2)
			f.settle()
			f.mark()
			join("m3", 3)
			join("m4", 4)
			for _, id := range order {
				a, _ := f.s.Assignment(f.group, id)
				if len(a.Revoking) == 0 {
					continue
				}
				before := f.revokingCount()
				f.apply(Command{RevokeDone: &RevokeDone{Member: id, Generation: a.Generation, Partitions: a.Revoking}})
				if after := f.revokingCount(); after > before-len(a.Revoking) {
					t.Fatalf("%d partitions, %s gave up %d: revocations went from %d to %d", p, id, len(a.Revoking), before, after)
				}
			}
			f.settle()
			if n := f.moved(); n > int(p)/2+1 {
				t.Fatalf("%d partitions, 2 → 4 members: %d moved", p, n)
			}
		}
	}
}

func (f *flow) revokingCount() int {
	n := 0
	for _, m := range f.s.Members(f.group) {
		for _, o := range m.Owned {
			if o.Revoking {
				n++
			}
		}
	}
	return n
}

// A member whose breakers have held its deliveries too long (degraded)
// hands its partitions to the healthy members, and only its partitions
// move; when every member is degraded (a downstream down for all of them)
// the flag counts for nothing and the group is shared as if none were; a
// member that recovers takes the partitions of the degraded ones.
func TestFlowDegradedMember(t *testing.T) {
	f := newFlow(t)
	for i := range 3 {
		f.join(fmt.Sprintf("m%d", i+1), NodeID(i+1))
		f.settle()
	}
	beat := func(id string, degraded bool) {
		f.t.Helper()
		f.apply(Command{Heartbeat: &Heartbeat{Member: id, Session: f.sessions[id], Degraded: degraded}})
	}
	f.mark()
	beat("m3", true)
	f.settle()
	if n := f.moved(); n != 4 {
		t.Fatalf("%d partitions moved, want the 4 of the degraded member", n)
	}
	wantCounts(t, f.counts(), map[string]int{"m1": 6, "m2": 6, "m3": 0})
	beat("m1", true)
	f.settle()
	wantCounts(t, f.counts(), map[string]int{"m1": 0, "m2": 12, "m3": 0})
	beat("m2", true) // every member degraded: shared as if none were
	f.settle()
	wantCounts(t, f.counts(), map[string]int{"m1": 4, "m2": 4, "m3": 4})
	f.mark()
	beat("m1", true) // a degraded member saying so again changes nothing
	if n := f.moved(); n != 0 || !f.s.groups[f.group].settled() {
		t.Fatalf("a repeated heartbeat moved %d partitions", n)
	}
	beat("m1", false) // recovers: the only healthy member takes everything
	f.settle()
	wantCounts(t, f.counts(), map[string]int{"m1": 12, "m2": 0, "m3": 0})
	beat("m2", false)
	beat("m3", false)
	f.settle()
	wantCounts(t, f.counts(), map[string]int{"m1": 4, "m2": 4, "m3": 4})
	// A Join (a restart) clears the flag.
	beat("m3", true)
	f.settle()
	f.restart("m3", 3)
	f.settle()
	wantCounts(t, f.counts(), map[string]int{"m1": 4, "m2": 4, "m3": 4})
}
