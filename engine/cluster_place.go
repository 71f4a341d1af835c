package engine

import (
	"slices"
	"sync"
	"time"

	"github.com/spoolmq/spool/engine/meta"
)

// maxParallelOpens bounds the replicas opened at once.
const maxParallelOpens = 64

// placeTopic makes a topic of the controller's state known on this node:
// the topic itself as soon as it is created (so that subscriptions and
// Partitions work while it waits for nodes), and its partitions once placed,
// with a log for each partition this node holds a replica of. open starts
// those replicas, retain gives the running ones a changed retention; both
// are called with no engine lock held.
func (n *Node) placeTopic(mt meta.Topic, self uint64, open func(*partition) error, retain func(*partition)) {
	spec := TopicSpec{
		Name:           mt.Spec.Name,
		Partitions:     mt.Spec.Partitions,
		RetentionAge:   time.Duration(mt.Spec.RetentionAgeMs) * time.Millisecond,
		RetentionBytes: mt.Spec.RetentionBytes,
	}
	var toOpen, retune []*partition
	n.mu.Lock()
	t, ok := n.topics[spec.Name]
	if !ok {
		t = &topic{name: spec.Name, changed: make(chan struct{})}
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
	}
	t.spec = spec
	if len(mt.Partitions) == len(t.parts) && t.parts[0].group == 0 {
		for i, mp := range mt.Partitions {
			part := &partition{topic: t, num: int32(i), group: mp.Group, replicas: slices.Clone(mp.Replicas)}
			part.limit.Store(noLimit)
			if slices.Contains(mp.Replicas, self) {
				lp, err := n.store.Partition(PartitionName(spec.Name, int32(i)))
				if err == nil {
					err = lp.SetRetention(0, 0) // the group's retention, not the log's
				}
				if err != nil { // served from the other replicas meanwhile
					n.cfg.Logger.Error("spool cluster: cannot open a partition's log", "topic", spec.Name, "partition", i, "err", err)
				} else {
					part.log = lp
					toOpen = append(toOpen, part)
				}
			}
			t.parts[i] = part
		}
	}
	n.mu.Unlock()
	// Opening a new replica writes and fsyncs its first entries and state:
	// a topic of many partitions opens them together, so that their writes
	// share the store's group commits.
	sem := make(chan struct{}, maxParallelOpens)
	var wg sync.WaitGroup
	for _, part := range toOpen {
		sem <- struct{}{}
		wg.Add(1)
		go func() { // owned: awaited below
			defer func() { <-sem; wg.Done() }()
			_ = open(part) // logged by open
		}()
	}
	wg.Wait()
	for _, part := range retune {
		retain(part)
	}
	if len(toOpen) > 0 || !ok {
		t.notify()
	}
}
