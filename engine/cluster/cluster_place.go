package cluster

import (
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/internal/table"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/transport"
)

// copyID is the replica id a partition value runs this node's copy under
// (0: none; the partition is served from other nodes).
func copyID(p *partition) uint64 {
	if p == nil || p.Log == nil {
		return 0
	}
	return p.X.replica
}

// maxParallelOpens bounds the replicas opened at once.
const maxParallelOpens = 64

// replicaOps are what placing a topic does with this node's replicas; each
// is called with no engine lock held. A storage-off node has none.
type replicaOps struct {
	// open starts this node's replica of a partition; bootstrap: the
	// partition never moved, so an empty replica writes the group's first
	// entries (every first member writes the same ones) instead of waiting
	// for the leader's.
	open func(part *partition, bootstrap bool) error
	// retain gives a running replica its topic's changed retention.
	retain func(*partition)
	// drop stops this node's replica of a partition moved away from it.
	drop func(*partition)
	// stop stops a replica that is opened again (under another id).
	stop func(*partition)
	// fresh, called under Table.Mu before a partition's log is opened for
	// this node's replica (id replica) of group, deletes the data there if
	// it is a damaged copy that the replica must not reuse (a replica of a
	// new incarnation, after meta.DropDamaged took the damaged one out).
	fresh func(topic string, num int32, group, replica uint64)
}

// placeTopic makes a topic of the controller's state known on this node:
// the topic itself as soon as it is created (so that subscriptions and
// Partitions work while it waits for nodes), and its partitions once placed,
// with a log for each partition this node holds a replica of. Later states
// change a partition's membership (replica moves): a replica this node is
// getting is opened as a learning partition, which replaces the served one
// when the move finishes; a replica moved away is dropped and the partition
// is served from the others.
func (n *Node) placeTopic(mt meta.Topic, self uint64, ops replicaOps) {
	spec := engine.TopicSpec{
		Name:           mt.Spec.Name,
		Partitions:     mt.Spec.Partitions,
		RetentionAge:   time.Duration(mt.Spec.RetentionAgeMs) * time.Millisecond,
		RetentionBytes: mt.Spec.RetentionBytes,
	}
	var toOpen []opening
	var retune, toDrop, toStop []*partition
	n.tab.Mu.Lock()
	t, ok := n.tab.Topics[spec.Name]
	if !ok {
		t = table.NewTopic[part](spec.Name, spec)
		for p := range spec.Partitions {
			t.Parts = append(t.Parts, table.NewPartition(t, p))
		}
		n.tab.Topics[spec.Name] = t
	}
	// Retention of a replicated partition is the raft group's (its leader
	// proposes the new log start, so every replica gives up the same
	// records), never the log's own.
	if ok && t.Spec != spec && t.Parts[0].X.raftGroup != 0 {
		for _, p := range t.Parts {
			if p.Log != nil {
				retune = append(retune, p)
			}
		}
		for _, p := range t.Learning {
			retune = append(retune, p)
		}
	}
	t.Spec = spec
	if t.Learning == nil {
		t.Learning = map[int32]*partition{}
	}
	if len(mt.Partitions) == len(t.Parts) {
		for i, mp := range mt.Partitions {
			toOpen, toStop, toDrop = n.placePartition(t, i, mp, self, ops, toOpen, toStop, toDrop)
		}
	}
	n.tab.Mu.Unlock()
	for _, part := range toStop {
		ops.stop(part)
	}
	for _, part := range toDrop {
		ops.drop(part)
	}
	// Opening a new replica writes and fsyncs its first entries and state:
	// a topic of many partitions opens them together, so that their writes
	// share the store's group commits.
	var opens errgroup.Group
	opens.SetLimit(maxParallelOpens)
	for _, o := range toOpen {
		opens.Go(func() error {
			_ = ops.open(o.part, o.bootstrap) // logged by open; the next reconcile tries again
			return nil
		})
	}
	_ = opens.Wait()
	for _, part := range retune {
		ops.retain(part)
	}
	if len(toOpen) > 0 || len(toDrop) > 0 || len(toStop) > 0 || !ok {
		t.Notify()
	}
}

// placePartition follows partition i of t to the controller's placement mp
// (meta.PlanLocal decides; it executes), with n.mu held, and returns the
// replicas to open, stop and drop once n.mu is released.
func (n *Node) placePartition(t *topic, i int, mp meta.Partition, self uint64, ops replicaOps, toOpen []opening, toStop, toDrop []*partition) ([]opening, []*partition, []*partition) {
	newPart := func(local bool) *partition { return n.newPart(t, i, mp, self, local, ops.fresh) }
	cur, lp := t.Parts[i], t.Learning[int32(i)]
	if cur.X.raftGroup != 0 {
		cur.X.mem.Store(newReplicaSet(mp))
		if lp != nil {
			lp.X.mem.Store(cur.X.mem.Load())
		}
	}
	// This node's copies must run under the replica id the state
	// gives it (its incarnation): meta.PlanLocal says what to stop,
	// drop, promote and open.
	plan := meta.PlanLocal(self, mp, transport.ReplicaID(self, mp.Incarnation(self)),
		meta.LocalCopies{Placed: cur.X.raftGroup != 0, Serving: copyID(cur), Learning: copyID(lp)})
	switch {
	case plan.StopLearning:
		toStop = append(toStop, lp)
	case plan.DropLearning:
		toDrop = append(toDrop, lp)
	}
	if plan.StopLearning || plan.DropLearning {
		delete(t.Learning, int32(i))
	}
	switch {
	case plan.StopServing:
		toStop = append(toStop, cur)
	case plan.DropServing:
		toDrop = append(toDrop, cur)
	}
	if plan.StopServing || plan.DropServing || plan.OpenServing || cur.X.raftGroup == 0 {
		// A new partition value: served from this node's copy when
		// one opens, from the other replicas otherwise.
		part := newPart(plan.OpenServing)
		keepReportedEnd(cur, part)
		t.Parts[i] = part
		if part.Log != nil {
			toOpen = append(toOpen, opening{part, plan.Bootstrap})
		}
	}
	if plan.Promote {
		keepReportedEnd(t.Parts[i], lp)
		t.Parts[i] = lp
		delete(t.Learning, int32(i))
	}
	if plan.OpenLearning {
		if l := newPart(true); l.Log != nil {
			t.Learning[int32(i)] = l
			toOpen = append(toOpen, opening{l, false})
		}
	}
	return toOpen, toStop, toDrop
}

// newPart is a partition value of a placement; with a log when this node
// holds a replica (nil if its log cannot be opened: the partition is then
// served from the other replicas). fresh (may be nil): see replicaOps.
func (n *Node) newPart(t *topic, i int, mp meta.Partition, self uint64, local bool, fresh func(topic string, num int32, group, replica uint64)) *partition {
	part := table.NewPartition(t, int32(i))
	part.X.raftGroup = mp.Group
	part.X.mem.Store(newReplicaSet(mp))
	if !local {
		return part
	}
	name := engine.PartitionName(t.Name, int32(i))
	rid := transport.ReplicaID(self, mp.Incarnation(self))
	if fresh != nil {
		fresh(t.Name, int32(i), mp.Group, rid)
	}
	lp, err := n.store.Partition(name)
	if err == nil {
		err = lp.SetRetention(0, 0) // the group's retention, not the log's
	}
	if err != nil {
		n.conf.Logger.Error("spool cluster: cannot open a partition's log", "topic", t.Name, "partition", i, "err", err)
		return part
	}
	part.Log = lp
	part.X.replica = rid
	return part
}

// opening is a replica to open; bootstrap: see replicaOps.open.
type opening struct {
	part      *partition
	bootstrap bool
}

// keepReportedEnd: next, the partition value that replaces cur (a copy
// opened here, a learner promoted, the other replicas read instead),
// reports no less a committed end than cur did. A copy counts as committed
// only what raft says of its own log — the end read from the others may
// lie past it, and the coordinator's applier would read records the log
// does not hold yet — so that end becomes its remote end, from which it
// reads until its own log holds it (readsRemote); a value without a copy
// takes it as its committed end.
func keepReportedEnd(cur, next *partition) {
	if cur.X.raftGroup != 0 {
		noteRemoteEnd(next, max(cur.Committed.Load(), cur.X.remoteEnd.Load()))
	}
}
