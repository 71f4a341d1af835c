package deliver

import (
	"log/slog"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/ledger"
)

// Fencing of a member in a cluster (docs/groups.md, "Self-fencing").
//
// A member stops its partitions at once when it learns it was fenced (the
// coordinator does not know it, a partition is no longer its own, a commit
// is refused) and, on its own, when the coordinator has taken no heartbeat
// of it for its session timeout: silent(). Its deadline counts from when
// the last heartbeat the coordinator took was sent (sub.heardAt), and the
// coordinator's from when it arrived, so the member stops before the
// coordinator can expire it and grant its partitions to another member.
//
// The deliveries its apps still hold then are not handed back to the
// ledger: their entries stay in progress under their tokens and counted
// attempts. An app's ack of one (fenced) still completes it in the ledger
// under its token, so its new owner finds it done instead of delivering it
// again; one not acked is taken over by the new owner's claim in a newer
// generation (docs/ledger.md, "Generations"), as attempt n+1. Without
// generations comparable across members (Kafka) the deliveries are
// released as before, counted, so the new owner need not wait out their
// leases.

// fencedDelivery is a delivery outstanding at a consumer when its
// partition stopped because the member was fenced.
type fencedDelivery struct {
	c     *consumer
	s     *sub
	o     sent
	until time.Time // forgotten after this (its lease, as the ledger holds it, has ended)
}

// silent reports whether the coordinator has taken no heartbeat of s's
// member for its session timeout by now.
func (m *machine) silent(now time.Time, s *sub) bool {
	return !s.heardAt.IsZero() && !now.Before(s.heardAt.Add(m.cfg.Membership.SessionTimeout))
}

// selfFence stops the partitions of every subscription whose member has
// gone silent.
func (m *machine) selfFence(now time.Time) {
	if !m.cluster {
		return
	}
	for _, s := range m.subs {
		if !m.owns(s) || !m.silent(now, s) {
			continue
		}
		m.count(metricKey{id: metSelfFences, l1: s.cfg.Topic}, 1)
		m.note(slog.LevelWarn, "no heartbeat taken by the group's coordinator for the session timeout: this member stops delivering its partitions before the coordinator can give them to another member",
			"topic", s.cfg.Topic, "last_heard", s.heardAt, "session_timeout", m.cfg.Membership.SessionTimeout)
		for _, p := range s.parts {
			if p.own != ownNone {
				m.stopPart(now, s, p, "self-fenced: the coordinator took no heartbeat for the session timeout")
			}
		}
	}
}

// fenceWake is when selfFence must look at s.
func (m *machine) fenceWake(s *sub) (time.Time, bool) {
	if !m.cluster || s.heardAt.IsZero() || !m.owns(s) {
		return time.Time{}, false
	}
	return s.heardAt.Add(m.cfg.Membership.SessionTimeout), true
}

// fenceAt is when s's member fences itself unless a heartbeat is taken
// first: the deadline a delivery frame of s carries to the consumer's
// sender (queued.fenceAt). Only in a cluster, once the member was heard.
func (m *machine) fenceAt(s *sub) (time.Time, bool) {
	if !m.cluster || s.heardAt.IsZero() {
		return time.Time{}, false
	}
	return s.heardAt.Add(m.cfg.Membership.SessionTimeout), true
}

// frameDropped answers a delivery frame that its sender dropped because
// the frame's member had fenced itself by the time it would have left
// (queued.fenced). The app never had its deliveries: their credit returns,
// and no ack of them will come. Those the machine still counts outstanding
// (it has not noticed the silence yet, or a heartbeat was taken since the
// frame was queued) go back uncounted, as an unsent frame's do; those kept
// after the partition stopped (keepFenced) are forgotten, their ledger
// entries left to the new owner's claim.
func (m *machine) frameDropped(now time.Time, c *consumer, f *spoolv1.SubscribeResponse) {
	for _, d := range f.GetDeliveries() {
		k := refKey{d.GetTopic(), d.GetPartition(), d.GetOffset()}
		m.count(metricKey{id: metFencedDrops, l1: k.topic}, 1)
		if fd, ok := m.fenced[k]; ok && fd.c == c && fd.o.wire == d.GetFencingToken() {
			delete(m.fenced, k)
			c.credit++
		}
	}
	m.frameUnsent(now, c, f)
}

// droppedEvent: a delivery frame the consumer's sender dropped, fenced.
type droppedEvent struct {
	c *consumer
	f *spoolv1.SubscribeResponse
}

func (e droppedEvent) apply(g *Group, now time.Time) { g.mc.frameDropped(now, e.c, e.f) }

// keepFenced takes over the delivery o of s, outstanding at c when its
// partition stopped: see the package comment above.
func (m *machine) keepFenced(now time.Time, c *consumer, s *sub, k refKey, o sent) {
	if m.cfg.Ledger == nil || o.id == "" {
		return // nothing to complete: without the ledger a late ack changes nothing
	}
	if !s.sharedGens {
		m.ledgerRelease(s, o, "", false)
		return
	}
	if m.fenced == nil {
		m.fenced = map[refKey]fencedDelivery{}
	}
	m.fenced[k] = fencedDelivery{c: c, s: s, o: o, until: now.Add(s.cfg.Tracker.VisibilityTimeout)}
}

// ackFenced applies an ack of a delivery kept by keepFenced: it completes
// the message in the ledger under its token (a no-op there if the new
// owner took it over since). It reports whether ref was one.
func (m *machine) ackFenced(now time.Time, c *consumer, k refKey, token uint64) bool {
	f, ok := m.fenced[k]
	if !ok || f.c != c || f.o.wire != token {
		return false
	}
	delete(m.fenced, k)
	if !now.Before(f.until) {
		return false
	}
	f.s.ledger.complete = append(f.s.ledger.complete, ledger.Finish{ID: f.o.id, Token: f.o.wire, Attempts: f.o.attempt})
	m.count(metricKey{id: metFencedAcks, l1: f.s.cfg.Topic}, 1)
	return true
}

// forgetFenced drops the kept deliveries whose leases have ended, or whose
// consumer has gone.
func (m *machine) forgetFenced(now time.Time) {
	for k, f := range m.fenced {
		if f.c.closed || !now.Before(f.until) {
			delete(m.fenced, k)
		}
	}
}
