package cluster

import (
	"slices"
	"strings"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
)

// ClusterStatus returns the node's cluster status; ok is false on a single
// node (no cluster configured). Before the node is a working member only
// Ready (false) is filled in.
func (n *Node) ClusterStatus() (engine.ClusterStatus, bool) {
	c := n
	if c == nil {
		return engine.ClusterStatus{}, false
	}
	// Until the node is ready, its identity, host and transport are being
	// set up by Run (a joining node learns its id then): report only that.
	select {
	case <-c.ready:
	default:
		return engine.ClusterStatus{}, true
	}
	c.mu.Lock()
	failed := c.readyErr != nil
	c.mu.Unlock()
	if failed {
		return engine.ClusterStatus{}, true
	}
	return c.role.clusterStatus(engine.ClusterStatus{ClusterID: c.id.ClusterID, NodeID: c.id.NodeID, Ready: true}), true
}

// clusterStatus: the controller's leader, the members and their
// connections, this member's replicas and its raft and transport counters.
func (c *member) clusterStatus(out engine.ClusterStatus) engine.ClusterStatus {
	if st, ok := c.host.Status(controllerGroup); ok {
		out.ControllerLeader = st.Leader
	}
	c.mu.Lock()
	st := c.state.Clone()
	c.mu.Unlock()
	nodes := st.Nodes()
	out.PartitionsMoving, out.UnderReplicated = moveCounts(st)
	for _, nd := range nodes {
		m := engine.ClusterMember{ID: nd.ID, Addr: nd.Addr, Connected: nd.ID == c.id.NodeID, Down: nd.Down, Leaving: nd.Leaving}
		if ps, ok := c.tr.Peer(nd.ID); ok && nd.ID != c.id.NodeID {
			m.Connected = ps.Connected
		}
		out.Members = append(out.Members, m)
	}
	c.versionStatus(&out, st)
	stops := c.stops.episodes()
	c.tab.Mu.RLock()
	for _, t := range c.tab.Topics {
		for _, p := range t.Parts {
			if p.Log == nil || p.X.raftGroup == 0 {
				continue
			}
			r := engine.ReplicaStatus{Topic: t.Name, Partition: p.Num, Group: p.X.raftGroup, Replicas: slices.Clone(p.X.replicas()), CommittedEnd: p.Committed.Load(), StartOffset: p.Log.StartOffset()}
			if m := p.X.mem.Load(); m != nil {
				r.Target = slices.Clone(m.target)
			}
			if st, ok := c.host.Status(p.X.raftGroup); ok {
				r.Leader, r.IsLeader, r.Term = st.Leader, st.IsLeader, st.Term
				if st.Err != nil {
					r.Err, r.StopReason = st.Err.Error(), stopReason(st.Err)
				}
			} else if e, ok := stops[p.X.raftGroup]; ok && e.detached { // a reopen could not add it again
				r.Err, r.StopReason = e.err.Error(), e.reason
			}
			out.Replicas = append(out.Replicas, r)
		}
	}
	c.tab.Mu.RUnlock()
	slices.SortFunc(out.Replicas, func(a, b engine.ReplicaStatus) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	hs, ts := c.host.Stats(), c.tr.Stats()
	out.Proposals = map[string]uint64{"ok": hs.ProposalsOK, "lost": hs.ProposalsLost, "unknown": hs.ProposalsUnknown, "not_leader": hs.ProposalsNotLeader, "refused": hs.ProposalsRefused}
	out.InboxDropped, out.ReplicasStopped = hs.InboxDropped, hs.ReplicasStopped
	out.ReplicasReopened = c.replicasReopened.Load()
	out.StoppedNow = map[string]int{StopDiskFull: 0, StopDamaged: 0, StopOther: 0}
	for _, g := range c.host.Groups() {
		if st, ok := c.host.Status(g); ok && st.Err != nil {
			out.StoppedNow[stopReason(st.Err)]++
		}
	}
	for g, e := range stops {
		if _, ok := c.host.Status(g); !ok && e.detached {
			out.StoppedNow[e.reason]++
		}
	}
	out.MoveCopiesDelayed, out.MoveCopyWaitingBytes = hs.CatchUpDelayed, hs.CatchUpWaitingBytes
	out.ProducersEvicted = c.producersEvicted.Load()
	out.MessagesSent, out.MessagesReceived, out.Malformed = ts.MessagesSent, ts.MessagesReceived, ts.Malformed+hs.Malformed
	out.Dropped = map[string]uint64{"queue_full": ts.DroppedQueueFull, "too_large": ts.DroppedTooLarge, "no_peer": ts.DroppedNoPeer, "unsent": ts.DroppedUnsent}
	out.ConfChangesSkipped = hs.ConfChangesSkipped
	out.GroupsQuiesced, out.PeersDeclaredDead = hs.GroupsQuiesced, ts.PeersDeclaredDead
	out.PeerRefusals = map[string]uint64{"handshake": ts.HandshakesRefused, "identity": ts.Unauthorized,
		"produce": c.refusedProduce.Load(), "join": c.refusedJoin.Load()}
	out.CommandsSkipped = map[string]uint64{}
	if c.ctrl != nil {
		out.CommandsSkipped["controller"] = c.ctrl.Skipped()
	}
	if c.coord != nil {
		out.CommandsSkipped["coordinator"] = c.coord.skipped()
	}
	return out
}

// moveCounts counts the partitions moving and those left under-replicated:
// a replica on a down node with no move under way.
func moveCounts(st *meta.State) (moving, under int) {
	down := map[uint64]bool{}
	for _, nd := range st.Nodes() {
		if nd.Down {
			down[nd.ID] = true
		}
	}
	for _, t := range st.Topics() {
		for _, p := range t.Partitions {
			switch {
			case p.Target != nil:
				moving++
			case len(p.Replicas) < int(t.Spec.ReplicationFactor), slices.ContainsFunc(p.Replicas, func(id uint64) bool { return down[id] }):
				under++ // a replica down, or a damaged one dropped and not replaced yet
			}
		}
	}
	return moving, under
}
