package kafka

import (
	"context"
)

type watcher struct{ ch chan<- struct{} }

// Watch signals ch (without blocking) whenever the high watermark of a
// partition of the topics moves: Run polls the end offsets of watched
// topics every Config.WatchInterval, and a produce through this backend
// signals as soon as Kafka acks it.
func (b *Backend) Watch(topics []string, ch chan<- struct{}) (cancel func(), err error) {
	ts := make([]*topic, 0, len(topics))
	b.mu.RLock()
	for _, name := range topics {
		t, ok := b.topics[name]
		if !ok {
			b.mu.RUnlock()
			return nil, unknownTopic(name)
		}
		ts = append(ts, t)
	}
	b.mu.RUnlock()
	w := &watcher{ch: ch}
	for _, t := range ts {
		t.watchMu.Lock()
		if t.watchers == nil {
			t.watchers = map[*watcher]struct{}{}
		}
		t.watchers[w] = struct{}{}
		t.watchMu.Unlock()
	}
	return func() {
		for _, t := range ts {
			t.watchMu.Lock()
			delete(t.watchers, w)
			t.watchMu.Unlock()
		}
	}, nil
}

// poll lists the end offsets of the watched topics (one request per
// leader broker) and signals the watchers of each topic whose ends moved.
// A failed poll signals every watcher: it looks for itself and finds
// what is wrong, and the next poll tries again.
func (b *Backend) poll(ctx context.Context) {
	b.mu.RLock()
	watched := map[string]*topic{}
	for _, t := range b.topics {
		t.watchMu.Lock()
		if len(t.watchers) > 0 {
			watched[t.kname] = t
		}
		t.watchMu.Unlock()
	}
	b.mu.RUnlock()
	if len(watched) == 0 {
		return
	}
	names := make([]string, 0, len(watched))
	for n := range watched {
		names = append(names, n)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	ends, err := b.admin.ListEndOffsets(ctx, names...)
	for kname, t := range watched {
		moved := err != nil
		t.watchMu.Lock()
		if t.ends == nil {
			t.ends = map[int32]int64{}
		}
		for p, o := range ends[kname] {
			if o.Err != nil {
				moved = true
				continue
			}
			if t.ends[p] != o.Offset {
				t.ends[p] = o.Offset
				moved = true
			}
		}
		t.watchMu.Unlock()
		if moved {
			t.notify()
		}
	}
}

// notify signals the topic's watchers without blocking.
func (t *topic) notify() {
	t.watchMu.Lock()
	defer t.watchMu.Unlock()
	for w := range t.watchers {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}
