package raft

import (
	"slices"

	"go.etcd.io/raft/v3/raftpb"
)

// A replica move: the controller gives a group a target membership (a new
// set of voters), and the group's leader walks its configuration there one
// raft step at a time (Host.Reconfigure drives it; docs/replication.md,
// "Replica moves"). The decision is nextMove, pure: the configuration as
// applied, the target, who leads and who has caught up in, one step out.

// moveStep is one step toward a target membership.
type moveStep struct {
	// cc is a configuration change to propose (propose set).
	cc      raftpb.ConfChangeV2
	propose bool
	// transfer is a voter to hand the leadership to (0: none).
	transfer uint64
	// done: the configuration is the target (its voters, no learners).
	done bool
}

// nextMove returns the next step from the applied configuration cs toward
// target (the voters wanted, distinct), for the group led by leader.
// caughtUp(id) reports whether a replica holds every committed entry and
// answers (the leader's view of its progress). The order:
//
//  1. A joint configuration is left first (an empty change): nothing else
//     can change while raft is joint.
//  2. Each target replica that is not in the group is added as a learner,
//     one per step: it copies the log without counting in any quorum, so
//     adding it costs no availability.
//  3. Nothing more until every target learner has caught up: a voter that
//     must first copy the whole log would stall commits.
//  4. With the leader in the target: one change promotes the target's
//     learners and removes the voters not in the target (joint consensus
//     when it changes more than one voter; raft leaves the joint
//     configuration by itself, and step 1 does it if it did not).
//     With the leader not in the target: the leadership goes to a target
//     voter that has caught up; while there is none, the target's learners
//     are promoted first (the voter set grows, so no quorum is lost), and
//     the removal waits for the transfer. A leader removed anyway (no
//     target voter ever caught up) steps down once the change applies.
//  5. Learners that are not in the target are removed.
//  6. Done: the voters are the target and there are no learners.
func nextMove(cs raftpb.ConfState, target []uint64, leader uint64, caughtUp func(uint64) bool) moveStep {
	if len(cs.VotersOutgoing) > 0 || len(cs.LearnersNext) > 0 {
		return moveStep{propose: true} // leave the joint configuration
	}
	if len(target) == 0 {
		return moveStep{} // no target: never remove every voter
	}
	isVoter := func(id uint64) bool { return slices.Contains(cs.Voters, id) }
	isLearner := func(id uint64) bool { return slices.Contains(cs.Learners, id) }
	change := func(cs ...raftpb.ConfChangeSingle) moveStep {
		return moveStep{cc: raftpb.ConfChangeV2{Changes: cs}, propose: true}
	}
	for _, id := range target {
		if !isVoter(id) && !isLearner(id) {
			return change(raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id})
		}
	}
	var promote []raftpb.ConfChangeSingle
	for _, id := range target {
		if isLearner(id) {
			if !caughtUp(id) {
				return moveStep{} // wait for it to copy the log
			}
			promote = append(promote, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddNode, NodeID: id})
		}
	}
	var remove []raftpb.ConfChangeSingle
	for _, id := range sorted(cs.Voters) {
		if !slices.Contains(target, id) {
			remove = append(remove, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: id})
		}
	}
	if len(remove) > 0 && !slices.Contains(target, leader) {
		for _, id := range target {
			if isVoter(id) && caughtUp(id) {
				return moveStep{transfer: id}
			}
		}
		if len(promote) > 0 {
			return change(promote...)
		}
		// No target voter has caught up (or none answers): remove anyway;
		// this leader steps down once the change applies.
	}
	if len(promote)+len(remove) > 0 {
		return change(append(promote, remove...)...)
	}
	for _, id := range sorted(cs.Learners) {
		if !slices.Contains(target, id) {
			return change(raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: id})
		}
	}
	return moveStep{done: true}
}

func sorted(ids []uint64) []uint64 {
	c := slices.Clone(ids)
	slices.Sort(c)
	return c
}
