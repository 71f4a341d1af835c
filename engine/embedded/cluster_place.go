package embedded

import (
	"slices"
	"sync"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/transport"
)

// maxParallelOpens bounds the replicas opened at once.
const maxParallelOpens = 64

// replicaOps are what placing a topic does with this node's replicas; each
// is called with no engine lock held. A client node (storage off) has none.
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
	type opening struct {
		part      *partition
		bootstrap bool
	}
	var toOpen []opening
	var retune, toDrop, toStop []*partition
	n.mu.Lock()
	t, ok := n.topics[spec.Name]
	if !ok {
		t = &topic{name: spec.Name, changed: make(chan struct{}), learning: map[int32]*partition{}}
		for p := range spec.Partitions {
			part := &partition{topic: t, num: p}
			part.limit.Store(noLimit)
			t.parts = append(t.parts, part)
		}
		n.topics[spec.Name] = t
	}
	// Retention of a replicated partition is the raft group's (its leader
	// proposes the new log start, so every replica gives up the same
	// records), never the log's own.
	if ok && t.spec != spec && t.parts[0].group != 0 {
		for _, p := range t.parts {
			if p.log != nil {
				retune = append(retune, p)
			}
		}
		for _, p := range t.learning {
			retune = append(retune, p)
		}
	}
	t.spec = spec
	if t.learning == nil {
		t.learning = map[int32]*partition{}
	}
	// newPart is a partition value of this placement; with a log when this
	// node holds a replica (nil if its log cannot be opened: the partition
	// is then served from the other replicas).
	newPart := func(i int, mp meta.Partition, local bool) *partition {
		part := &partition{topic: t, num: int32(i), group: mp.Group}
		part.limit.Store(noLimit)
		part.mem.Store(newMembership(mp))
		if !local {
			return part
		}
		lp, err := n.store.Partition(engine.PartitionName(spec.Name, int32(i)))
		if err == nil {
			err = lp.SetRetention(0, 0) // the group's retention, not the log's
		}
		if err != nil {
			n.cfg.Logger.Error("spool cluster: cannot open a partition's log", "topic", spec.Name, "partition", i, "err", err)
			return part
		}
		part.log = lp
		part.replica = transport.ReplicaID(self, mp.Incarnation(self))
		return part
	}
	if len(mt.Partitions) == len(t.parts) {
		for i, mp := range mt.Partitions {
			holds := self != 0 && slices.Contains(mp.Replicas, self)
			gets := self != 0 && !holds && slices.Contains(mp.Target, self)
			cur, lp := t.parts[i], t.learning[int32(i)]
			if cur.group != 0 {
				cur.mem.Store(newMembership(mp))
				if lp != nil {
					lp.mem.Store(cur.mem.Load())
				}
			}
			// This node's copies must run under the replica id the state
			// gives it (its incarnation): a node that left the partition
			// and is given it again while it applied neither step (a node
			// back after the dead-node timeout opens the copies of the
			// state it last applied) still runs its old copy under the old
			// id, which the group no longer counts. Such a copy is stopped
			// and opened again, from its data on disk, under the new id.
			want := transport.ReplicaID(self, mp.Incarnation(self))
			if gets && cur.log != nil {
				// Served from a copy of an earlier state: the partition
				// is coming back; the copy becomes the learning one.
				toStop = append(toStop, cur)
				part := newPart(i, mp, false)
				part.committed.Store(cur.committed.Load())
				t.parts[i], cur = part, part
			}
			if gets && lp != nil && lp.replica != want {
				toStop = append(toStop, lp)
				lp = nil
				delete(t.learning, int32(i))
			}
			switch {
			case cur.group == 0 || holds && cur.log == nil && lp == nil:
				// Placed (or held) here for the first time this run.
				part := newPart(i, mp, holds)
				if part.log != nil {
					toOpen = append(toOpen, opening{part, !mp.Moved})
				}
				if cur.group != 0 {
					part.committed.Store(cur.committed.Load())
				}
				t.parts[i] = part
				if gets {
					if l := newPart(i, mp, true); l.log != nil {
						t.learning[int32(i)] = l
						toOpen = append(toOpen, opening{l, false})
					}
				}
			case holds && cur.log == nil:
				// The move finished: serve from this node's replica.
				t.parts[i] = lp
				delete(t.learning, int32(i))
			case gets && lp == nil && cur.log == nil:
				if l := newPart(i, mp, true); l.log != nil {
					t.learning[int32(i)] = l
					toOpen = append(toOpen, opening{l, false})
				}
			case !holds && !gets && (cur.log != nil || lp != nil) && mp.Target == nil:
				// Moved away from this node, and the move is over. While a
				// partition moves, the group's configuration may still
				// count this node (a learner a given-up move added, not
				// yet taken out): its copy is kept, and opened again if
				// the partition comes back here, because a replica opened
				// empty under an id the leader thinks caught up would be
				// taken for one that holds what it acknowledged. Once
				// the move ends (FinishMove: the configuration is exactly
				// Replicas) nothing counts it any more.
				if cur.log != nil {
					toDrop = append(toDrop, cur)
					part := newPart(i, mp, false)
					part.committed.Store(cur.committed.Load())
					t.parts[i] = part
				}
				if lp != nil {
					toDrop = append(toDrop, lp)
					delete(t.learning, int32(i))
				}
			}
			if cur := t.parts[i]; holds && cur.log != nil && cur.replica != want {
				toStop = append(toStop, cur)
				part := newPart(i, mp, true)
				part.committed.Store(cur.committed.Load())
				t.parts[i] = part
				if part.log != nil {
					toOpen = append(toOpen, opening{part, false})
				}
			}
		}
	}
	n.mu.Unlock()
	for _, part := range toStop {
		ops.stop(part)
	}
	for _, part := range toDrop {
		ops.drop(part)
	}
	// Opening a new replica writes and fsyncs its first entries and state:
	// a topic of many partitions opens them together, so that their writes
	// share the store's group commits.
	sem := make(chan struct{}, maxParallelOpens)
	var wg sync.WaitGroup
	for _, o := range toOpen {
		sem <- struct{}{}
		wg.Add(1)
		go func() { // owned: awaited below
			defer func() { <-sem; wg.Done() }()
			_ = ops.open(o.part, o.bootstrap) // logged by open
		}()
	}
	wg.Wait()
	for _, part := range retune {
		ops.retain(part)
	}
	if len(toOpen) > 0 || len(toDrop) > 0 || len(toStop) > 0 || !ok {
		t.notify()
	}
}
