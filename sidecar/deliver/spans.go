package deliver

import (
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// OpenTelemetry spans of delivery attempts (docs/protocol.md, "Trace
// context"). With GroupConfig.Tracer set, the machine emits one actSpan per
// attempt when the attempt ends — settled, expired, released with its
// stream or handed back — carrying when it was sent and the message's
// trace context kept at send time; the driver records it as a finished
// span, a child of the message's traceparent. Nothing is held per
// delivery but two strings, and with Tracer nil the machine emits nothing.

// Outcomes of an attempt, the span attribute messaging.spool.outcome.
const (
	OutcomeAck          = "ack"
	OutcomeRetry        = "retry"
	OutcomeDeadLetter   = "dead_letter"
	OutcomeRelease      = "release"
	OutcomeLeaseExpired = "lease_expired"
	OutcomeStreamClosed = "stream_closed"
	// OutcomeHandedBack: taken back uncounted (its frame could not be
	// queued, or its partition moved to another sidecar).
	OutcomeHandedBack = "handed_back"
)

// attemptSpan is one delivery attempt, ended.
type attemptSpan struct {
	topic, group, consumer  string
	partition               int32
	offset                  int64
	id                      string
	attempt                 int
	traceparent, tracestate string
	start, end              time.Time
	outcome, errText        string
}

// span emits the span of attempt o of offset in p, which ended now with
// outcome. c is the consumer that held it (nil when unknown).
func (m *machine) span(now time.Time, s *sub, p *part, offset int64, o sent, c *consumer, outcome, errText string) {
	sp := &attemptSpan{topic: s.cfg.Topic, group: m.cfg.Name, partition: p.num, offset: offset, id: o.id, attempt: o.attempt,
		traceparent: o.traceparent, tracestate: o.tracestate, start: o.at, end: now, outcome: outcome, errText: errText}
	if c != nil {
		sp.consumer = c.name
	}
	m.emit(action{kind: actSpan, span: sp})
}

// spanOutcome names a nack's outcome.
func spanOutcome(o spoolv1.Outcome) string {
	switch o {
	case spoolv1.Outcome_OUTCOME_RETRY:
		return OutcomeRetry
	case spoolv1.Outcome_OUTCOME_DEAD_LETTER:
		return OutcomeDeadLetter
	case spoolv1.Outcome_OUTCOME_RELEASE:
		return OutcomeRelease
	}
	return "unknown"
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
