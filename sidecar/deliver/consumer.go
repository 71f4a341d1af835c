package deliver

import (
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/tracing"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// consumer is one receiver of deliveries: an app's Subscribe stream or the
// callback dispatcher, as the machine sees it. Its fields below conn are
// owned by the group loop; conn is the driver's side (conn.go: the queue
// of frames to the consumer's sender), which the machine never touches:
// it emits actSend, and the driver queues the frame.
type consumer struct {
	conn
	name        string
	appVersion  string          // from Start, recorded with failed attempts
	topics      map[string]bool // nil: every topic of its mode
	mode        Mode
	maxInFlight int

	credit      int
	reserved    int // deliveries taken for this consumer, waiting for the ledger
	outstanding map[refKey]sent
	// dups: deliveries sent twice by fault injection (faults.go), by the
	// wire token of the copies; the second settlement is dropped.
	dups       map[refKey]uint64
	frame      []*spoolv1.Delivery // being built by send
	frameBytes int                 // estimated wire size of frame
	frameFence time.Time           // earliest fenceAt of frame's deliveries (zero: none)
	// maxFrameBytes bounds a delivery frame's size (0: unbounded, for the
	// callback dispatcher, whose deliveries never cross the wire together).
	maxFrameBytes int
	closed        bool
	// sendFailed: the sidecar could not send a frame on the stream (its
	// deliveries could not be encoded); the stream ended for it, and what
	// it held goes back uncounted (machine.leave).
	sendFailed bool
	rr, rrPart int
}

type refKey struct {
	topic  string
	part   int32
	offset int64
}

// sent is a delivery outstanding at a consumer. token is the tracker's;
// wire is the fencing token the app saw (the ledger's, when there is one,
// so that it grows across failovers), which settlements must echo.
type sent struct {
	token      uint64
	wire       uint64
	id         string
	attempt    int
	appVersion string
	probe      bool // the probe of a half-open breaker
	at         time.Time
	// With tracing on: the message's trace context, and whether the lease
	// expired (the attempt's span is recorded then, not at a late ack).
	traceparent, tracestate string
	expired                 bool
}

func (c *consumer) wants(s *sub) bool {
	if s.cfg.Mode != c.mode {
		return false
	}
	return c.topics == nil || c.topics[s.cfg.Topic]
}

// free is how many more deliveries the consumer can take now.
func (c *consumer) free() int {
	return min(c.credit, c.maxInFlight-len(c.outstanding)-c.reserved)
}

// track records a delivery as outstanding at c and converts it for the wire.
// With traced, the message's trace context is kept for the attempt's span.
func (c *consumer) track(now time.Time, group string, s *sub, p *part, cd *candidate, traced bool) *spoolv1.Delivery {
	d := &cd.d
	r := &d.Value
	id := string(r.ID) // the ledger's key, as claimed (pipeline.go)
	o := sent{token: d.Token, wire: cd.wire, id: id, attempt: cd.attempt, appVersion: c.appVersion, probe: cd.probe, at: now}
	s.stats[statDeliveries]++
	if cd.attempt > 1 {
		s.stats[statRedeliveries]++
	}
	lastErr := d.LastError
	if lastErr == "" {
		lastErr = cd.lastError
	}
	out := &spoolv1.Delivery{
		MessageId:           WireID(r.ID),
		Topic:               s.cfg.Topic,
		Partition:           p.num,
		Offset:              d.Offset,
		Key:                 r.Key,
		Payload:             r.Value,
		PublishTimeMs:       r.Timestamp,
		Attempt:             int32(cd.attempt),
		FirstDeliveryTimeMs: d.FirstDelivered.UnixMilli(),
		LastError:           lastErr,
		LeaseDeadlineMs:     d.Deadline.UnixMilli(),
		FencingToken:        cd.wire,
		Group:               group,
	}
	if len(r.Headers) > 0 {
		out.Headers = WireHeaders(r.Headers, nil)
		if traced {
			o.traceparent, o.tracestate = out.Headers[tracing.HeaderTraceparent], out.Headers[tracing.HeaderTracestate]
		}
	}
	c.outstanding[refKey{s.cfg.Topic, p.num, d.Offset}] = o
	return out
}

// Frame size estimates: an upper bound of a delivery's encoded size (field
// tags and lengths included), cheap enough for every message.
const (
	deliveryOverhead = 128
	headerOverhead   = 16
)

// deliveryBytes estimates the wire size of a delivery before it is built.
func deliveryBytes(d *tracker.Delivery[engine.Record]) int {
	r := &d.Value
	n := deliveryOverhead + 2*wireIDBytes(r.ID) + len(r.Key) + len(r.Value) + len(d.LastError)
	for _, h := range r.Headers {
		n += headerOverhead + wireHeaderBytes(h)
	}
	return n
}

// wireBytes estimates the wire size of a built delivery.
func wireBytes(d *spoolv1.Delivery) int {
	n := deliveryOverhead + len(d.MessageId) + len(d.Topic) + len(d.Key) + len(d.Payload) + len(d.LastError) + len(d.Group)
	for k, v := range d.Headers {
		n += headerOverhead + len(k) + len(v)
	}
	return n
}

// Frame limits of a stream: what it can receive (Start.max_receive_bytes,
// 0 meaning gRPC's default) less room for the frame's own framing.
const (
	defaultReceiveBytes = 4 << 20
	frameHeadroom       = 64 << 10
	minFrameBytes       = 64 << 10
)

// frameLimit is the largest delivery frame sent to a stream that can
// receive maxReceive bytes (0: gRPC's default, 4 MiB).
func frameLimit(maxReceive uint32) int {
	limit := int(maxReceive)
	if limit == 0 {
		limit = defaultReceiveBytes
	}
	return max(limit-frameHeadroom, min(limit, minFrameBytes))
}
