package meta

import (
	"cmp"
	"slices"
)

// NextMove returns the next replica move the controller's leader should
// start (propose as a MoveReplicas command), and false when none is due.
// Pure: the same state gives the same move on every node.
//
//  1. Repair. The first partition (by topic name, then number) whose
//     replicas — its move's target when it is moving — include a node that
//     is down or leaving (decommissioned), or are fewer than its
//     replication factor (a damaged replica dropped: DropDamaged), gets
//     that node replaced, or the missing replica added, by the up node with the fewest
//     replicas (targets counted), then the fewest preferred leaderships,
//     then the lowest id, among those not holding it already (and neither
//     down nor leaving). A moving
//     partition is redirected this way too (its target would never be
//     reached). The surviving replicas keep their order, so the preferred
//     leader stays unless it is the one down; the new node comes last.
//  2. Balance. When the up nodes' replica counts differ by more than one,
//     one replica moves from the most loaded up node (lowest id of a tie)
//     to the least loaded one: the first partition held by the first and
//     not the second (and with no replica on a down node, and not Pinned),
//     one it does not prefer to lead if there is one. Every such move
//     lowers the sum of squared counts, so balancing ends. A Pinned
//     partition (an operator's move, MoveReplicas.Pin) is never balanced:
//     the operator chose its nodes, and balancing would undo the move as
//     soon as it left the counts more than one apart. When every partition
//     that could balance the two nodes is pinned, the counts stay apart.
//
// New moves (not redirects) start only while fewer than MaxMovesInFlight
// partitions move. A partition that cannot be repaired (no up node left
// that does not hold it) stays as it is: it is under-replicated until a
// node comes back or joins.
func NextMove(s *State) (MoveReplicas, bool) {
	moving := s.Moving()
	down := map[NodeID]bool{}
	for _, n := range s.nodes {
		if n.gone() {
			down[n.ID] = true
		}
	}
	reps, leads := s.targetLoads()
	least := func(exclude []NodeID) (NodeID, bool) {
		best := -1
		for i, n := range s.nodes {
			if n.gone() || slices.Contains(exclude, n.ID) {
				continue
			}
			if best < 0 || cmp.Or(cmp.Compare(reps[i], reps[best]), cmp.Compare(leads[i], leads[best])) < 0 {
				best = i
			}
		}
		if best < 0 {
			return 0, false
		}
		return s.nodes[best].ID, true
	}
	for _, name := range s.names {
		for _, p := range s.topics[name].Partitions {
			cur := p.Replicas
			if p.Target != nil {
				cur = p.Target
			} else if moving >= MaxMovesInFlight {
				continue
			}
			var keep []NodeID
			for _, id := range cur {
				if !down[id] {
					keep = append(keep, id)
				}
			}
			rf := max(len(cur), int(s.topics[name].Spec.ReplicationFactor))
			if len(keep) == rf {
				continue
			}
			if p.Target != nil && len(cur) < rf && len(keep) == len(cur) {
				continue // dropping a damaged replica: the new copy comes once that move ends
			}
			target := keep
			for len(target) < rf {
				id, ok := least(append(slices.Clone(target), cur...))
				if !ok {
					break
				}
				target = append(target, id)
			}
			if len(target) < rf {
				continue // nowhere to put it: under-replicated until a node returns
			}
			return MoveReplicas{Group: p.Group, Replicas: target}, true
		}
	}
	if moving >= MaxMovesInFlight {
		return MoveReplicas{}, false
	}
	from, to := -1, -1
	for i, n := range s.nodes {
		if n.gone() {
			continue
		}
		if from < 0 || reps[i] > reps[from] {
			from = i
		}
		if to < 0 || reps[i] < reps[to] {
			to = i
		}
	}
	if from < 0 || reps[from]-reps[to] <= 1 {
		return MoveReplicas{}, false
	}
	fromID, toID := s.nodes[from].ID, s.nodes[to].ID
	for _, leaderToo := range []bool{false, true} {
		for _, name := range s.names {
			for _, p := range s.topics[name].Partitions {
				if p.Target != nil || p.Pinned || slices.Contains(p.Replicas, toID) || slices.ContainsFunc(p.Replicas, func(id NodeID) bool { return down[id] }) {
					continue // moving, placed by an operator, already there, or waiting for repair
				}
				j := slices.Index(p.Replicas, fromID)
				if j < 0 || (j == 0) != leaderToo {
					continue
				}
				target := slices.Clone(p.Replicas)
				target[j] = toID
				return MoveReplicas{Group: p.Group, Replicas: target}, true
			}
		}
	}
	return MoveReplicas{}, false
}

// targetLoads counts, per node (by index in s.nodes), the replicas and
// preferred leaderships where partitions are going: the target of a moving
// partition, the replicas of the others.
func (s *State) targetLoads() (reps, leads []int) {
	reps, leads = make([]int, len(s.nodes)), make([]int, len(s.nodes))
	for _, name := range s.names {
		for _, p := range s.topics[name].Partitions {
			cur := p.Replicas
			if p.Target != nil {
				cur = p.Target
			}
			for j, id := range cur {
				i, _ := s.nodeIndex(id)
				reps[i]++
				if j == 0 {
					leads[i]++
				}
			}
		}
	}
	return reps, leads
}
