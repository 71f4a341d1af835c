package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// Replica moves (docs/replication.md, "Replica moves"). The controller's
// state gives a partition a target membership (meta.MoveReplicas); the
// partition group's leader walks the group's configuration there
// (raft.Host.Reconfigure) and records the end (meta.FinishMove). The
// controller's leader decides the moves: a node it has not reached for
// DeadNodeTimeout is marked down and its replicas are re-created elsewhere,
// and replicas spread over new nodes (meta.NextMove).

// driveMoves: for every moving partition this node leads, take the next
// step toward the target, or record that the group reached it. The
// replica that leads may be one this node is still getting (a learning
// partition): a move's step made it a voter before the controller recorded
// the move's end, and the leadership came to it (a leaving leader handing
// it over, leadership balancing toward the target's first node) — then the
// move was redirected, or has only its end left to record. It drives the
// move as any leader does: nothing else would.
func (c *member) driveMoves(ctx context.Context) {
	type move struct {
		group  uint64
		target []uint64 // nodes
		ids    []uint64 // their replica ids
	}
	var moves []move
	add := func(p *partition) {
		if m := p.X.mem.Load(); p.Log != nil && m != nil && m.target != nil {
			moves = append(moves, move{p.X.raftGroup, m.target, m.replicaIDs(m.target)})
		}
	}
	c.tab.Mu.RLock()
	for _, t := range c.tab.Topics {
		for _, p := range t.Parts {
			add(p)
		}
		for _, p := range t.Learning {
			add(p)
		}
	}
	c.tab.Mu.RUnlock()
	for _, m := range moves {
		st, ok := c.host.Status(m.group)
		if !ok || !st.IsLeader {
			continue
		}
		if st.Joint || len(st.Learners) > 0 || !sameSet(st.Voters, m.ids) {
			_ = c.host.Reconfigure(m.group, m.ids)
			continue
		}
		_, err := c.proposeMeta(ctx, meta.Command{FinishMove: &meta.FinishMove{Group: m.group, Replicas: m.target}})
		if err != nil && !errors.Is(err, meta.ErrStaleMove) {
			c.logger.Warn("spool cluster: recording the end of a replica move failed; retrying", "group", m.group, "err", err)
		}
	}
}

// planMoves: while this node leads the controller, mark nodes down or up
// and start the replica moves meta.NextMove gives.
func (c *member) planMoves(ctx context.Context) {
	st, ok := c.host.Status(controllerGroup)
	if !ok || !st.IsLeader {
		clear(c.unreached) // a new leader starts its own clocks
		return
	}
	c.mu.Lock()
	nodes := c.state.Nodes()
	c.mu.Unlock()
	now := time.Now()
	for _, nd := range nodes {
		if nd.ID == c.id.NodeID {
			continue
		}
		ps, _ := c.tr.Peer(nd.ID)
		if ps.Connected {
			delete(c.unreached, nd.ID)
			if nd.Down {
				c.setDown(ctx, nd.ID, false)
			}
			continue
		}
		since, ok := c.unreached[nd.ID]
		if !ok {
			c.unreached[nd.ID] = now
			continue
		}
		if !nd.Down && now.Sub(since) >= c.cfg.DeadNodeTimeout {
			c.setDown(ctx, nd.ID, true)
		}
	}
	// A leaving node whose replicas all moved away is removed.
	for _, nd := range nodes {
		c.mu.Lock()
		done := nd.Leaving && !c.state.Holds(nd.ID)
		c.mu.Unlock()
		if done {
			c.logger.Info("spool cluster: a decommissioned node holds no replica any more; removing it from the cluster", "node", nd.ID)
			if _, err := c.proposeMeta(ctx, meta.Command{RemoveNode: &meta.RemoveNode{ID: nd.ID}}); err != nil {
				c.logger.Warn("spool cluster: removing a decommissioned node failed; retrying", "node", nd.ID, "err", err)
			}
		}
	}
	for range meta.MaxMovesInFlight {
		c.mu.Lock()
		m, ok := meta.NextMove(c.state)
		c.mu.Unlock()
		if !ok {
			return
		}
		c.logger.Info("spool cluster: moving a partition's replicas", "group", m.Group, "to", m.Replicas)
		if _, err := c.proposeMeta(ctx, meta.Command{MoveReplicas: &m}); err != nil {
			c.logger.Warn("spool cluster: starting a replica move failed; retrying", "group", m.Group, "err", err)
			return
		}
	}
}

func (c *member) setDown(ctx context.Context, id uint64, down bool) {
	if down {
		c.logger.Warn("spool cluster: a node is unreachable past cluster.dead_node_timeout; marking it down and moving its replicas", "node", id, "timeout", c.cfg.DeadNodeTimeout)
	} else {
		c.logger.Info("spool cluster: a node marked down is reachable again", "node", id)
	}
	if _, err := c.proposeMeta(ctx, meta.Command{SetNodeDown: &meta.SetNodeDown{ID: id, Down: down}}); err != nil {
		c.logger.Warn("spool cluster: marking a node failed; retrying", "node", id, "down", down, "err", err)
	}
}

// sameSet: a and b hold the same ids.
func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for _, id := range a {
		if !slices.Contains(b, id) {
			return false
		}
	}
	return true
}

// removeStrayReplicas deletes the data of partitions this node no longer
// holds and has not opened, once they do not move: replicas a move took
// away while it was down or this run (dropReplica stops those and leaves
// their data here), and the rest of a deletion a crash cut short. The
// chores call it at start and after each drop, until it could ask. A
// node's own view may be behind (after a power loss the commit index is
// not fsynced on every change; a busy node applies the controller's
// commands late), and a replica given to it again after that point must
// not be taken for a stray: a partition is deleted only when the
// controller leader's state says so too (asked through Metadata, which
// answers once the leader applied every command committed when asked).
// No leader known or reachable: nothing is deleted, try again.
func (c *member) removeStrayReplicas(ctx context.Context) bool {
	st, ok := c.host.Status(controllerGroup)
	if !ok || st.Leader == 0 {
		return false
	}
	// Groups still opened are skipped: dropReplica forgets a group only
	// once its replica is stopped, so no running replica's log is deleted.
	c.mu.Lock()
	opened := maps.Clone(c.opened)
	c.mu.Unlock()
	var lead *meta.State
	if st.Leader == c.id.NodeID {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lead, ok = c.appliedState(actx)
		cancel()
		if !ok {
			return false
		}
	} else {
		cl, err := c.peers.client(st.Leader)
		if err != nil {
			return false
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cl.Metadata(cctx, &clusterv1.MetadataRequest{ClusterId: c.id.ClusterID})
		cancel()
		if err != nil {
			return false
		}
		if lead, err = meta.DecodeState(resp.GetState()); err != nil {
			return false
		}
	}
	stored := map[string]bool{}
	for _, name := range c.store.Partitions() {
		stored[name] = true
	}
	c.mu.Lock()
	local := c.state
	c.mu.Unlock()
	// holds: the partition's group, whether this node holds (or is
	// getting) a replica of it or it is moving (the group's configuration
	// may then still count this node: see placeTopic), and whether s
	// knows the partition.
	holds := func(s *meta.State, topic string, i int) (uint64, bool, bool) {
		t, ok := s.Topic(topic)
		if !ok || i >= len(t.Partitions) {
			return 0, false, false
		}
		p := t.Partitions[i]
		return p.Group, p.Target != nil || slices.Contains(p.Replicas, c.id.NodeID), true
	}
	for _, t := range lead.Topics() {
		for i := range t.Partitions {
			name := engine.PartitionName(t.Spec.Name, int32(i))
			if !stored[name] {
				continue
			}
			group, leadKeeps, _ := holds(lead, t.Spec.Name, i)
			lgroup, localKeeps, known := holds(local, t.Spec.Name, i)
			if leadKeeps || localKeeps || !known || lgroup != group || opened[group] {
				continue
			}
			// Checked and deleted under the engine's lock: placing a topic
			// opens partition logs under it, so nothing opens this one
			// meanwhile.
			c.tab.Mu.Lock()
			var open bool
			if lt, ok := c.tab.Topics[t.Spec.Name]; ok && i < len(lt.Parts) {
				open = lt.Parts[i].Log != nil || lt.Learning[int32(i)] != nil
			}
			var err error
			if !open {
				err = errors.Join(c.store.Drop(name), removeTree(c.fs, c.groupDir(group)))
			}
			c.tab.Mu.Unlock()
			switch {
			case open:
			case err != nil:
				c.logger.Warn("spool cluster: cannot delete the data of a partition this node no longer holds; the next start tries again", "partition", name, "err", err)
			default:
				c.logger.Info("spool cluster: deleted the data of a partition this node no longer holds", "partition", name, "group", group)
			}
		}
	}
	return true
}

// removeTree deletes a directory of files (one level: partition and raft
// group directories have no subdirectories) and the directory itself.
func removeTree(fsys log.FS, dir string) error {
	ents, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := fsys.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := fsys.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsys.SyncDir(filepath.Dir(dir))
}

// DecommissionNode makes a node leave the cluster: its replicas move to
// the other nodes (learners that catch up, then one membership change
// each), it stops voting in the controller, and once it holds none it is
// removed (its id is never given again). It returns once the controller
// has recorded the decision, not when the node is gone: ClusterStatus
// shows the progress. Refused (an error saying why) for an unknown node or
// when the others would be fewer than a topic's replication factor.
func (n *Node) DecommissionNode(ctx context.Context, id uint64) error {
	return n.role.decommission(ctx, id)
}

// decommission is DecommissionNode on a member.
func (c *member) decommission(ctx context.Context, id uint64) error {
	if err := c.awaitReady(c.cfg.JoinTimeout); err != nil {
		return err
	}
	_, err := c.proposeMeta(ctx, meta.Command{DecommissionNode: &meta.DecommissionNode{ID: id}})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, meta.ErrUnknownNode):
		return fmt.Errorf("%w: %v", engine.ErrUnknownNode, err)
	case errors.Is(err, meta.ErrLimit):
		return fmt.Errorf("%w: %v", engine.ErrDecommissionRefused, err)
	}
	return fmt.Errorf("engine: decommission node %d: %w", id, err)
}
