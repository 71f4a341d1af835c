package deliver

import (
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// Ownership of partitions in a cluster (GroupConfig.Coordinator set).
//
// The group's coordinator decides which member delivers which partition;
// the machine follows what it is told (assigned) and decides, purely, when
// a partition starts, when a revoked one is drained and may be handed
// over, and when it must stop at once:
//
//	none ──owned──► active ──revoking──► revoking ──drained or deadline──► (commit, RevokeDone) ──► none
//	  ▲               │                                                                              │
//	  └──not owned / fenced commit / member unknown (at once, nothing committed)─────────────────────┘
//
// Without a coordinator every partition is active from the start and
// never changes (a single node).
type ownState uint8

const (
	ownNone     ownState = iota // not this member's: neither fetched nor delivered
	ownActive                   // fetched and delivered
	ownRevoking                 // asked to give it up: nothing new is delivered, in-flight deliveries finish
)

// assignView is one subscription's assignment as the coordinator holds
// it, with what starting a partition needs. The membership driver builds
// it from one DescribeGroup.
type assignView struct {
	s *sub
	// member: false when the coordinator does not know the member (it was
	// expired or never joined): every partition stops at once.
	member     bool
	generation uint64
	// sharedGens: generation is the group's, comparable between members
	// (sub.sharedGens).
	sharedGens bool
	// heardAt: when the last heartbeat or join of the member that the
	// coordinator took was sent (zero: none yet).
	heardAt  time.Time
	owned    []int32 // Revoking ones included
	revoking []int32
	// committed is the group's committed position on every partition of
	// the topic it has one for; starts the log start of every partition.
	committed map[int32]engine.Position
	starts    map[int32]int64
	// members counts the group's members taking the topic (subscribing,
	// not yielding); consumers sums their counts of connected apps.
	members, consumers int
}

// delivering reports whether the partition's records are fetched and handed out.
func (m *machine) delivering(p *part) bool { return !m.cluster || p.own == ownActive }

// assigned applies the coordinator's view of one subscription.
func (m *machine) assigned(now time.Time, v *assignView) {
	s := v.s
	for num, pos := range v.committed {
		if num >= 0 && int(num) < len(s.parts) {
			s.parts[num].coordPos = pos
		}
	}
	s.groupConsumers = v.consumers // whether this sidecar is a member or not
	if !v.member {
		if s.joinedGen != 0 {
			m.note(slog.LevelWarn, "the group's coordinator does not know this member (expired?): stopping its partitions; joining again", "topic", s.cfg.Topic)
		}
		for _, p := range s.parts {
			if p.own != ownNone {
				m.stopPart(now, s, p, "member unknown to the coordinator")
			}
		}
		s.joinedGen = 0
		return
	}
	if v.generation < s.joinedGen {
		return // an older read than one already applied
	}
	if v.heardAt.After(s.heardAt) {
		s.heardAt = v.heardAt
	}
	if m.silent(now, s) {
		m.selfFence(now) // a read that works while heartbeats do not: start nothing
		return
	}
	s.joinedGen, s.sharedGens = v.generation, v.sharedGens
	m.gauge(metricKey{id: metGeneration}, float64(v.generation))
	m.gauge(metricKey{id: metMembers, l1: s.cfg.Topic}, float64(v.members))
	for _, p := range s.parts {
		owned, revoking := slices.Contains(v.owned, p.num), slices.Contains(v.revoking, p.num)
		switch {
		case !owned:
			if p.own != ownNone {
				m.stopPart(now, s, p, "no longer assigned")
			}
		case revoking:
			switch p.own {
			case ownActive:
				p.own, p.gen = ownRevoking, v.generation
				p.revokeBy = now.Add(m.cfg.Membership.RevokeDrain)
				p.dropAhead() // nothing new is delivered from it here
				m.note(slog.LevelInfo, "partition revoked: draining it", "topic", s.cfg.Topic, "partition", p.num, "in_flight", p.tr.InFlight(), "generation", v.generation)
			case ownNone:
				// Never started here (a new process): nothing to drain or commit.
				if !p.handing {
					p.handing = true
					m.emit(action{kind: actCommit, s: s, handovers: []*handover{{p: p, inc: p.inc, gen: v.generation}}})
				}
			}
		default:
			switch p.own {
			case ownNone:
				if !p.handing {
					m.startPart(s, p, v.committed[p.num], v.starts[p.num], v.generation)
				}
			case ownRevoking:
				if !p.handing { // the revocation was withdrawn
					p.own = ownActive
				}
				p.gen = v.generation
			case ownActive:
				p.gen = v.generation
			}
		}
	}
}

// claimGen is the generation p's ledger claims carry: the one this
// member holds it in when generations are the group's, 0 otherwise
// (docs/ledger.md, "Generations").
func (s *sub) claimGen(p *part) uint64 {
	if !s.sharedGens {
		return 0
	}
	return p.gen
}

// startPart starts delivering a partition from the group's committed position.
func (m *machine) startPart(s *sub, p *part, committed engine.Position, start int64, gen uint64) {
	next := max(committed.Next, start)
	tr, err := tracker.New[engine.Record](s.cfg.Tracker, next)
	if err != nil {
		m.note(slog.LevelError, "cannot start a partition", "topic", s.cfg.Topic, "partition", p.num, "err", err)
		return
	}
	p.resetTo(tr, next, committed)
	p.own, p.gen = ownActive, gen
	m.count(metricKey{id: metPartitionMoves, l1: s.cfg.Topic, l2: "in"}, 1)
	m.countOwned(s)
	m.note(slog.LevelInfo, "partition assigned: delivering it", "topic", s.cfg.Topic, "partition", p.num, "from", next, "generation", gen)
}

// resetTo gives the partition a new tracker starting at next.
func (p *part) resetTo(tr *tracker.Tracker[engine.Record], next int64, committed engine.Position) {
	p.inc++
	p.tr, p.fetchAt, p.skip, p.skipAt = tr, next, nil, 0
	p.dropAhead()
	p.wire, p.history = nil, nil
	p.committed = committed
	for _, o := range committed.Done {
		if o >= next {
			p.skip = append(p.skip, o)
		}
	}
	p.handing, p.dlPending = false, 0
}

// stopPart stops a partition at once (the member was fenced): its
// deliveries outstanding at the app are forgotten by the tracker (a nack
// or extend of one is refused as not in flight; an ack still completes it
// in the ledger: keepFenced), its dead letters waiting are dropped,
// nothing of it is committed.
func (m *machine) stopPart(now time.Time, s *sub, p *part, why string) {
	m.note(slog.LevelWarn, "partition stopped", "topic", s.cfg.Topic, "partition", p.num, "reason", why, "in_flight", p.tr.InFlight())
	if p.own != ownNone {
		m.count(metricKey{id: metPartitionMoves, l1: s.cfg.Topic, l2: "out"}, 1)
	}
	for _, c := range m.consumers {
		for k, o := range c.outstanding {
			if k.topic != s.cfg.Topic || k.part != p.num {
				continue
			}
			delete(c.outstanding, k)
			if m.cfg.Tracer != nil {
				m.span(now, s, p, k.offset, o, c, OutcomeHandedBack, "")
			}
			m.probeLost(now, s, o)
			m.keepFenced(now, c, s, k, o)
		}
	}
	kept := m.dlWait[:0]
	for _, w := range m.dlWait {
		if w.p != p {
			kept = append(kept, w)
		}
	}
	clear(m.dlWait[len(kept):])
	m.dlWait = kept
	for k := range m.expired {
		if k.topic == s.cfg.Topic && k.part == p.num {
			delete(m.expired, k)
		}
	}
	tr, _ := tracker.New[engine.Record](s.cfg.Tracker, 0)
	p.resetTo(tr, 0, engine.Position{})
	p.own, p.gen = ownNone, 0
	m.countOwned(s)
}

// countOwned sets spool_group_partitions_owned for s.
func (m *machine) countOwned(s *sub) {
	n := 0
	for _, p := range s.parts {
		if p.own != ownNone {
			n++
		}
	}
	m.gauge(metricKey{id: metPartitionsOwned, l1: s.cfg.Topic}, float64(n))
}

// handBack takes the partition's deliveries back from the consumers
// holding them, uncounted (the ledger forgets their leases, so the next
// owner need not wait for them). With release the tracker takes them back
// too (a revocation past its bound: the position stays below them).
func (m *machine) handBack(now time.Time, s *sub, p *part, release bool) int {
	n := 0
	for _, c := range m.consumers {
		for k, o := range c.outstanding {
			if k.topic != s.cfg.Topic || k.part != p.num {
				continue
			}
			delete(c.outstanding, k)
			n++
			if m.cfg.Tracer != nil {
				m.span(now, s, p, k.offset, o, c, OutcomeHandedBack, "")
			}
			if release {
				_ = p.tr.Release(now, k.offset, o.token, false)
			}
			m.probeLost(now, s, o)
			m.ledgerRelease(s, o, "", true)
		}
	}
	return n
}

// revocations hands over the revoked partitions that are drained (nothing
// in flight, no dead letter waiting) or whose drain bound has passed (what
// is in flight is handed back): their positions are committed, then
// RevokeDone is said for each (one actCommit with their handovers). All
// that are ready go in one job: a coordinator that waits for several
// partitions together (Kafka's revoke callback) waits for one round.
func (m *machine) revocations(now time.Time) {
	if !m.cluster {
		return
	}
	for _, s := range m.subs {
		if s.committing {
			continue
		}
		var a action
		for _, p := range s.parts {
			if p.own != ownRevoking || p.handing || now.Before(p.handoverAt) {
				continue
			}
			busy := p.tr.InFlight() > 0 || p.tr.DeadLetters() > 0 || p.dlPending > 0
			if busy && now.Before(p.revokeBy) {
				continue
			}
			if busy {
				n := m.handBack(now, s, p, true)
				m.note(slog.LevelWarn, "revoked partition not drained within its bound: handing its deliveries back", "topic", s.cfg.Topic, "partition", p.num, "handed_back", n)
			}
			p.handing = true
			if a.pos == nil {
				a = action{kind: actCommit, s: s, pos: map[int32]engine.Position{}, gens: map[int32]uint64{}}
			}
			a.pos[p.num], a.gens[p.num] = p.position(), p.gen
			a.handovers = append(a.handovers, &handover{p: p, inc: p.inc, gen: p.gen})
		}
		if len(a.handovers) > 0 {
			s.committing = true
			m.emit(a)
		}
	}
}

// handover is a revoked partition to commit and give up (RevokeDone).
type handover struct {
	p   *part
	inc uint64 // the partition's incarnation when it was decided
	gen uint64
	err error // of the RevokeDone
}

// committedCluster applies the answer to a commit through the coordinator.
func (m *machine) committedCluster(now time.Time, j *commitJob) {
	s := j.s
	if len(j.handovers) == 0 || len(j.pos) > 0 {
		s.committing = false
	}
	for num, pos := range j.pos {
		p := s.parts[num]
		if p.inc != j.inc[num] {
			continue // stopped since
		}
		err := j.errs[num]
		switch {
		case err == nil:
			p.committed = pos
		case errors.Is(err, engine.ErrGroupFenced):
			m.count(metricKey{id: metCommitErrors, l1: s.cfg.Topic}, 1)
			m.stopPart(now, s, p, "commit fenced: the partition moved to another member")
		default:
			m.count(metricKey{id: metCommitErrors, l1: s.cfg.Topic}, 1)
			m.note(slog.LevelError, "committing offsets through the group's coordinator failed; retrying at the next interval", "topic", s.cfg.Topic, "partition", num, "err", err)
		}
	}
	for _, h := range j.handovers {
		m.handedOver(now, s, h)
	}
}

// handoverRetry is how long a revoked partition waits before it is handed
// over again after an attempt that failed or was answered "not revoking"
// (the coordinator's next view is on its way): a membership poll's time.
const handoverRetry = 200 * time.Millisecond

// handedOver applies the answer to one handover (RevokeDone).
func (m *machine) handedOver(now time.Time, s *sub, h *handover) {
	if h.p.inc != h.inc {
		return // stopped since
	}
	p := h.p
	switch {
	case h.err == nil, errors.Is(h.err, engine.ErrGroupNotRevoking) && p.own == ownNone:
		m.note(slog.LevelInfo, "revoked partition handed over", "topic", s.cfg.Topic, "partition", p.num, "committed", p.committed.Next)
		if p.own != ownNone {
			m.count(metricKey{id: metPartitionMoves, l1: s.cfg.Topic, l2: "out"}, 1)
		}
		tr, _ := tracker.New[engine.Record](s.cfg.Tracker, 0)
		p.resetTo(tr, 0, engine.Position{})
		p.own, p.gen = ownNone, 0
		m.countOwned(s)
	case errors.Is(h.err, engine.ErrGroupNotRevoking):
		// The revocation was withdrawn (or already done): follow the next
		// view; until it comes, do not ask again at once.
		p.handing, p.handoverAt = false, now.Add(handoverRetry)
	default:
		// Not known to be done: try again (a retried RevokeDone that was
		// applied is refused as not revoking, handled above).
		p.handing, p.handoverAt = false, now.Add(handoverRetry)
		m.note(slog.LevelError, "handing a revoked partition over failed; retrying", "topic", s.cfg.Topic, "partition", p.num, "err", h.err)
	}
}

// consumersOf counts this sidecar's apps connected that take s.
func (m *machine) consumersOf(s *sub) int {
	n := 0
	for _, c := range m.consumers {
		if !c.closed && c.wants(s) {
			n++
		}
	}
	return n
}

// Degradation (docs/groups.md, "Degraded members"). A subscription whose
// breakers have held its deliveries (some breaker not closed) for
// Membership.DegradeAfter says its member is degraded; the coordinator then
// gives its partitions to members that are not, or, when every member is
// degraded (a downstream down for all), shares them as if none were. A
// degraded member that owns none of the topic's partitions has nothing to
// probe its downstream with, so after DegradeAfter more it forgets its
// breakers' state and says it is healthy again: it takes its share back
// and finds out (one rebalance per 2×DegradeAfter at most while a
// downstream is down for this sidecar alone).
func (m *machine) health(now time.Time) {
	if !m.cluster {
		return
	}
	after := m.cfg.Membership.DegradeAfter
	changed := false
	for _, s := range m.subs {
		if s.brk == nil {
			continue
		}
		n, _ := s.brk.Allow(now)
		held := n != -1
		switch {
		case !held:
			s.heldSince = time.Time{}
		case s.heldSince.IsZero():
			s.heldSince = now
		}
		deg := held && now.Sub(s.heldSince) >= after
		if deg && s.degraded && !m.owns(s) {
			if s.idleSince.IsZero() {
				s.idleSince = now
			}
			if now.Sub(s.idleSince) >= after {
				m.resetBreakers(s)
				s.heldSince, deg = time.Time{}, false
				m.note(slog.LevelInfo, "degraded member idle long enough: forgetting its breakers' state and taking its share again to probe the downstream", "topic", s.cfg.Topic)
			}
		}
		if !deg || m.owns(s) {
			s.idleSince = time.Time{}
		}
		if deg != s.degraded {
			s.degraded, changed = deg, true
			v := 0.0
			if deg {
				v = 1
				m.note(slog.LevelWarn, "breakers have held deliveries too long: telling the coordinator this member is degraded (its partitions go to healthy members)", "topic", s.cfg.Topic, "held_for", now.Sub(s.heldSince).Round(time.Second))
			} else {
				m.note(slog.LevelInfo, "member healthy again", "topic", s.cfg.Topic)
			}
			m.gauge(metricKey{id: metMemberDegraded, l1: s.cfg.Topic}, v)
		}
	}
	if changed {
		m.emit(action{kind: actConnected})
	}
}

// healthWake is when health must look at s again.
func (m *machine) healthWake(s *sub) (time.Time, bool) {
	after := m.cfg.Membership.DegradeAfter
	switch {
	case !m.cluster || s.brk == nil:
		return time.Time{}, false
	case !s.idleSince.IsZero():
		return s.idleSince.Add(after), true
	case !s.heldSince.IsZero() && !s.degraded:
		return s.heldSince.Add(after), true
	}
	return time.Time{}, false
}

// owns reports whether this member owns a partition of s.
func (m *machine) owns(s *sub) bool {
	for _, p := range s.parts {
		if p.own != ownNone {
			return true
		}
	}
	return false
}

// resetBreakers gives s a fresh breaker set (every downstream closed).
func (m *machine) resetBreakers(s *sub) {
	fresh, err := breaker.NewSet(s.brk.Config())
	if err != nil {
		return // the config was validated when the set was made
	}
	for name := range s.brk.States() {
		m.gauge(metricKey{id: metBreakerState, l1: s.cfg.Topic, l2: name}, stateValue(breaker.Closed))
	}
	s.brk, s.probePending = fresh, false
}
