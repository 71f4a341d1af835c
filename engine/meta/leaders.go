package meta

import "slices"

// LeaderMove says where the leadership of a raft group this node leads
// should go: the one leader-transfer policy of a node (balancing, leaving
// the cluster, stopping). It is a pure plan; the caller executes it
// (raft.Host.PreferLeader or TransferLeadership).
type LeaderMove struct {
	// Self is this node.
	Self NodeID
	// Order is the group's nodes in order of preference: the first is the
	// preferred leader (placement balances them over the nodes). A
	// partition being moved lists its move's target first, then its
	// replicas; the controller (group 0) and a group this node knows no
	// placement of list nothing.
	Order []NodeID
	// Voters are the nodes voting in the group: only they can lead.
	Voters []NodeID
	// Away: this node must hand the leadership over (it leaves the
	// cluster or stops); otherwise it hands it only to the preferred
	// leader (balancing).
	Away bool
	// Excluded are nodes never given a leadership: leaving (decommissioned)
	// or marked down.
	Excluded func(NodeID) bool
	// Attempt rotates among the candidates when handing over away: a
	// transfer to one that turned out to be down is then made to the next.
	Attempt int
}

// Next is the node to hand the leadership to, or false to keep it.
//
//   - Balancing (not Away): the preferred leader, Order[0], when it is
//     another node, a voter and not excluded: after a restart the
//     preferred leader finds its groups led elsewhere, and one node would
//     end up leading everything.
//   - Away: the candidates are the nodes of Order, then the other voters,
//     each once, that are voters, not this node and not excluded; the
//     first one (rotated by Attempt).
func (m LeaderMove) Next() (NodeID, bool) {
	ok := func(n NodeID) bool {
		return n != m.Self && slices.Contains(m.Voters, n) && (m.Excluded == nil || !m.Excluded(n))
	}
	if !m.Away {
		if len(m.Order) > 0 && ok(m.Order[0]) {
			return m.Order[0], true
		}
		return 0, false
	}
	var cands []NodeID
	for _, n := range append(slices.Clip(m.Order), m.Voters...) {
		if ok(n) && !slices.Contains(cands, n) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return 0, false
	}
	return cands[max(m.Attempt, 0)%len(cands)], true
}
