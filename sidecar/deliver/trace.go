package deliver

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Tracing deliveries for the admin Tail (`spool tail --group`): while a
// stream follows a topic, the machine emits each step of its deliveries
// (handed to a consumer, acked, retried, dead-lettered, released) as an
// actTrace; the driver hands it to the streams without blocking. A stream
// that does not keep up loses steps (counted in Dropped), never slows the
// delivery loop.

// MaxTraceBacklog bounds the steps waiting for one Tail stream.
const MaxTraceBacklog = 1024

// tap is one Tail stream following a topic's deliveries.
type tap struct {
	topic   string
	ch      chan *spoolv1.TailDelivery
	dropped atomic.Int64
}

// DeliveryTrace is a stream of delivery steps of one topic.
type DeliveryTrace struct {
	// C carries the steps; it is never closed (stop with Stop).
	C <-chan *spoolv1.TailDelivery
	t *tap
	g *Group
}

// Dropped is how many steps were lost because the reader was behind.
func (d *DeliveryTrace) Dropped() int64 { return d.t.dropped.Load() }

// Stop ends the trace (the group stops emitting when nobody follows).
func (d *DeliveryTrace) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.g.post(ctx, tapEvent{t: d.t, add: false}) // a stopped group follows nobody
}

// TraceDeliveries follows the deliveries of one of the group's topics.
func (g *Group) TraceDeliveries(ctx context.Context, topic string) (*DeliveryTrace, error) {
	t := &tap{topic: topic, ch: make(chan *spoolv1.TailDelivery, MaxTraceBacklog)}
	if err := g.post(ctx, tapEvent{t: t, add: true}); err != nil {
		return nil, fmt.Errorf("group %s: follow deliveries of %s: %w", g.cfg.Name, topic, err)
	}
	return &DeliveryTrace{C: t.ch, t: t, g: g}, nil
}

type tapEvent struct {
	t   *tap
	add bool
}

func (e tapEvent) apply(g *Group, _ time.Time) {
	s := g.mc.byTop[e.t.topic]
	if e.add {
		g.taps = append(g.taps, e.t)
		if s != nil {
			s.traced++
		}
		return
	}
	for i, t := range g.taps {
		if t == e.t {
			g.taps = append(g.taps[:i], g.taps[i+1:]...)
			if s != nil {
				s.traced--
			}
			return
		}
	}
}

// traced hands one step to the streams following topic.
func (g *Group) traced(topic string, d *spoolv1.TailDelivery) {
	for _, t := range g.taps {
		if t.topic != topic {
			continue
		}
		select {
		case t.ch <- d:
		default:
			t.dropped.Add(1)
		}
	}
}

// trace emits one step of a delivery of s (only while a stream follows it).
func (m *machine) trace(now time.Time, s *sub, kind spoolv1.TailDeliveryKind, partition int32, offset int64, id string, attempt int32, c *consumer, errText, reason string) {
	m.emit(action{kind: actTrace, s: s, trace: &spoolv1.TailDelivery{
		Kind: kind, Partition: partition, Offset: offset, Id: id, Attempt: attempt,
		Consumer: c.name, Error: errText, Reason: reason, TimeMs: now.UnixMilli(),
	}})
}

// traceKind is the step a settlement outcome is.
func traceKind(o spoolv1.Outcome) spoolv1.TailDeliveryKind {
	switch o {
	case spoolv1.Outcome_OUTCOME_RETRY:
		return spoolv1.TailDeliveryKind_TAIL_DELIVERY_KIND_RETRY
	case spoolv1.Outcome_OUTCOME_DEAD_LETTER:
		return spoolv1.TailDeliveryKind_TAIL_DELIVERY_KIND_DEAD_LETTER
	case spoolv1.Outcome_OUTCOME_RELEASE:
		return spoolv1.TailDeliveryKind_TAIL_DELIVERY_KIND_RELEASED
	}
	return spoolv1.TailDeliveryKind_TAIL_DELIVERY_KIND_UNSPECIFIED
}
