package deliver

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/tracing"
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

// recordSpan records one attempt with the group's tracer (driver side).
func recordSpan(tr trace.Tracer, sp *attemptSpan) {
	ctx := tracing.Parent(context.Background(), sp.traceparent, sp.tracestate)
	_, span := tr.Start(ctx, sp.topic+" deliver",
		trace.WithTimestamp(sp.start),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			tracing.System.String(tracing.SystemName),
			tracing.Operation.String("deliver"),
			tracing.Destination.String(sp.topic),
			tracing.Partition.String(strconv.Itoa(int(sp.partition))),
			tracing.Group.String(sp.group),
			tracing.MessageID.String(sp.id),
			tracing.Attempt.Int(sp.attempt),
			tracing.Offset.Int64(sp.offset),
			tracing.Outcome.String(sp.outcome),
			tracing.Consumer.String(sp.consumer),
		))
	switch sp.outcome {
	case OutcomeAck, OutcomeRelease, OutcomeHandedBack:
	default:
		span.SetStatus(codes.Error, sp.errText)
	}
	span.End(trace.WithTimestamp(sp.end))
}
