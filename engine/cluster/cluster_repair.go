package cluster

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
)

// A damaged replica repairs itself from its peers. When this node finds a
// replica's log damaged (the log quarantines it: a flipped bit, a segment
// that does not line up), the chores
//
//  1. stop the replica for good under the id it ran under (openReplica
//     refuses that id from then on): a copy that lost entries it
//     acknowledged must never vote or lead again, and a stopped leader's
//     group elects another;
//  2. ask the controller to take it out of the partition's group
//     (meta.DropDamaged: a move to the other replicas; refused while the
//     partition moves, retried after);
//  3. once the controller has given the partition a new copy — often here
//     again, as a replica of a new incarnation (meta.NextMove fills a
//     partition short of its replication factor) — freshData deletes the
//     damaged files before the new replica's log is opened, and it copies
//     the leader's log from the start (or its snapshot).
//
// A partition whose only replica is damaged has nothing to copy from: it
// stays quarantined for an operator (spoold repair, docs/operations.md).
// After a restart the damage is found again on disk and the steps run
// again; no step needs state of its own to survive a crash.

// repairing is the chores' record of one damaged replica.
type repairing struct {
	asked time.Time // the last DropDamaged proposed (zero: none yet)
	said  string    // the last reason not to ask, logged once
}

// repairRetry is how long the chores wait before asking the controller
// again to drop a damaged replica whose drop has not applied.
const repairRetry = 2 * time.Second

// repairDamaged runs the steps above for this node's damaged replicas.
func (c *member) repairDamaged(ctx context.Context) {
	type damage struct {
		part *partition
		ce   *log.CorruptionError
	}
	var found []damage
	c.tab.Mu.RLock()
	for _, t := range c.tab.Topics {
		for _, p := range t.Parts {
			if p.Log == nil || p.X.raftGroup == 0 {
				continue
			}
			if ce := p.Log.Quarantined(); ce != nil {
				found = append(found, damage{p, ce})
			}
		}
	}
	c.tab.Mu.RUnlock()
	seen := map[uint64]bool{}
	for _, d := range found {
		group, rid := d.part.X.raftGroup, d.part.X.replica
		seen[group] = true
		name := engine.PartitionName(d.part.Topic.Name, d.part.Num)
		c.mu.Lock()
		bad, known := c.damaged[group]
		c.damaged[group] = rid
		st := c.state
		c.mu.Unlock()
		r := c.repairs[group]
		if r == nil {
			r = &repairing{}
			c.repairs[group] = r
		}
		if !known || bad != rid {
			c.stopReplica(d.part)
			c.logger.Warn("spool cluster: a replica's data is damaged: stopped it; the partition gets a new copy from its other replicas",
				"partition", name, "group", group, "file", d.ce.File, "position", d.ce.Position, "reason", d.ce.Reason)
		}
		ask, why := c.dropping(st, d.part)
		if !ask {
			if why != "" && why != r.said {
				c.logger.Warn("spool cluster: a damaged replica waits to be dropped", "partition", name, "group", group, "why", why)
				r.said = why
			}
			continue
		}
		if time.Since(r.asked) < repairRetry {
			continue
		}
		r.asked = time.Now()
		pctx, cancel := context.WithTimeout(ctx, c.cfg.ProduceTimeout)
		res, err := c.proposeMeta(pctx, meta.Command{DropDamaged: &meta.DropDamaged{Group: group, Node: c.id.NodeID}})
		cancel()
		if err == nil {
			err = res.Err
		}
		switch {
		case err == nil:
			c.logger.Info("spool cluster: the controller dropped a damaged replica; a new copy is placed next", "partition", name, "group", group)
		case errors.Is(err, meta.ErrInvalid):
			if s := err.Error(); s != r.said {
				c.logger.Warn("spool cluster: a damaged replica waits to be dropped", "partition", name, "group", group, "why", s)
				r.said = s
			}
		default:
			c.logger.Warn("spool cluster: asking the controller to drop a damaged replica failed; retrying", "partition", name, "group", group, "err", err)
		}
	}
	for group := range c.repairs {
		if !seen[group] {
			delete(c.repairs, group) // dropped: the partition value has no damaged log here now
		}
	}
}

// dropping says whether to ask the controller, in state st, to drop this
// node's damaged replica of part; if not, why ("": it is dropped or being
// dropped, nothing to say).
func (c *member) dropping(st *meta.State, part *partition) (ask bool, why string) {
	if st == nil {
		return false, "this node has not applied the controller's state"
	}
	t, ok := st.Topic(part.Topic.Name)
	if !ok || int(part.Num) >= len(t.Partitions) || t.Partitions[part.Num].Group != part.X.raftGroup {
		return false, "" // deleted: its data goes with the topic
	}
	p := t.Partitions[part.Num]
	self := c.id.NodeID
	switch {
	case !slices.Contains(p.Replicas, self), p.Target != nil && !slices.Contains(p.Target, self):
		return false, "" // dropped, or the drop is under way
	case p.Target != nil:
		return false, "the partition is moving; its damaged replica is dropped once the move ends"
	case len(p.Replicas) < 2:
		return false, "it is the partition's only replica: nothing to copy from; repair it by hand (spoold repair, docs/operations.md)"
	}
	return true, ""
}

// freshData (replicaOps.fresh, under Table.Mu) deletes this node's data
// of group when it is a damaged copy and replica is a new incarnation: the
// new replica starts from an empty log and copies the leader's.
func (c *member) freshData(topic string, num int32, group, replica uint64) {
	name := engine.PartitionName(topic, num)
	c.mu.Lock()
	bad, ok := c.damaged[group]
	c.mu.Unlock()
	if !ok || bad == replica {
		return
	}
	if err := errors.Join(c.store.Drop(name), removeTree(c.fs, c.groupDir(group))); err != nil {
		c.logger.Error("spool cluster: cannot delete a damaged replica's data; its new copy cannot open until it is deleted", "partition", name, "group", group, "err", err)
		return
	}
	c.mu.Lock()
	delete(c.damaged, group)
	c.mu.Unlock()
	c.logger.Info("spool cluster: deleted a damaged replica's data; its new copy starts empty and copies the leader's log", "partition", name, "group", group)
	if h := c.conf.Hooks.PartitionRepaired; h != nil {
		h(topic, num)
	}
}
