package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/meta"
)

// Deleting a topic on a cluster (docs/replication.md, "Deleting a topic").
// The node asked forgets the topic in every consumer group first (one
// coord.DropTopic per coordinator partition, refused while a member
// subscribes to it: that is the in-use check), then proposes
// meta.DeleteTopic. Every node, applying it, forgets the topic, stops its
// replicas of the topic's partitions and deletes their data
// (deleteTopicData). A node down meanwhile applies the command when it
// comes back: at its next start it replays the controller's log, and the
// data of the deleted partitions still on its disk goes then.

// deleteTopic deletes a topic of the cluster (Node.DeleteTopic).
func (c *member) deleteTopic(name string) error {
	if strings.HasPrefix(name, "__") {
		return fmt.Errorf("%w: topic %q is internal (the cluster's own: its controller or the consumer groups' coordinators) and cannot be deleted", engine.ErrDeleteUnsupported, name)
	}
	if err := c.awaitReady(c.cfg.JoinTimeout); err != nil {
		return err
	}
	c.mu.Lock()
	_, ok := c.state.Topic(name)
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w %q", engine.ErrUnknownTopic, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.JoinTimeout)
	defer cancel()
	if err := c.coord.dropTopic(ctx, name); err != nil {
		return err
	}
	if _, err := c.proposeMeta(ctx, meta.Command{DeleteTopic: &meta.DeleteTopic{Name: name}}); err != nil {
		if errors.Is(err, meta.ErrUnknownTopic) {
			return fmt.Errorf("%w %q (deleted meanwhile)", engine.ErrUnknownTopic, name)
		}
		return fmt.Errorf("engine: delete topic %q: the consumer groups forgot it, but the controller did not record the deletion: %w; delete it again", name, err)
	}
	c.logger.Info("spool cluster: topic deleted", "topic", name)
	return nil
}

// dropTopic forgets a topic in every group of every coordinator (at each
// partition's leader). A member subscribing to it refuses (ErrTopicInUse);
// the coordinators asked before keep the topic forgotten (their groups had
// no member on it).
func (g *coordinators) dropTopic(ctx context.Context, topic string) error {
	c := g.c
	c.mu.Lock()
	gt, ok := c.state.Topic(meta.GroupsTopic)
	c.mu.Unlock()
	if !ok || gt.Pending() {
		return nil // no coordinator ever ran: no group knows the topic
	}
	for _, part := range c.internalParts(meta.GroupsTopic) {
		if part.X.raftGroup == 0 {
			continue
		}
		_, err := c.coordinateAt(ctx, part, coord.Command{DropTopic: &coord.DropTopic{Topic: topic}})
		// Forgetting a topic twice is forgetting it once: an answer lost
		// (the leader asked went away) is asked again while time is left.
		for errors.Is(err, engine.ErrOutcomeUnknown) && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(c.cfg.TickInterval):
			}
			_, err = c.coordinateAt(ctx, part, coord.Command{DropTopic: &coord.DropTopic{Topic: topic}})
		}
		switch {
		case errors.Is(err, coord.ErrGroupActive):
			return fmt.Errorf("%w: deleting topic %q: %v", engine.ErrTopicInUse, topic, err)
		case err != nil:
			return fmt.Errorf("engine: delete topic %q: the consumer groups' coordinator %s/%d cannot forget it: %w; nothing is deleted yet: retry", topic, meta.GroupsTopic, part.Num, err)
		}
	}
	return nil
}

// deleteTopicData makes this node forget a topic the controller deleted:
// the topic itself (its watchers are signalled and find it gone), its
// replicas (stopped), their data (the partition log, then the raft group's
// directory, as dropReplica does), and this node's own positions on it.
// The data of a partition goes only if this node runs the deleted group's
// replica or has its raft directory on disk: a topic created again under
// the name has other group ids, so replaying an old deletion (every start
// replays the controller's log) never deletes the new topic's data.
// Called by the controller loop, before reconcile places what the state
// holds.
func (c *member) deleteTopicData(t meta.Topic) {
	name := t.Spec.Name
	groupOf := func(i int) uint64 {
		if i < len(t.Partitions) {
			return t.Partitions[i].Group
		}
		return 0
	}
	c.tab.Mu.Lock()
	et, known := c.tab.Topics[name]
	if known {
		for _, p := range et.Parts {
			if p.X.raftGroup != 0 && p.X.raftGroup != groupOf(int(p.Num)) {
				known = false // another incarnation of the name (not expected: reconcile runs after)
				break
			}
		}
	}
	if known {
		delete(c.tab.Topics, name)
	}
	c.tab.Mu.Unlock()
	if known {
		et.Notify() // watchers look again and find it gone
	}
	for i, mp := range t.Partitions {
		c.mu.Lock()
		running := c.opened[mp.Group]
		delete(c.opened, mp.Group)
		c.mu.Unlock()
		_ = c.detach(mp.Group) // not running here: nothing to stop
		dir := c.groupDir(mp.Group)
		if _, err := c.fs.ReadDir(dir); !running && errors.Is(err, fs.ErrNotExist) {
			// No replica of this group here (or deleted already). The log
			// of the name, if any, is another group's: a topic created
			// again under the name (openReplica never runs a group on a
			// log written by another).
			continue
		}
		pname := engine.PartitionName(name, int32(i))
		if err := errors.Join(c.store.Drop(pname), removeTree(c.fs, dir)); err != nil {
			c.logger.Warn("spool cluster: cannot delete the data of a deleted topic's partition; the next start tries again", "partition", pname, "group", mp.Group, "err", err)
			continue
		}
		c.logger.Info("spool cluster: a deleted topic's partition is deleted on this node", "partition", pname, "group", mp.Group)
	}
	if err := c.groups.Forget(name); err != nil {
		c.logger.Warn("spool cluster: cannot forget this node's own positions on a deleted topic", "topic", name, "err", err)
	}
}

// checkLogOwner refuses to run a group's replica on a partition log that
// holds raft entries while the group has no raft directory here: the
// entries are another group's. That happens when a topic was deleted and
// created again under the same name and this node, starting, applies the
// controller's log in two steps (its saved commit index lags the log): the
// first places the deleted incarnation, whose partitions have the names of
// the new one's logs. Running the old group on them would write its first
// entries into the new data, and the deletion applied next would delete
// it. Once the deletion applies, the name is placed with the new groups,
// whose directories exist.
func (c *member) checkLogOwner(part *partition) error {
	if part.Log.LastIndex() == 0 {
		return nil // an empty log: a new replica
	}
	if _, err := c.fs.ReadDir(c.groupDir(part.X.raftGroup)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the log of %s/%d holds raft entries (up to index %d) but group %d has no raft state here: they belong to another group (the topic was deleted and created again); waiting for the controller's log to catch up",
			part.Topic.Name, part.Num, part.Log.LastIndex(), part.X.raftGroup)
	}
	return nil
}
