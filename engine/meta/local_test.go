package meta

import (
	"fmt"
	"testing"
)

// PlanLocal over every combination of a node's place in a partition (holds,
// gets, neither; a move under way or not), the copies it runs (none, under
// the id it must run under, under an earlier one) and a first placement or
// not: after the plan, a node in Replicas serves from its own copy under
// want, a node only in Target learns under want and serves from the
// others, a node in neither has no copy once the move is over and keeps
// what it has while one is under way; a node with storage off has none.
// Copies are only stopped or dropped when they exist, dropped only when the
// partition moved away for good, and never reopened under the id they run.
func TestPlanLocalEveryCase(t *testing.T) {
	const self, want, old = NodeID(2), uint64(2 | 3<<32), uint64(2 | 1<<32)
	places := map[string]Partition{
		"holds":                   {Group: 5, Replicas: []NodeID{1, 2, 3}},
		"holds, moved":            {Group: 5, Replicas: []NodeID{1, 2, 3}, Moved: true},
		"holds, move under way":   {Group: 5, Replicas: []NodeID{1, 2, 3}, Target: []NodeID{1, 2, 4}, Moved: true},
		"gets":                    {Group: 5, Replicas: []NodeID{1, 3, 4}, Target: []NodeID{1, 2, 3}, Moved: true},
		"neither, move over":      {Group: 5, Replicas: []NodeID{1, 3, 4}, Moved: true},
		"neither, move under way": {Group: 5, Replicas: []NodeID{1, 3, 4}, Target: []NodeID{1, 3, 5}, Moved: true},
	}
	ids := []uint64{0, want, old}
	for name, mp := range places {
		for _, placed := range []bool{false, true} {
			for _, serving := range ids {
				for _, learning := range ids {
					if !placed && (serving != 0 || learning != 0) {
						continue // no copies before the first placement
					}
					cur := LocalCopies{Placed: placed, Serving: serving, Learning: learning}
					t.Run(fmt.Sprintf("%s/%+v", name, cur), func(t *testing.T) {
						checkPlan(t, self, mp, want, cur)
						if p := PlanLocal(0, mp, want, LocalCopies{Placed: placed}); p != (LocalPlan{Want: want}) {
							t.Errorf("storage off: %+v, want nothing", p)
						}
					})
				}
			}
		}
	}
}

func checkPlan(t *testing.T, self NodeID, mp Partition, want uint64, cur LocalCopies) {
	t.Helper()
	p := PlanLocal(self, mp, want, cur)
	s, l := cur.Serving, cur.Learning
	if (p.StopServing || p.DropServing) && s == 0 || (p.StopLearning || p.DropLearning) && l == 0 {
		t.Fatalf("%+v stops or drops a copy that does not exist", p)
	}
	if p.StopServing && p.DropServing || p.StopLearning && p.DropLearning {
		t.Fatalf("%+v both stops and drops a copy", p)
	}
	if p.StopServing || p.DropServing {
		s = 0
	}
	if p.StopLearning || p.DropLearning {
		l = 0
	}
	if p.Promote {
		if l != want || s != 0 {
			t.Fatalf("%+v promotes a learning copy %d (serving %d)", p, l, s)
		}
		s, l = l, 0
	}
	if p.OpenServing {
		if s != 0 {
			t.Fatalf("%+v opens a serving copy over %d", p, s)
		}
		s = want
	}
	if p.OpenLearning {
		if l != 0 {
			t.Fatalf("%+v opens a learning copy over %d", p, l)
		}
		l = want
	}
	holds, gets := contains(mp.Replicas, self), !contains(mp.Replicas, self) && contains(mp.Target, self)
	switch {
	case holds:
		if s != want || l != 0 {
			t.Fatalf("%+v: holds, ends serving %d learning %d; want serving %d", p, s, l, want)
		}
		if cur.Serving == want && p.StopServing {
			t.Fatalf("%+v: reopens the copy it serves under want", p)
		}
	case gets:
		if s != 0 || l != want {
			t.Fatalf("%+v: gets, ends serving %d learning %d; want learning %d", p, s, l, want)
		}
	case mp.Target == nil:
		if s != 0 || l != 0 {
			t.Fatalf("%+v: moved away, keeps serving %d learning %d", p, s, l)
		}
	default:
		if p != (LocalPlan{Want: want}) {
			t.Fatalf("%+v: in neither while a move is under way, yet changes its copies", p)
		}
	}
	if (p.DropServing || p.DropLearning) && (holds || gets || mp.Target != nil) {
		t.Fatalf("%+v drops a copy of a partition not moved away for good", p)
	}
	if p.Bootstrap && (!p.OpenServing || mp.Moved) {
		t.Fatalf("%+v bootstraps a group that moved", p)
	}
}

func contains(s []NodeID, n NodeID) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}
