package meta

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The controller's loop, modelled: nodes go down, come back and join while
// the leader starts every move NextMove gives and groups finish moves in
// any order. Every move NextMove gives is accepted by Apply, at most
// MaxMovesInFlight partitions move at once, no move targets a down node,
// and once things settle, every partition whose topic fits on the up nodes
// has all its replicas on up nodes and the up nodes' replica counts differ
// by at most one.
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
					if r := apply(Command{MoveReplicas: &m}); r.Err != nil {
						t.Fatalf("NextMove gave %+v, refused: %v", m, r.Err)
					}
					if s.Moving() > MaxMovesInFlight {
						t.Fatalf("%d partitions moving, more than %d", s.Moving(), MaxMovesInFlight)
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
			switch rapid.IntRange(0, 4).Draw(t, "event") {
			case 0, 1: // a node goes down or comes back
				n := rapid.SampledFrom(s.Nodes()).Draw(t, "node")
				apply(Command{SetNodeDown: &SetNodeDown{ID: n.ID, Down: !n.Down}})
			case 2: // a node joins
				id := s.NextNodeID()
				apply(Command{AddNode: &AddNode{Addr: fmt.Sprintf("n%d:1", id), Token: fmt.Sprintf("t%d", id)}})
			case 3: // a node is decommissioned (refused when the rest is too small)
				n := rapid.SampledFrom(s.Nodes()).Draw(t, "leaving")
				apply(Command{DecommissionNode: &DecommissionNode{ID: n.ID}})
			}
			// Some moves finish, some new ones start, before the next event.
			for range rapid.IntRange(0, 5).Draw(t, "steps") {
				if m, ok := NextMove(s); ok {
					checkMove(t, s, m)
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
				for _, id := range p.Replicas {
					if n, _ := s.Node(id); n.Down {
						t.Fatalf("%s/%d keeps a replica on node %d, which is down, with %d nodes up", topic.Spec.Name, i, id, up)
					}
				}
			}
		}
		if sp := upSpread(s); sp > 1 && allFit(s, up) {
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
	s := NewState()
	s.Apply(Command{Init: &Init{ClusterID: "c"}})
	for i := range 3 {
		s.Apply(Command{AddNode: &AddNode{Addr: fmt.Sprintf("n%d:1", i+1), Token: fmt.Sprintf("t%d", i+1)}})
	}
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

// A move redirected back to the replicas the partition has is a move back,
// ended like any other by the group's FinishMove: the group's
// configuration may hold what the given-up move added. Only a move to
// where a partition already is while it does not move changes nothing.
func TestMoveBack(t *testing.T) {
	s := NewState()
	s.Apply(Command{Init: &Init{ClusterID: "c"}})
	for i := range 4 {
		s.Apply(Command{AddNode: &AddNode{Addr: fmt.Sprintf("n%d:1", i+1), Token: fmt.Sprintf("t%d", i+1)}})
	}
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
