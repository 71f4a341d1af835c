package deliver

import (
	"cmp"
	"errors"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// event is something for the loop to apply. Group.post (group.go) queues
// one on the loop's inbox.
type event interface{ apply(g *Group, now time.Time) }

type joinEvent struct{ c *consumer }

func (e joinEvent) apply(g *Group, _ time.Time) { g.mc.join(e.c) }

type leaveEvent struct{ c *consumer }

// apply first hands back, uncounted, the frames still queued for the
// consumer: its sender has stopped, so they never reached the app.
func (e leaveEvent) apply(g *Group, now time.Time) {
	for len(e.c.out) > 0 {
		g.mc.frameUnsent(now, e.c, (<-e.c.out).f)
	}
	g.mc.leave(now, e.c)
}

type settleEvent struct {
	c   *consumer
	req *spoolv1.SubscribeRequest
}

func (e settleEvent) apply(g *Group, now time.Time) { g.mc.settle(now, e.c, e.req) }

// settle applies every ack, nack and extend of one frame and adds its
// credit. Text the app supplies is cut to MaxErrorBytes / MaxReasonBytes.
func (m *machine) settle(now time.Time, c *consumer, req *spoolv1.SubscribeRequest) {
	var errs []*spoolv1.SettleError
	for _, a := range req.GetAcks() {
		if se := m.settleAck(now, c, a.GetRef()); se != nil {
			errs = append(errs, se)
		}
	}
	for _, n := range req.GetNacks() {
		ref := n.GetRef()
		if len(c.dups) > 0 && m.duplicateSettled(c, refKey{ref.GetTopic(), ref.GetPartition(), ref.GetOffset()}, ref.GetFencingToken()) {
			continue
		}
		s, p, o, err := m.settleTarget(c, ref)
		if err == nil {
			off, tok := ref.GetOffset(), o.token
			switch n.GetOutcome() {
			case spoolv1.Outcome_OUTCOME_RETRY:
				counted := true
				if s.brk != nil {
					var trs []breaker.Transition
					counted, trs = s.brk.Failure(now, n.GetDownstream(), o.probe)
					m.report(s, trs)
				}
				if !counted {
					// The downstream's breaker is open: this failure is the
					// outage's, not the message's. No attempt is counted.
					if err = p.tr.Defer(now, off, tok, now); err == nil {
						s.stats[statUncounted]++
						m.ledgerRelease(s, o, cutText(n.GetError(), MaxErrorBytes), true)
					}
					break
				}
				after := time.Duration(n.GetRetryAfterMs()) * time.Millisecond
				errText := cutText(n.GetError(), MaxErrorBytes)
				if err = p.tr.Retry(now, off, tok, after, errText); err == nil {
					s.stats[statRetries]++
					p.recordFailure(now, off, o.attempt, errText, o.appVersion)
					m.ledgerRelease(s, o, errText, false)
				}
			case spoolv1.Outcome_OUTCOME_DEAD_LETTER:
				reason := cutText(n.GetReason(), MaxReasonBytes)
				if reason == "" {
					reason = "dead-lettered by the application"
				}
				if err = p.tr.DeadLetter(now, off, tok, reason); err == nil {
					s.stats[statDeadLetters]++
					m.probeLost(now, s, o)
					p.recordFailure(now, off, o.attempt, cmp.Or(cutText(n.GetError(), MaxErrorBytes), reason), o.appVersion)
				}
			case spoolv1.Outcome_OUTCOME_RELEASE:
				if err = p.tr.Release(now, off, tok, false); err == nil {
					s.stats[statReleases]++
					m.probeLost(now, s, o)
					m.ledgerRelease(s, o, "", true)
				}
			default:
				err = errBadOutcome
			}
			if err == nil && m.cfg.Tracer != nil {
				m.span(now, s, p, off, o, c, spanOutcome(n.GetOutcome()), cmp.Or(cutText(n.GetError(), MaxErrorBytes), cutText(n.GetReason(), MaxReasonBytes)))
			}
			if err == nil && s.traced > 0 {
				m.trace(now, s, traceKind(n.GetOutcome()), p.num, off, o.id, int32(o.attempt), c, cutText(n.GetError(), MaxErrorBytes), cmp.Or(cutText(n.GetReason(), MaxReasonBytes), n.GetDownstream()))
			}
			if err == nil {
				if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RELEASE {
					s.latencies = append(s.latencies, now.Sub(o.at).Seconds())
				}
				delete(c.outstanding, refKey{ref.GetTopic(), ref.GetPartition(), off})
			}
		}
		if err != nil {
			errs = append(errs, m.settleError(ref, err))
		}
	}
	for _, x := range req.GetExtends() {
		ref := x.GetRef()
		s, p, o, err := m.settleTarget(c, ref)
		if err == nil {
			d := time.Duration(x.GetExtendByMs()) * time.Millisecond
			if d <= 0 {
				d = s.cfg.Tracker.VisibilityTimeout
			}
			_, err = p.tr.Extend(now, ref.GetOffset(), o.token, now.Add(d))
		}
		if err != nil {
			errs = append(errs, m.settleError(ref, err))
		}
	}
	c.credit += int(req.GetCredit())
	if len(errs) > 0 {
		m.emit(action{kind: actSend, c: c, frame: &spoolv1.SubscribeResponse{SettleErrors: errs}})
	}
}

// settleAck applies one ack; it returns the error to tell the app, if any.
func (m *machine) settleAck(now time.Time, c *consumer, ref *spoolv1.DeliveryRef) *spoolv1.SettleError {
	k := refKey{ref.GetTopic(), ref.GetPartition(), ref.GetOffset()}
	if len(m.fenced) > 0 && m.ackFenced(now, c, k, ref.GetFencingToken()) {
		return nil
	}
	if len(c.dups) > 0 && m.duplicateSettled(c, k, ref.GetFencingToken()) {
		return nil
	}
	s, p, o, err := m.settleTarget(c, ref)
	if err != nil {
		return m.settleError(ref, err)
	}
	if s.faults != nil && m.loseAck(now, c, s, p, k, o) {
		return nil
	}
	if err := p.tr.Ack(now, k.offset, o.token); err != nil {
		return m.settleError(ref, err)
	}
	s.stats[statAcks]++
	if s.traced > 0 {
		m.trace(now, s, spoolv1.TailDeliveryKind_TAIL_DELIVERY_KIND_ACKED, p.num, k.offset, o.id, int32(o.attempt), c, "", "")
	}
	if m.cfg.Tracer != nil && !o.expired { // a late ack's attempt was recorded when its lease expired
		m.span(now, s, p, k.offset, o, c, OutcomeAck, "")
	}
	s.latencies = append(s.latencies, now.Sub(o.at).Seconds())
	delete(c.outstanding, k)
	m.ledgerDone(s, p, k.offset, o)
	if s.brk != nil {
		m.report(s, s.brk.Success(now, o.probe))
	}
	return nil
}

var (
	errBadOutcome  = errors.New("nack outcome must be OUTCOME_RETRY, OUTCOME_DEAD_LETTER or OUTCOME_RELEASE")
	errNotYours    = errors.New("delivery is not outstanding on this stream (it was released, settled, or its lease expired)")
	errUnknownPart = errors.New("no such topic or partition in this group's subscriptions")
)

func (m *machine) settleTarget(c *consumer, ref *spoolv1.DeliveryRef) (*sub, *part, sent, error) {
	s, p := m.lookup(ref.GetTopic(), ref.GetPartition())
	if p == nil {
		return nil, nil, sent{}, errUnknownPart
	}
	k := refKey{ref.GetTopic(), ref.GetPartition(), ref.GetOffset()}
	o, ok := c.outstanding[k]
	if !ok {
		// Its lease expired and it waits for a retry: a late ack is still
		// applied (the work was done); the tracker refuses anything else.
		if o, late := m.expired[k]; late && o.wire == ref.GetFencingToken() {
			delete(m.expired, k)
			return s, p, o, nil
		}
		return nil, nil, sent{}, errNotYours
	}
	if o.wire != ref.GetFencingToken() {
		return nil, nil, sent{}, tracker.ErrStaleToken
	}
	return s, p, o, nil
}

func (m *machine) settleError(ref *spoolv1.DeliveryRef, err error) *spoolv1.SettleError {
	reason := "INVALID_SETTLEMENT"
	switch {
	case errors.Is(err, tracker.ErrStaleToken):
		reason = "STALE_FENCING_TOKEN"
	case errors.Is(err, tracker.ErrUnknownOffset), errors.Is(err, tracker.ErrNotInFlight), errors.Is(err, errNotYours):
		reason = "NOT_IN_FLIGHT"
	case errors.Is(err, errUnknownPart):
		reason = "UNKNOWN_PARTITION"
	}
	m.count(metricKey{id: metSettleErrors, l1: reason}, 1)
	return &spoolv1.SettleError{Ref: ref, Reason: reason, Message: err.Error()}
}
