package meta

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The controller's loop, modelled: nodes go down, come back and join while
// the leader starts every move NextMove gives and groups finish moves in
// any order. Every move NextMove gives is accepted by Apply, at most
// MaxMovesInFlight partitions move at once, no move targets a down node,
// and once things settle, every partition whose topic fits on the up nodes
// has all its replicas on up nodes and the up nodes' replica counts differ
// by at most one. Operators move partitions too (MoveReplicas with Pin,
// refused exactly when the target names a node down or leaving) and delete
// topics: NextMove never moves a pinned partition except to repair it (a
// replica on a node down or leaving), and the counts may stay more than
// one apart only when some partition is pinned.
func TestNextMoveModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := NewState()
		apply := func(c Command) Result {
			r := s.Apply(c)
			if err := s.check(); err != nil {
				t.Fatalf("after %+v: invariant broken: %v", c, err)
			}
			return r
		}
		apply(Command{Init: &Init{ClusterID: "c"}})
		nodes := rapid.IntRange(1, 7).Draw(t, "nodes")
		for i := range nodes {
			apply(Command{AddNode: &AddNode{Addr: fmt.Sprintf("n%d:1", i+1), Token: fmt.Sprintf("t%d", i+1)}})
		}
		for i := range rapid.IntRange(1, 4).Draw(t, "topics") {
			spec := TopicSpec{Name: fmt.Sprintf("t%d", i), Partitions: int32(rapid.IntRange(1, 12).Draw(t, "partitions")),
				ReplicationFactor: int32(rapid.IntRange(1, min(nodes, 3)).Draw(t, "rf"))}
			if r := apply(Command{CreateTopic: &CreateTopic{Spec: spec}}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		settle := func() {
			for step := 0; ; step++ {
				if step > 2000 {
					t.Fatalf("no end to the moves after 2000 steps")
				}
				if m, ok := NextMove(s); ok {
					checkMove(t, s, m)
					checkPinned(t, s, m)
					before := s.Moving()
					if r := apply(Command{MoveReplicas: &m}); r.Err != nil {
						t.Fatalf("NextMove gave %+v, refused: %v", m, r.Err)
					}
					// Operators' moves are not bounded (they may put more
					// than MaxMovesInFlight in flight); NextMove never
					// starts one beyond it.
					if after := s.Moving(); after > MaxMovesInFlight && after > before {
						t.Fatalf("NextMove took the partitions moving from %d to %d, more than %d", before, after, MaxMovesInFlight)
					}
					continue
				}
				moving := movingGroups(s)
				if len(moving) == 0 {
					return
				}
				p := rapid.SampledFrom(moving).Draw(t, "finishes")
				if r := apply(Command{FinishMove: &FinishMove{Group: p.Group, Replicas: p.Target}}); r.Err != nil {
					t.Fatalf("finish %+v: %v", p, r.Err)
				}
			}
		}
		for range rapid.IntRange(1, 8).Draw(t, "events") {
			switch rapid.IntRange(0, 6).Draw(t, "event") {
			case 0, 1: // a node goes down or comes back
				n := rapid.SampledFrom(s.Nodes()).Draw(t, "node")
				apply(Command{SetNodeDown: &SetNodeDown{ID: n.ID, Down: !n.Down}})
			case 2: // a node joins
				id := s.NextNodeID()
				apply(Command{AddNode: &AddNode{Addr: fmt.Sprintf("n%d:1", id), Token: fmt.Sprintf("t%d", id)}})
			case 3: // a node is decommissioned (refused when the rest is too small)
				n := rapid.SampledFrom(s.Nodes()).Draw(t, "leaving")
				apply(Command{DecommissionNode: &DecommissionNode{ID: n.ID}})
			case 4: // an operator moves a partition (spool cluster move)
				topics := s.Topics()
				topic := rapid.SampledFrom(topics).Draw(t, "moved topic")
				if topic.Pending() {
					break
				}
				p := rapid.IntRange(0, len(topic.Partitions)-1).Draw(t, "moved partition")
				ids := rapid.Permutation(s.Nodes()).Draw(t, "operator target")[:topic.Spec.ReplicationFactor]
				target := make([]NodeID, len(ids))
				refuse := false
				for j, n := range ids {
					target[j] = n.ID
					refuse = refuse || n.Down || n.Leaving
				}
				r := apply(Command{MoveReplicas: &MoveReplicas{Group: topic.Partitions[p].Group, Replicas: target, Pin: true}})
				if refuse != errors.Is(r.Err, ErrNodeUnavailable) || !refuse && r.Err != nil {
					t.Fatalf("operator move of %s/%d to %v (nodes %+v): %v", topic.Spec.Name, p, target, s.Nodes(), r.Err)
				}
				if after, _ := s.Topic(topic.Spec.Name); r.Err == nil && !after.Partitions[p].Pinned {
					t.Fatalf("operator move of %s/%d accepted but the partition is not pinned", topic.Spec.Name, p)
				}
			case 5: // an operator deletes a topic
				if topics := s.Topics(); len(topics) > 1 {
					name := rapid.SampledFrom(topics).Draw(t, "deleted").Spec.Name
					if r := apply(Command{DeleteTopic: &DeleteTopic{Name: name}}); r.Err != nil {
						t.Fatalf("delete topic %q: %v", name, r.Err)
					}
				}
			case 6: // a node finds its replica damaged (DropDamaged)
				topic := rapid.SampledFrom(s.Topics()).Draw(t, "damaged topic")
				if topic.Pending() {
					break
				}
				i := rapid.IntRange(0, len(topic.Partitions)-1).Draw(t, "damaged partition")
				p := topic.Partitions[i]
				n := rapid.SampledFrom(s.Nodes()).Draw(t, "damaged node").ID
				ok := slices.Contains(p.Replicas, n) && p.Target == nil && len(p.Replicas) > 1
				r := apply(Command{DropDamaged: &DropDamaged{Group: p.Group, Node: n}})
				if ok != (r.Err == nil) || r.Err != nil && !errors.Is(r.Err, ErrInvalid) {
					t.Fatalf("drop node %d's damaged replica of %s/%d %+v: %v", n, topic.Spec.Name, i, p, r.Err)
				}
			}
			// Some moves finish, some new ones start, before the next event.
			for range rapid.IntRange(0, 5).Draw(t, "steps") {
				if m, ok := NextMove(s); ok {
					checkMove(t, s, m)
					checkPinned(t, s, m)
					apply(Command{MoveReplicas: &m})
				} else if moving := movingGroups(s); len(moving) > 0 {
					p := rapid.SampledFrom(moving).Draw(t, "finishes")
					apply(Command{FinishMove: &FinishMove{Group: p.Group, Replicas: p.Target}})
				}
			}
		}
		settle()
		up := 0
		for _, n := range s.Nodes() {
			if !n.Down && !n.Leaving {
				up++
			}
		}
		// Leaving nodes hold nothing once settled (when the rest can take
		// their replicas) and are then removed; a node holding replicas
		// never is.
		for _, n := range s.Nodes() {
			r := apply(Command{RemoveNode: &RemoveNode{ID: n.ID}})
			switch {
			case r.Err == nil && (!n.Leaving || s.Holds(n.ID)):
				t.Fatalf("node %d removed while not leaving or holding replicas", n.ID)
			case r.Err != nil && n.Leaving && allFit(s, up) && !s.Holds(n.ID):
				t.Fatalf("leaving node %d holding nothing not removed: %v", n.ID, r.Err)
			case n.Leaving && allFit(s, up) && s.Holds(n.ID):
				t.Fatalf("leaving node %d still holds replicas once settled", n.ID)
			}
		}
		for _, topic := range s.Topics() {
			if int(topic.Spec.ReplicationFactor) > up {
				continue
			}
			for i, p := range topic.Partitions {
				if len(p.Replicas) != int(topic.Spec.ReplicationFactor) {
					t.Fatalf("%s/%d settled with %d replicas %v, want %d", topic.Spec.Name, i, len(p.Replicas), p.Replicas, topic.Spec.ReplicationFactor)
				}
				for _, id := range p.Replicas {
					if n, _ := s.Node(id); n.Down {
						t.Fatalf("%s/%d keeps a replica on node %d, which is down, with %d nodes up", topic.Spec.Name, i, id, up)
					}
				}
			}
		}
		pinned := slices.ContainsFunc(s.Topics(), func(t Topic) bool {
			return slices.ContainsFunc(t.Partitions, func(p Partition) bool { return p.Pinned })
		})
		if sp := upSpread(s); sp > 1 && allFit(s, up) && !pinned {
			t.Fatalf("settled with the up nodes' replica counts %d apart", sp)
		}
	})
}

func checkMove(t *rapid.T, s *State, m MoveReplicas) {
	for _, id := range m.Replicas {
		n, ok := s.Node(id)
		if !ok {
			t.Fatalf("move %+v names unknown node %d", m, id)
		}
		if n.Down || n.Leaving {
			t.Fatalf("move %+v targets node %d, which is down", m, id)
		}
	}
}

// checkPinned: a move of a pinned partition is a repair: where it is going
// names a node down or leaving, which the move replaces, or is short of
// the replication factor (a damaged replica dropped), which it fills.
func checkPinned(t *rapid.T, s *State, m MoveReplicas) {
	for _, topic := range s.Topics() {
		for i, p := range topic.Partitions {
			if p.Group != m.Group || !p.Pinned {
				continue
			}
			cur := p.Replicas
			if p.Target != nil {
				cur = p.Target
			}
			if len(cur) < int(topic.Spec.ReplicationFactor) {
				return
			}
			for _, id := range cur {
				if n, _ := s.Node(id); n.Down || n.Leaving {
					return
				}
			}
			t.Fatalf("NextMove moves %s/%d, pinned by an operator on %v (all up), to %v", topic.Spec.Name, i, cur, m.Replicas)
		}
	}
}

func movingGroups(s *State) []Partition {
	var out []Partition
	for _, topic := range s.Topics() {
		for _, p := range topic.Partitions {
			if p.Target != nil {
				out = append(out, p)
			}
		}
	}
	return out
}

func upSpread(s *State) int {
	reps, _ := s.targetLoads()
	lo, hi := -1, -1
	for i, n := range s.Nodes() {
		if n.Down || n.Leaving {
			continue
		}
		if lo < 0 || reps[i] < lo {
			lo = reps[i]
		}
		hi = max(hi, reps[i])
	}
	return hi - lo
}

// allFit: every topic's replication factor fits on the up nodes (else some
// replicas stay on down nodes and the counts of the up ones say little).
func allFit(s *State, up int) bool {
	return !slices.ContainsFunc(s.Topics(), func(t Topic) bool { return int(t.Spec.ReplicationFactor) > up })
}

// A move NextMove cannot make (no up node left outside the partition)
// leaves the partition as it is.
func TestNextMoveNowhereToGo(t *testing.T) {
	s := withNodes(3)
	s.Apply(Command{CreateTopic: &CreateTopic{Spec: TopicSpec{Name: "a", Partitions: 2, ReplicationFactor: 3}}})
	s.Apply(Command{SetNodeDown: &SetNodeDown{ID: 2, Down: true}})
	if m, ok := NextMove(s); ok {
		t.Fatalf("3 nodes, one down, replication factor 3: NextMove gave %+v, want none", m)
	}
	s.Apply(Command{AddNode: &AddNode{Addr: "n4:1", Token: "t4"}})
	m, ok := NextMove(s)
	if !ok || !slices.Equal(m.Replicas, []NodeID{1, 3, 4}) {
		t.Fatalf("node 4 joined: NextMove gave %+v %v, want node 2's replica moved to node 4 ([1 3 4])", m, ok)
	}
	if v, _ := ControllerMembers(s); !slices.Equal(v, []NodeID{1, 3, 4}) {
		t.Fatalf("controller voters %v with node 2 down, want [1 3 4]", v)
	}
}

// An operator's move that leaves the replica counts two apart is not
// balanced back: 4 nodes hold 3 replicas each; moving partition 0 off node
// 1 onto node 4 gives counts 2 3 3 4, and balancing evens them out by
// moving other partitions (without the rule it moved partition 0 straight
// back from node 4 to node 1).
func TestOperatorMoveIsNotBalancedBack(t *testing.T) {
	s := withNodes(4)
	mustApply(t, s, create("a", 4, 3))
	topic, _ := s.Topic("a")
	p0 := topic.Partitions[0]
	if !slices.Equal(p0.Replicas, []NodeID{1, 2, 3}) {
		t.Fatalf("a/0 placed on %v, want [1 2 3]", p0.Replicas)
	}
	if r := s.Apply(Command{MoveReplicas: &MoveReplicas{Group: p0.Group, Replicas: []NodeID{2, 3, 4}, Pin: true}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	mustApply(t, s, Command{FinishMove: &FinishMove{Group: p0.Group, Replicas: []NodeID{2, 3, 4}}})
	if sp := upSpread(s); sp != 2 {
		t.Fatalf("replica counts %d apart after the operator's move, want 2", sp)
	}
	for {
		m, ok := NextMove(s)
		if !ok {
			break
		}
		if m.Group == p0.Group {
			t.Fatalf("NextMove moves a/0, pinned by the operator, to %v", m.Replicas)
		}
		mustApply(t, s, Command{MoveReplicas: &m})
		mustApply(t, s, Command{FinishMove: &FinishMove{Group: m.Group, Replicas: m.Replicas}})
	}
	if topic, _ = s.Topic("a"); !slices.Equal(topic.Partitions[0].Replicas, []NodeID{2, 3, 4}) || upSpread(s) > 1 {
		t.Fatalf("settled with a/0 on %v (want the operator's [2 3 4]) and counts %d apart", topic.Partitions[0].Replicas, upSpread(s))
	}
	// A node of the pinned partition going down is still repaired.
	mustApply(t, s, Command{SetNodeDown: &SetNodeDown{ID: 4, Down: true}})
	if m, ok := NextMove(s); !ok || m.Group != p0.Group || !slices.Equal(m.Replicas, []NodeID{2, 3, 1}) {
		t.Fatalf("node 4 down: NextMove gave %+v %v, want a/0 repaired onto node 1 ([2 3 1])", m, ok)
	}
	// An operator's move onto a node that is down is refused.
	r := s.Apply(Command{MoveReplicas: &MoveReplicas{Group: topic.Partitions[1].Group, Replicas: []NodeID{1, 2, 4}, Pin: true}})
	if !errors.Is(r.Err, ErrNodeUnavailable) || !strings.Contains(r.Err.Error(), "node 4, which is down") {
		t.Fatalf("operator move onto a down node: %v, want ErrNodeUnavailable naming node 4", r.Err)
	}
}

// A move redirected back to the replicas the partition has is a move back,
// ended like any other by the group's FinishMove: the group's
// configuration may hold what the given-up move added. Only a move to
// where a partition already is while it does not move changes nothing.
func TestMoveBack(t *testing.T) {
	s := withNodes(4)
	s.Apply(Command{CreateTopic: &CreateTopic{Spec: TopicSpec{Name: "a", Partitions: 1, ReplicationFactor: 3}}})
	part := func() Partition { tp, _ := s.Topic("a"); return tp.Partitions[0] }
	p := part()
	reps := slices.Clone(p.Replicas)
	if r := s.Apply(Command{MoveReplicas: &MoveReplicas{Group: p.Group, Replicas: reps}}); r.Err != nil || part().Target != nil || part().Moved {
		t.Fatalf("a move to where a settled partition is: %v, partition %+v, want nothing changed", r.Err, part())
	}
	there := []NodeID{reps[0], reps[1], 4}
	if slices.Contains(reps, 4) {
		t.Fatalf("replicas %v: the test wants node 4 spare", reps)
	}
	s.Apply(Command{MoveReplicas: &MoveReplicas{Group: p.Group, Replicas: there}})
	if r := s.Apply(Command{MoveReplicas: &MoveReplicas{Group: p.Group, Replicas: reps}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := part(); !slices.Equal(got.Target, reps) || !slices.Equal(got.Replicas, reps) {
		t.Fatalf("a move given up: partition %+v, want a move back to %v", got, reps)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	if r := s.Apply(Command{FinishMove: &FinishMove{Group: p.Group, Replicas: there}}); !errors.Is(r.Err, ErrStaleMove) {
		t.Fatalf("the given-up move's end: %v, want ErrStaleMove", r.Err)
	}
	if r := s.Apply(Command{FinishMove: &FinishMove{Group: p.Group, Replicas: reps}}); r.Err != nil || part().Target != nil {
		t.Fatalf("the move back's end: %v, partition %+v", r.Err, part())
	}
}

// A replica a move gives a node that neither holds nor gets one is a new
// incarnation, unique in the cluster; a node keeps its incarnation while
// it holds or gets the replica (a redirected move, a move back), and
// loses it with the replica, so that a later move back gives a new one.
// The state encodes and decodes with them.
func TestMoveIncarnations(t *testing.T) {
	s := withNodes(5)
	s.Apply(Command{CreateTopic: &CreateTopic{Spec: TopicSpec{Name: "a", Partitions: 1, ReplicationFactor: 3}}})
	part := func() Partition { tp, _ := s.Topic("a"); return tp.Partitions[0] }
	p := part()
	reps := slices.Clone(p.Replicas)
	var spare []NodeID
	for id := NodeID(1); id <= 5; id++ {
		if !slices.Contains(reps, id) {
			spare = append(spare, id)
		}
	}
	for _, id := range reps {
		if inc := p.Incarnation(id); inc != 0 {
			t.Fatalf("node %d placed with the topic has incarnation %d, want 0", id, inc)
		}
	}
	must := func(c Command) {
		t.Helper()
		if r := s.Apply(c); r.Err != nil {
			t.Fatal(r.Err)
		}
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
		b, err := EncodeState(s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecodeState(b)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.Clone(), s.Clone(); !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded state differs:\n%+v\nwant\n%+v", got, want)
		}
	}
	// Away from reps[2] onto spare[0]: spare[0] gets incarnation 1.
	away := []NodeID{reps[0], reps[1], spare[0]}
	must(Command{MoveReplicas: &MoveReplicas{Group: p.Group, Replicas: away}})
	if inc := part().Incarnation(spare[0]); inc != 1 {
		t.Fatalf("incarnation of the node a move adds: %d, want 1", inc)
	}
	// Redirected onto spare[1] too: spare[0] keeps 1, spare[1] gets 2.
	wider := []NodeID{reps[0], spare[0], spare[1]}
	must(Command{MoveReplicas: &MoveReplicas{Group: p.Group, Replicas: wider}})
	if a, b := part().Incarnation(spare[0]), part().Incarnation(spare[1]); a != 1 || b != 2 {
		t.Fatalf("after a redirect: incarnations %d, %d, want 1, 2", a, b)
	}
	must(Command{FinishMove: &FinishMove{Group: p.Group, Replicas: wider}})
	// reps[1] and reps[2] left with the finished move; moved back, each
	// is a new incarnation.
	must(Command{MoveReplicas: &MoveReplicas{Group: p.Group, Replicas: reps}})
	if a, b := part().Incarnation(reps[1]), part().Incarnation(reps[2]); a != 3 || b != 4 {
		t.Fatalf("nodes moved back: incarnations %d, %d, want 3, 4", a, b)
	}
	if inc := part().Incarnation(reps[0]); inc != 0 {
		t.Fatalf("a node that kept its replica: incarnation %d, want 0", inc)
	}
	must(Command{FinishMove: &FinishMove{Group: p.Group, Replicas: reps}})
	if got := part().Incarnations; len(got) != 2 {
		t.Fatalf("after the move back: incarnations %v, want only reps[1] and reps[2]", got)
	}
}

// withNodes is a cluster's state with nodes 1 to n (addresses n1:1, ...).
func withNodes(n int) *State {
	s := NewState()
	s.Apply(Command{Init: &Init{ClusterID: "c"}})
	for i := range n {
		s.Apply(Command{AddNode: &AddNode{Addr: fmt.Sprintf("n%d:1", i+1), Token: fmt.Sprintf("t%d", i+1)}})
	}
	return s
}

// A damaged replica is dropped and replaced: DropDamaged moves the
// partition to its other replicas (refused for a node holding none, while
// the partition moves, and for its only replica); NextMove leaves it alone
// while the drop is under way, then gives it a new replica — here on the
// same node, the least loaded, under a new incarnation, so that the new
// copy is a new member of the group. The short state encodes and decodes.
func TestDropDamaged(t *testing.T) {
	s := withNodes(3)
	mustApply(t, s, create("a", 1, 3))
	mustApply(t, s, create("solo", 1, 1))
	part := func(name string) Partition { tp, _ := s.Topic(name); return tp.Partitions[0] }
	p := part("a")
	refused := func(d DropDamaged, why string) {
		t.Helper()
		if r := s.Apply(Command{DropDamaged: &d}); !errors.Is(r.Err, ErrInvalid) || !strings.Contains(r.Err.Error(), why) {
			t.Fatalf("drop %+v: %v, want ErrInvalid saying %q", d, r.Err, why)
		}
	}
	refused(DropDamaged{Group: part("solo").Group, Node: part("solo").Replicas[0]}, "only replica")
	mustApply(t, s, Command{DropDamaged: &DropDamaged{Group: p.Group, Node: 2}})
	if got := part("a"); !slices.Equal(got.Target, []NodeID{1, 3}) && !slices.Equal(got.Target, []NodeID{3, 1}) || !got.Moved {
		t.Fatalf("after dropping node 2: %+v, want a move to nodes 1 and 3", got)
	}
	refused(DropDamaged{Group: p.Group, Node: 1}, "is moving")
	for m, ok := NextMove(s); ok; m, ok = NextMove(s) {
		if m.Group == p.Group {
			t.Fatalf("NextMove moves a/0 (%+v) while its damaged replica is dropped", m)
		}
		mustApply(t, s, Command{MoveReplicas: &m})
		mustApply(t, s, Command{FinishMove: &FinishMove{Group: m.Group, Replicas: m.Replicas}})
	}
	mustApply(t, s, Command{FinishMove: &FinishMove{Group: p.Group, Replicas: part("a").Target}})
	refused(DropDamaged{Group: p.Group, Node: 2}, "holds no replica")
	b, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := DecodeState(b); err != nil || !reflect.DeepEqual(d.Clone(), s.Clone()) {
		t.Fatalf("the short state decodes as %v (%v)", d, err)
	}
	m, ok := NextMove(s)
	if !ok || m.Group != p.Group || len(m.Replicas) != 3 || !slices.Contains(m.Replicas, 2) {
		t.Fatalf("NextMove gave %+v %v, want a/0 back to three replicas, node 2 among them", m, ok)
	}
	mustApply(t, s, Command{MoveReplicas: &m})
	if inc := part("a").Incarnation(2); inc == 0 {
		t.Fatalf("node 2's new replica of a/0 has incarnation 0, the damaged one's")
	}
	mustApply(t, s, Command{FinishMove: &FinishMove{Group: p.Group, Replicas: m.Replicas}})
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}
