package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
)

// Leave makes this node leave the cluster before it stops for good (a
// pod replaced by a new node: docs/kubernetes.md): it asks the controller
// to decommission it (DecommissionNode), hands the leadership of the
// partitions it leads to the other replicas so producers move on before
// their replicas do, and waits until every replica it holds has been
// re-created and caught up on another node and it no longer votes in the
// controller, or ctx ends. The report says what was left behind. Refused
// (ErrDecommissionRefused) when the others would be fewer than a topic's
// replication factor: the node then holds its replicas as a node that
// stops does, and comes back as the same node if it restarts.
func (n *Node) Leave(ctx context.Context) (engine.LeaveReport, error) { return n.role.leave(ctx) }

// leave is Leave on a member.
func (c *member) leave(ctx context.Context) (engine.LeaveReport, error) {
	start := time.Now()
	if err := c.DecommissionNode(ctx, c.id.NodeID); err != nil {
		return engine.LeaveReport{Took: time.Since(start)}, err
	}
	c.logger.Info("spool cluster: leaving the cluster: handing over leaderships and replicas", "node", c.id.NodeID)
	every := max(c.cfg.TickInterval*5, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		rep := c.leaveProgress()
		rep.Took = time.Since(start)
		if rep.Left {
			c.logger.Info("spool cluster: left the cluster: every replica moved to other nodes", "node", c.id.NodeID, "took", rep.Took.Round(time.Millisecond))
			return rep, nil
		}
		c.handOffLeaderships()
		select {
		case <-ctx.Done():
			return rep, fmt.Errorf("engine: node %d stopped leaving after %v with %d partition replicas not moved yet (%d of them led here): %w",
				c.id.NodeID, rep.Took.Round(time.Millisecond), len(rep.Held), rep.Led, ctx.Err())
		case <-ch:
		case <-t.C:
		}
	}
}

// leaveProgress reports what this leaving node still holds.
func (c *member) leaveProgress() engine.LeaveReport {
	self := c.id.NodeID
	c.mu.Lock()
	held := c.state.PartitionsOf(self)
	desired, _ := meta.ControllerMembers(c.state)
	c.mu.Unlock()
	var rep engine.LeaveReport
	for _, a := range held {
		rep.Held = append(rep.Held, fmt.Sprintf("%s/%d", a.Topic, a.Partition))
		if st, ok := c.host.Status(a.Group); ok && st.IsLeader {
			rep.Led++
		}
	}
	// The controller keeps a leaving node as a voter only when too few
	// others are left to make up its voters: then nothing better exists,
	// and the node's removal takes it out.
	voter := false
	if st, ok := c.host.Status(controllerGroup); ok {
		voter = slices.Contains(st.Voters, self) && !slices.Contains(desired, self)
	}
	rep.Left = len(held) == 0 && !voter
	return rep
}

// handOffLeaderships asks every partition group this node leads to hand
// its leadership to another voter that is not leaving, the first in the
// placement's order that has caught up (Host.PreferLeader transfers only
// to a caught-up voter). The controller's own group is left to its
// membership chores, which transfer its leadership before removing a
// leader.
func (c *member) handOffLeaderships() {
	for g, order := range c.leaderOrders() {
		if st, ok := c.host.Status(g); ok && st.IsLeader {
			if to, ok := c.nextLeader(st, order, true, 0); ok {
				_ = c.host.PreferLeader(g, to)
			}
		}
	}
}

// leavingNode reports whether the controller's state marks id as leaving
// (decommissioned) or down: such a node is given no leadership.
func (c *cluster) leavingNode(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	nd, ok := c.state.Node(id)
	return ok && (nd.Leaving || nd.Down)
}
