package deliver

import (
	"cmp"
	"context"
	"errors"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// event is something for the loop to apply.
type event interface{ apply(g *Group, now time.Time) }

func (g *Group) handle(now time.Time, ev event) { ev.apply(g, now) }

// post queues an event for the loop, giving up when ctx ends.
func (g *Group) post(ctx context.Context, ev event) error {
	select {
	case g.inbox <- ev:
		return nil
	case <-g.stopped:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

type joinEvent struct{ c *consumer }

func (e joinEvent) apply(g *Group, _ time.Time) {
	g.consumers = append(g.consumers, e.c)
	g.m.Consumers.WithLabelValues(g.cfg.Name).Set(float64(len(g.consumers)))
}

type leaveEvent struct{ c *consumer }

// apply releases everything the consumer still holds at once: each counts
// as an attempt (the app may have started it) and is redelivered without
// backoff.
func (e leaveEvent) apply(g *Group, now time.Time) {
	c := e.c
	c.closed = true
	for k, o := range c.outstanding {
		s, p := g.lookup(k.topic, k.part)
		if p == nil {
			continue
		}
		if err := p.tr.Release(now, k.offset, o.token, true); err == nil {
			s.streamClosed.Inc()
			g.probeLost(now, s, o)
			g.ledgerRelease(s, o, tracker.ErrTextReleased, false)
			p.recordFailure(now, k.offset, o.attempt, tracker.ErrTextReleased, o.appVersion)
		}
	}
	clear(c.outstanding)
	for i, x := range g.consumers {
		if x == c {
			g.consumers = append(g.consumers[:i], g.consumers[i+1:]...)
			break
		}
	}
	g.m.Consumers.WithLabelValues(g.cfg.Name).Set(float64(len(g.consumers)))
}

type settleEvent struct {
	c   *consumer
	req *spoolv1.SubscribeRequest
}

func (g *Group) lookup(topic string, partition int32) (*sub, *part) {
	s := g.byTop[topic]
	if s == nil || partition < 0 || int(partition) >= len(s.parts) {
		return s, nil
	}
	return s, s.parts[partition]
}

// apply settles every ack, nack and extend of one frame and adds its credit.
func (e settleEvent) apply(g *Group, now time.Time) {
	c, req := e.c, e.req
	var errs []*spoolv1.SettleError
	for _, a := range req.GetAcks() {
		ref := a.GetRef()
		s, p, o, err := g.settleTarget(c, ref)
		if err == nil {
			if err = p.tr.Ack(now, ref.GetOffset(), o.token); err == nil {
				s.acks.Inc()
				s.handleLatency.Observe(now.Sub(o.at).Seconds())
				delete(c.outstanding, refKey{ref.GetTopic(), ref.GetPartition(), ref.GetOffset()})
				g.ledgerDone(s, p, ref.GetOffset(), o)
				if s.brk != nil {
					g.report(s, s.brk.Success(now, o.probe))
				}
			}
		}
		if err != nil {
			errs = append(errs, g.settleError(ref, err))
		}
	}
	for _, n := range req.GetNacks() {
		ref := n.GetRef()
		s, p, o, err := g.settleTarget(c, ref)
		if err == nil {
			off, tok := ref.GetOffset(), o.token
			switch n.GetOutcome() {
			case spoolv1.Outcome_OUTCOME_RETRY:
				counted := true
				if s.brk != nil {
					var trs []breaker.Transition
					counted, trs = s.brk.Failure(now, n.GetDownstream(), o.probe)
					g.report(s, trs)
				}
				if !counted {
					// The downstream's breaker is open: this failure is the
					// outage's, not the message's. No attempt is counted.
					if err = p.tr.Defer(now, off, tok, now); err == nil {
						s.uncounted.Inc()
						g.ledgerRelease(s, o, n.GetError(), true)
					}
					break
				}
				after := time.Duration(n.GetRetryAfterMs()) * time.Millisecond
				if err = p.tr.Retry(now, off, tok, after, n.GetError()); err == nil {
					s.retries.Inc()
					p.recordFailure(now, off, o.attempt, n.GetError(), o.appVersion)
					g.ledgerRelease(s, o, n.GetError(), false)
				}
			case spoolv1.Outcome_OUTCOME_DEAD_LETTER:
				reason := n.GetReason()
				if reason == "" {
					reason = "dead-lettered by the application"
				}
				if err = p.tr.DeadLetter(now, off, tok, reason); err == nil {
					s.deadLetters.Inc()
					g.probeLost(now, s, o)
					p.recordFailure(now, off, o.attempt, cmp.Or(n.GetError(), reason), o.appVersion)
				}
			case spoolv1.Outcome_OUTCOME_RELEASE:
				if err = p.tr.Release(now, off, tok, false); err == nil {
					s.releases.Inc()
					g.probeLost(now, s, o)
					g.ledgerRelease(s, o, "", true)
				}
			default:
				err = errBadOutcome
			}
			if err == nil {
				if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RELEASE {
					s.handleLatency.Observe(now.Sub(o.at).Seconds())
				}
				delete(c.outstanding, refKey{ref.GetTopic(), ref.GetPartition(), off})
			}
		}
		if err != nil {
			errs = append(errs, g.settleError(ref, err))
		}
	}
	for _, x := range req.GetExtends() {
		ref := x.GetRef()
		s, p, o, err := g.settleTarget(c, ref)
		if err == nil {
			d := time.Duration(x.GetExtendByMs()) * time.Millisecond
			if d <= 0 {
				d = s.cfg.Tracker.VisibilityTimeout
			}
			_, err = p.tr.Extend(now, ref.GetOffset(), o.token, now.Add(d))
		}
		if err != nil {
			errs = append(errs, g.settleError(ref, err))
		}
	}
	c.credit += int(req.GetCredit())
	if len(errs) > 0 && !c.send(&spoolv1.SubscribeResponse{SettleErrors: errs}) {
		g.log.Warn("settle errors dropped: consumer not reading", "consumer", c.name, "count", len(errs))
	}
}

var (
	errBadOutcome  = errors.New("nack outcome must be OUTCOME_RETRY, OUTCOME_DEAD_LETTER or OUTCOME_RELEASE")
	errNotYours    = errors.New("delivery is not outstanding on this stream (it was released, settled, or its lease expired)")
	errUnknownPart = errors.New("no such topic or partition in this group's subscriptions")
)

func (g *Group) settleTarget(c *consumer, ref *spoolv1.DeliveryRef) (*sub, *part, sent, error) {
	s, p := g.lookup(ref.GetTopic(), ref.GetPartition())
	if p == nil {
		return nil, nil, sent{}, errUnknownPart
	}
	k := refKey{ref.GetTopic(), ref.GetPartition(), ref.GetOffset()}
	o, ok := c.outstanding[k]
	if !ok {
		// Its lease expired and it waits for a retry: a late ack is still
		// applied (the work was done); the tracker refuses anything else.
		if o, late := g.expired[k]; late && o.wire == ref.GetFencingToken() {
			delete(g.expired, k)
			return s, p, o, nil
		}
		return nil, nil, sent{}, errNotYours
	}
	if o.wire != ref.GetFencingToken() {
		return nil, nil, sent{}, tracker.ErrStaleToken
	}
	return s, p, o, nil
}

func (g *Group) settleError(ref *spoolv1.DeliveryRef, err error) *spoolv1.SettleError {
	reason := "INVALID_SETTLEMENT"
	switch {
	case errors.Is(err, tracker.ErrStaleToken):
		reason = "STALE_FENCING_TOKEN"
	case errors.Is(err, tracker.ErrUnknownOffset), errors.Is(err, tracker.ErrNotInFlight), errors.Is(err, errNotYours):
		reason = "NOT_IN_FLIGHT"
	case errors.Is(err, errUnknownPart):
		reason = "UNKNOWN_PARTITION"
	}
	g.m.SettleErrors.WithLabelValues(g.cfg.Name, reason).Inc()
	return &spoolv1.SettleError{Ref: ref, Reason: reason, Message: err.Error()}
}

// queryEvent runs f on the loop (for admin snapshots).
type queryEvent struct{ f func(g *Group, now time.Time) }

func (e queryEvent) apply(g *Group, now time.Time) { e.f(g, now) }

// ledgerDone queues the ledger write of an ack.
func (g *Group) ledgerDone(s *sub, p *part, offset int64, o sent) {
	p.takeWire(offset)
	delete(p.history, offset)
	if g.cfg.Ledger != nil && o.id != "" {
		s.ledger.complete = append(s.ledger.complete, ledger.Finish{ID: o.id, Token: o.wire})
	}
}

// ledgerRelease queues the ledger write of a failed or handed-back attempt.
func (g *Group) ledgerRelease(s *sub, o sent, errText string, uncount bool) {
	if g.cfg.Ledger != nil && o.id != "" {
		s.ledger.release = append(s.ledger.release, ledger.Release{ID: o.id, Token: o.wire, Error: errText, Uncount: uncount})
	}
}
