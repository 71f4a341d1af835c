package embedded

import (
	"errors"
	"fmt"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// Watch registers ch to be signalled, without blocking, whenever the
// committed end of any partition of the given topics moves. ch should have
// a capacity of 1: a signal already pending is enough. cancel unregisters.
func (n *Node) Watch(topics []string, ch chan<- struct{}) (cancel func(), err error) {
	ts := make([]*topic, 0, len(topics))
	n.mu.RLock()
	for _, name := range topics {
		t, ok := n.topics[name]
		if !ok {
			n.mu.RUnlock()
			return nil, fmt.Errorf("%w %q: declare it under topics in the sidecar's config", engine.ErrUnknownTopic, name)
		}
		ts = append(ts, t)
	}
	n.mu.RUnlock()
	w := &watcher{ch: ch}
	for _, t := range ts {
		t.mu.Lock()
		if t.watchers == nil {
			t.watchers = map[*watcher]struct{}{}
		}
		t.watchers[w] = struct{}{}
		t.mu.Unlock()
	}
	return func() {
		for _, t := range ts {
			t.mu.Lock()
			delete(t.watchers, w)
			t.mu.Unlock()
		}
	}, nil
}

type watcher struct{ ch chan<- struct{} }

// RecordTime returns the append time, in Unix milliseconds, of the record at
// offset (for lag in seconds). It reads the header of the batch holding the
// offset, not the batch: the records of one append share its time.
func (n *Node) RecordTime(topicName string, p int32, offset int64) (int64, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, err
	}
	if end := part.committed.Load(); offset >= end {
		return 0, fmt.Errorf("engine: %s/%d: no record at offset %d (the committed end is %d)", topicName, p, offset, end)
	}
	if part.log == nil {
		return 0, fmt.Errorf("engine: %s/%d: this node holds no replica of it (lag in seconds is reported by the nodes that do)", topicName, p)
	}
	ts, err := part.log.BatchTime(offset)
	var ce *log.CorruptionError
	if errors.As(err, &ce) {
		n.quarantine(part, ce)
	}
	return ts, err
}
