package meta

import "slices"

// LocalCopies are a node's copies of one partition's log, as it runs them
// when a new controller state arrives. A copy is named by the raft replica
// id it runs under (0: no such copy).
type LocalCopies struct {
	// Placed: the node knew the partition placed (its raft group) before.
	Placed bool
	// Serving is the copy reads and writes go to; 0: the partition is
	// served from the replicas on other nodes.
	Serving uint64
	// Learning is the copy the node is getting in a replica move (in the
	// move's target, not yet in its replicas): it copies the leader's log
	// while the partition is served elsewhere.
	Learning uint64
}

// LocalPlan is what a node does with its copies of a partition to match
// the controller's state (PlanLocal). The executor stops or drops the
// copies named first, then promotes or opens as said.
type LocalPlan struct {
	// StopServing / StopLearning stop a copy and keep its data: it runs
	// under a replica id the group no longer counts, or the partition may
	// come back (a move under way).
	StopServing, StopLearning bool
	// DropServing / DropLearning stop a copy of a partition moved away from
	// the node, the move over; its data goes once the controller's leader
	// confirms no replica is wanted here.
	DropServing, DropLearning bool
	// Promote: the move finished; the learning copy becomes the serving one.
	Promote bool
	// OpenServing opens a serving copy under Want (its data, if any, from
	// disk); Bootstrap: the partition never moved, so an empty copy writes
	// the group's first entries itself.
	OpenServing, Bootstrap bool
	// OpenLearning opens a learning copy under Want.
	OpenLearning bool
	// Want is the replica id the node's copy must run under (its
	// incarnation in the partition).
	Want uint64
}

// PlanLocal decides what node self does with its copies cur of partition mp
// (self 0: a node with storage off, which holds none), its copy having to
// run under replica id want:
//
//   - a node in Replicas serves from its own copy under want: a learning
//     copy is promoted when the move that brought it finished, a copy under
//     another id (the node left the partition and was given it again while
//     it applied neither step) is stopped and opened again from disk;
//   - a node only in Target (getting a replica) serves from the others and
//     learns under want: a serving copy of an earlier state is stopped (its
//     data is opened again as the learning copy);
//   - a node in neither drops its copies once the move is over (Target nil);
//     while a move is under way the group's configuration may still count
//     it (a learner a given-up move added), so its copies are kept.
//
// It is pure: the caller opens logs and raft replicas as the plan says.
func PlanLocal(self NodeID, mp Partition, want uint64, cur LocalCopies) LocalPlan {
	plan := LocalPlan{Want: want}
	if self == 0 {
		return plan
	}
	holds := slices.Contains(mp.Replicas, self)
	gets := !holds && slices.Contains(mp.Target, self)
	serving, learning := cur.Serving, cur.Learning
	if gets && serving != 0 {
		// Served from a copy of an earlier state: the partition is coming
		// back; the copy is opened again as the learning one.
		plan.StopServing, serving = true, 0
	}
	if gets && learning != 0 && learning != want {
		plan.StopLearning, learning = true, 0
	}
	switch {
	case !cur.Placed || holds && serving == 0 && learning == 0:
		// Placed (or held) here for the first time this run.
		plan.OpenServing, plan.Bootstrap = holds, holds && !mp.Moved
		if holds {
			serving = want
		}
		plan.OpenLearning = gets
	case holds && serving == 0 && learning == want:
		// The move finished: serve from this node's learning copy.
		plan.Promote, serving, learning = true, learning, 0
	case holds && serving == 0:
		// The move finished, but the learning copy runs under an id the
		// group no longer counts: opened again from disk under want.
		plan.StopLearning, plan.OpenServing, serving, learning = true, true, want, 0
	case gets && learning == 0:
		plan.OpenLearning = true
	case !holds && !gets && (serving != 0 || learning != 0) && mp.Target == nil:
		plan.DropServing, plan.DropLearning = serving != 0, learning != 0
	}
	if holds && serving != 0 && learning != 0 {
		// A learning copy beside a serving one: no move makes it (a
		// promotion replaces the serving copy), so it is a stray: stopped.
		plan.StopLearning, learning = true, 0
	}
	if holds && serving != 0 && serving != want {
		plan.StopServing, plan.OpenServing, plan.Bootstrap = true, true, false
	}
	return plan
}
