package jetstream

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

type watcher struct{ ch chan<- struct{} }

// Watch signals ch (without blocking) whenever a partition of the topics
// gets a message: an ordered, headers-only consumer per partition from
// the stream's end, started with the topic's first watcher and shared by
// the others. Run signals every watcher once a second as well.
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
		if err := b.follow(t); err != nil {
			return nil, err
		}
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

// follow starts the topic's consumers once.
func (b *Backend) follow(t *topic) error {
	t.watchMu.Lock()
	defer t.watchMu.Unlock()
	if t.follow != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	var started []jetstream.ConsumeContext
	for _, p := range t.parts {
		c, err := b.js.OrderedConsumer(ctx, p.stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true})
		if err == nil {
			var cc jetstream.ConsumeContext
			cc, err = c.Consume(func(jetstream.Msg) { t.notify() })
			if err == nil {
				started = append(started, cc)
				continue
			}
		}
		for _, cc := range started {
			cc.Stop()
		}
		return err
	}
	t.follow = started
	return nil
}

// stopFollowing stops the topic's consumers.
func (t *topic) stopFollowing() {
	t.watchMu.Lock()
	defer t.watchMu.Unlock()
	for _, cc := range t.follow {
		cc.Stop()
	}
	t.follow = nil
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
