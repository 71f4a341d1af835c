package deliver

import (
	"log/slog"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// Records that cannot be delivered, and frames that could not be sent.
// One such record affects only itself: it is dead-lettered with a reason
// of its own, and no other delivery is charged an attempt for it.

// ReasonUndecodable starts the dead-letter reason of a record its backend
// could not decode (engine.HeaderUndecodable); it is also the record's
// dead_lettered_total reason label.
const ReasonUndecodable = "undecodable_record"

// ReasonUnsendable starts the dead-letter reason of a delivery the sidecar
// could not encode for the app's stream; its dead_lettered_total label.
const ReasonUnsendable = "unsendable_delivery"

// undecodable reports whether r stands for a message its backend could
// not decode, and what was wrong with it.
func undecodable(r *engine.Record) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == engine.HeaderUndecodable {
			return WireText(h.Value), true
		}
	}
	return "", false
}

// refuseUndecodable dead-letters an admitted candidate that is no record
// (its credit returns): it never reaches the app.
func (m *machine) refuseUndecodable(now time.Time, cd *candidate, what string) {
	cd.c.credit++
	reason := cutText(ReasonUndecodable+": "+what, MaxReasonBytes)
	// Counted in dead_lettered_total{reason="undecodable_record"} and
	// logged with the other dead letters once written; the backend warned
	// once per partition when it read the first.
	if cd.p.tr.DeadLetter(now, cd.d.Offset, cd.d.Token, reason) == nil {
		cd.s.stats[statDeadLetters]++
		cd.p.recordFailure(now, cd.d.Offset, cd.attempt, reason, "")
	}
}

// unsendable finds the deliveries of frames that the sidecar cannot
// encode (protobuf-go's error for each, by delivery). The driver asks it
// after a send failed, off the loop; an empty answer means the stream
// itself failed.
func unsendable(frames []*spoolv1.SubscribeResponse) map[refKey]string {
	var bad map[refKey]string
	for _, f := range frames {
		if _, err := proto.Marshal(f); err == nil {
			continue
		}
		for _, d := range f.GetDeliveries() {
			if _, err := proto.Marshal(d); err != nil {
				if bad == nil {
					bad = map[refKey]string{}
				}
				bad[refKey{d.GetTopic(), d.GetPartition(), d.GetOffset()}] = err.Error()
			}
		}
	}
	return bad
}

// sendFailed answers frames a stream's sender could not send (the failed
// one) or never took (those queued behind it) when the stream ended: their
// deliveries go back uncounted, except those the sidecar cannot encode
// (bad), which are dead-lettered with their own reason. With bad not
// empty, the stream ended because of the sidecar: what else the consumer
// holds goes back uncounted too when it leaves.
func (m *machine) sendFailed(now time.Time, c *consumer, frames []*spoolv1.SubscribeResponse, bad map[refKey]string) {
	if len(bad) > 0 {
		c.sendFailed = true
	}
	for _, f := range frames {
		for _, d := range f.GetDeliveries() {
			k := refKey{d.GetTopic(), d.GetPartition(), d.GetOffset()}
			why, isBad := bad[k]
			o, ok := c.outstanding[k]
			if !isBad || !ok {
				continue
			}
			s, p := m.lookup(k.topic, k.part)
			if p == nil {
				continue
			}
			delete(c.outstanding, k)
			c.credit++
			reason := cutText(ReasonUnsendable+": "+why, MaxReasonBytes)
			if p.tr.DeadLetter(now, k.offset, o.token, reason) == nil {
				s.stats[statDeadLetters]++
				m.probeLost(now, s, o)
				p.recordFailure(now, k.offset, o.attempt, reason, o.appVersion)
				m.note(slog.LevelError, "delivery could not be encoded for the app's stream: dead-lettered", "consumer", c.name,
					"topic", k.topic, "partition", k.part, "offset", k.offset, "reason", reason)
			}
		}
		m.frameUnsent(now, c, f)
	}
}

// reasonLabel maps a dead-letter reason to the fixed set of
// dead_lettered_total labels.
func reasonLabel(reason string) string {
	switch {
	case reason == tracker.ReasonMaxAttempts:
		return tracker.ReasonMaxAttempts
	case strings.HasPrefix(reason, ReasonUndecodable):
		return ReasonUndecodable
	case strings.HasPrefix(reason, ReasonUnsendable):
		return ReasonUnsendable
	}
	return ReasonApplication
}

// sendFailedEvent: frames a stream did not send (Server.unsent).
type sendFailedEvent struct {
	c      *consumer
	frames []*spoolv1.SubscribeResponse
	bad    map[refKey]string
}

func (e sendFailedEvent) apply(g *Group, now time.Time) { g.mc.sendFailed(now, e.c, e.frames, e.bad) }
