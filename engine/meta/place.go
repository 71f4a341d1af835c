package meta

import (
	"cmp"
	"slices"
)

// Placement. A topic's partitions are placed one after another, in
// partition order, each on ReplicationFactor distinct nodes:
//
//  1. Replicas: the nodes with the fewest replicas (of every topic) are
//     taken, ties broken by node id, except that among the nodes tied at
//     the highest count taken (the last ones needed) those with more
//     preferred leaderships go first (they keep the nodes with fewer
//     leaderships light, so that later partitions can make them leaders).
//  2. Preferred leader (Replicas[0]): among every node that step 1 may take
//     (all with fewer replicas than that highest count, and all tied at
//     it), the one with the fewest preferred leaderships, then fewest
//     replicas, then lowest id; it takes one of the places. The other
//     replicas follow in increasing id order.
//
// Taking the least loaded nodes keeps the spread (most minus fewest
// replicas on a node) at most max(1, the spread before): a cluster that
// only grows by topics stays within one replica per node. A node that joins
// after topics were placed starts empty; new placements fill it first, and
// moving existing replicas to it is the controller's rebalancing (not in
// this package). The same holds for preferred leaders as far as the replica
// rule leaves a choice (the model test checks both).
//
// reps and leads are the counts per node (by index in s.nodes, from loads);
// place updates them, so that one AddNode placing many pending topics counts
// once.
func (s *State) place(t *Topic, reps, leads []int) {
	n := len(s.nodes)
	rf := int(t.Spec.ReplicationFactor)
	order := make([]int, n)
	t.Partitions = make([]Partition, t.Spec.Partitions)
	for p := range t.Partitions {
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(reps[a], reps[b]), cmp.Compare(a, b)) })
		v := reps[order[rf-1]]
		var must, ties []int // nodes below v (all taken) and at v (some taken)
		for _, i := range order {
			switch {
			case reps[i] < v:
				must = append(must, i)
			case reps[i] == v:
				ties = append(ties, i)
			}
		}
		leader := -1
		for _, i := range append(slices.Clone(must), ties...) {
			if leader < 0 || cmp.Or(cmp.Compare(leads[i], leads[leader]), cmp.Compare(reps[i], reps[leader]), cmp.Compare(i, leader)) < 0 {
				leader = i
			}
		}
		chosen := []int{leader}
		for _, i := range must {
			if i != leader {
				chosen = append(chosen, i)
			}
		}
		slices.SortStableFunc(ties, func(a, b int) int { return cmp.Compare(leads[b], leads[a]) })
		for _, i := range ties {
			if len(chosen) == rf {
				break
			}
			if i != leader {
				chosen = append(chosen, i)
			}
		}
		slices.Sort(chosen[1:])
		replicas := make([]NodeID, rf)
		for j, i := range chosen {
			replicas[j] = s.nodes[i].ID
			reps[i]++
		}
		leads[leader]++
		t.Partitions[p] = Partition{Group: s.nextGroup, Replicas: replicas}
		s.nextGroup++
	}
}

// loads counts the replicas and preferred leaderships of every node, by
// index in s.nodes.
func (s *State) loads() (reps, leads []int) {
	reps, leads = make([]int, len(s.nodes)), make([]int, len(s.nodes))
	for _, name := range s.names {
		for _, p := range s.topics[name].Partitions {
			for j, id := range p.Replicas {
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
