package meta

import (
	"slices"

	"go.etcd.io/raft/v3/raftpb"
)

// ControllerMembers says who should be in group 0: MaxControllerVoters (3)
// nodes vote, the lowest ids of the nodes neither down nor leaving first
// (then the lowest of the others, while fewer are left); every other node is a learner (it
// receives the controller's state but takes no part in elections or
// commits). With fewer nodes, all vote. Both lists are sorted; both are
// empty before the first node is added.
func ControllerMembers(s *State) (voters, learners []NodeID) {
	for _, gone := range []bool{false, true} {
		for _, n := range s.nodes {
			if n.gone() == gone && len(voters) < MaxControllerVoters {
				voters = append(voters, n.ID)
			}
		}
	}
	for _, n := range s.nodes {
		if !slices.Contains(voters, n.ID) {
			learners = append(learners, n.ID)
		}
	}
	slices.Sort(voters)
	return voters, learners
}

// NextConfChange returns the next membership change of group 0, from its
// current configuration cs toward ControllerMembers(s), and false when
// there is nothing to do. Each change is one step raft applies on its own;
// the controller leader proposes it, waits for it to be applied, and asks
// again. The steps, in this order:
//
//  0. A configuration with no voter at all (raft never has one after its
//     bootstrap) gets the first wanted voter as a voter at once: raft
//     refuses any change that leaves the group without a voter.
//  1. Leave a joint configuration (an empty ConfChangeV2). Nothing else can
//     change while raft is joint, and a joint configuration must not be
//     left behind (raft refuses the leave if AutoLeave got there first, at
//     no harm).
//  2. Add, as a learner, each member missing from cs, future voters first,
//     lowest id first. A learner never counts in a quorum, so adding one
//     cannot cost availability; a future voter starts as a learner so that
//     it catches up before it counts.
//  3. Promote a learner that should vote (one voter added, a simple change).
//     Promotions come before demotions and removals: the voter set grows
//     before it shrinks, so the number of failures the group survives never
//     drops along the way (3 voters → 4 → 3, not 3 → 2 → 3). The caller
//     should promote only a learner whose log has caught up with the
//     leader's (raft's Progress.Match), or the new voter may stall commits.
//  4. Demote a voter that should be a learner (one voter removed).
//  5. Remove a voter, then a learner, that is not a node of the state
//     (cannot happen through Apply, which never removes nodes, but a
//     configuration from elsewhere converges too).
//
// Every step changes at most one voter and is a simple (non-joint) change,
// so consecutive voter sets share a majority (raft's single-change rule).
// Steps 4 and 5 run only once every wanted voter votes, so they never
// remove the last voter; with no nodes in the state, the wanted voter set
// is empty and NextConfChange changes nothing. A demotion or removal of the
// current leader is best preceded by a leadership transfer to a wanted
// voter (the caller knows the leader; this function does not).
func NextConfChange(cs raftpb.ConfState, s *State) (raftpb.ConfChangeV2, bool) {
	if len(cs.VotersOutgoing) > 0 || len(cs.LearnersNext) > 0 {
		return raftpb.ConfChangeV2{}, true
	}
	voters, learners := ControllerMembers(s)
	if len(voters) == 0 {
		return raftpb.ConfChangeV2{}, false
	}
	isVoter := func(id uint64) bool { return slices.Contains(cs.Voters, id) }
	isLearner := func(id uint64) bool { return slices.Contains(cs.Learners, id) }
	step := func(t raftpb.ConfChangeType, id uint64) (raftpb.ConfChangeV2, bool) {
		return raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: t, NodeID: id}}}, true
	}
	if len(cs.Voters) == 0 {
		// A configuration without voters (not one raft reaches after
		// bootstrap): raft refuses any change leaving it without one, so
		// the first wanted voter votes at once; there is no log to catch up
		// with.
		return step(raftpb.ConfChangeAddNode, voters[0])
	}
	for _, id := range append(slices.Clone(voters), learners...) {
		if !isVoter(id) && !isLearner(id) {
			return step(raftpb.ConfChangeAddLearnerNode, id)
		}
	}
	for _, id := range voters {
		if !isVoter(id) {
			return step(raftpb.ConfChangeAddNode, id)
		}
	}
	for _, id := range sorted(cs.Voters) {
		if slices.Contains(learners, id) {
			return step(raftpb.ConfChangeAddLearnerNode, id)
		}
	}
	for _, ids := range [][]uint64{sorted(cs.Voters), sorted(cs.Learners)} {
		for _, id := range ids {
			if !slices.Contains(voters, id) && !slices.Contains(learners, id) {
				return step(raftpb.ConfChangeRemoveNode, id)
			}
		}
	}
	return raftpb.ConfChangeV2{}, false
}

func sorted(ids []uint64) []uint64 {
	c := slices.Clone(ids)
	slices.Sort(c)
	return c
}
