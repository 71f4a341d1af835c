package breaker

import (
	"time"
	"unicode/utf8"
)

// Set holds the breakers of one subscription, one per downstream named in
// its retries (at most Config.MaxDownstreams of them, plus OtherDownstream).
// It is not safe for concurrent use: the subscription's delivery loop owns
// it.
type Set struct {
	cfg    Config
	list   []*breaker // in creation order, so transitions come out in a stable order
	byName map[string]*breaker
	named  int // breakers other than OtherDownstream

	probeOut    bool // the one probe is out (ProbeSent, not yet settled)
	probeSentAt time.Time
}

// NewSet validates cfg (filling defaults) and returns a Set with no breakers:
// a breaker is created, closed, by the first failure tagged with its
// downstream.
func NewSet(cfg Config) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Set{cfg: cfg, byName: make(map[string]*breaker)}, nil
}

// Config returns the validated configuration.
func (s *Set) Config() Config { return s.cfg }

// Allow says how many deliveries of the subscription may go out at now:
// -1 (no limit from the breakers) when every breaker is closed; 0 while any
// breaker is open, and while the probe is out; 1 with probe=true when no
// breaker is open, at least one is half-open (or open with its open time
// over at now) and the probe is not out. It changes nothing: a caller that
// sends the probe calls ProbeSent.
func (s *Set) Allow(now time.Time) (n int, probe bool) {
	half := false
	for _, b := range s.list {
		switch b.state {
		case Open:
			if now.Before(b.openUntil) {
				return 0, false
			}
			half = true
		case HalfOpen:
			half = true
		}
	}
	switch {
	case !half:
		return -1, false
	case s.probeOut:
		return 0, false
	}
	return 1, true
}

// ProbeSent records that the caller sent the probe Allow offered: it is the
// probe of every breaker half-open at now. Its outcome must come back as
// Success or Failure with probe=true, or as ProbeLost. Without a half-open
// breaker (Allow did not offer a probe) it changes nothing but the
// transitions of Advance(now), which it returns.
func (s *Set) ProbeSent(now time.Time) []Transition {
	tr := s.Advance(now)
	if s.probeOut {
		return tr
	}
	for _, b := range s.list {
		if b.state == HalfOpen {
			b.probing = true
			s.probeOut = true
		}
	}
	if s.probeOut {
		s.probeSentAt = now
	}
	return tr
}

// ProbeLost settles the probe without an outcome that says anything about
// the downstreams: its lease expired, the app released it or dead-lettered
// it, its consumer went away. The half-open breakers offer a new probe.
func (s *Set) ProbeLost(now time.Time) []Transition {
	tr := s.Advance(now)
	s.settleProbe()
	return tr
}

// Success records that a delivery of the subscription was acked: a success
// for every closed breaker. probe says that this delivery was the probe
// (the one sent after ProbeSent): then every breaker it probed closes. An
// ack of any other delivery (one sent before a breaker opened) closes
// nothing: only the probe tests a half-open breaker.
func (s *Set) Success(now time.Time, probe bool) []Transition {
	tr := s.Advance(now)
	closing := probe && s.probeOut
	for _, b := range s.list {
		switch {
		case b.state == Closed:
			b.record(&s.cfg, now, true)
		case closing && b.probing:
			tr = append(tr, b.close())
		}
	}
	if closing {
		s.settleProbe()
	}
	return tr
}

// Failure records a RETRY of a delivery of the subscription, tagged with the
// downstream that failed ("" for an untagged retry), and says whether the
// attempt counts toward max_attempts. When counted is false the caller gives
// the message back with its attempt number unchanged (no backoff, no
// dead-letter).
//
//   - Untagged: feeds no breaker; counted. As the probe it is inconclusive:
//     the half-open breakers offer a new probe.
//   - Toward a closed breaker: a failure in its counts; counted, unless this
//     failure trips it (the outage is recognised from here on).
//   - Toward an open breaker: not counted, changes nothing.
//   - Toward a half-open breaker: not counted. When this delivery is the
//     probe of that breaker, it reopens for twice its previous open time
//     (capped at MaxOpenTimeout); another delivery (sent before the breaker
//     opened) changes nothing.
//
// A probe that fails toward a breaker it did not probe is inconclusive for
// the breakers it did probe: they offer a new probe (delivery stays paused
// anyway if that failure opened a breaker).
func (s *Set) Failure(now time.Time, downstream string, probe bool) (counted bool, tr []Transition) {
	tr = s.Advance(now)
	probe = probe && s.probeOut
	counted = true
	if b := s.lookup(downstream); b != nil {
		switch b.state {
		case Closed:
			if b.record(&s.cfg, now, false) {
				tr = append(tr, b.open(&s.cfg, now))
				counted = false
			}
		case Open:
			counted = false
		case HalfOpen:
			counted = false
			if probe && b.probing {
				b.reopens++
				tr = append(tr, b.open(&s.cfg, now))
			}
		}
	}
	if probe {
		s.settleProbe()
	}
	return counted, tr
}

// Advance moves every open breaker whose open time is over at now to
// half-open and returns the transitions. Every other method that takes now
// calls it first; the delivery loop calls it (or Allow and then ProbeSent)
// when the time of NextChange has come.
func (s *Set) Advance(now time.Time) []Transition {
	var tr []Transition
	for _, b := range s.list {
		if b.state == Open && !now.Before(b.openUntil) {
			b.state = HalfOpen
			b.probing = false
			tr = append(tr, Transition{Downstream: b.name, From: Open, To: HalfOpen})
		}
	}
	return tr
}

// NextChange returns the earliest time at which an open breaker half-opens,
// and false when none is open. The loop sets its timer to it and then calls
// Allow (and Advance) again.
func (s *Set) NextChange() (time.Time, bool) {
	var t time.Time
	ok := false
	for _, b := range s.list {
		if b.state == Open && (!ok || b.openUntil.Before(t)) {
			t, ok = b.openUntil, true
		}
	}
	return t, ok
}

// States returns the state of every breaker, by downstream, as of the last
// call that took a time (an open breaker whose time is over shows as open
// until then). The map is the caller's.
func (s *Set) States() map[string]State {
	m := make(map[string]State, len(s.list))
	for _, b := range s.list {
		m[b.name] = b.state
	}
	return m
}

// Probe reports whether the probe is out and since when.
func (s *Set) Probe() (sentAt time.Time, out bool) {
	return s.probeSentAt, s.probeOut
}

// settleProbe ends the probe: breakers it probed and that are still
// half-open offer a new one.
func (s *Set) settleProbe() {
	for _, b := range s.list {
		b.probing = false
	}
	s.probeOut = false
	s.probeSentAt = time.Time{}
}

// lookup returns the breaker of a downstream, creating it when there is
// room; nil for "" (untagged). Names beyond MaxDownstreams, longer than
// MaxDownstreamNameBytes or not valid UTF-8 share the OtherDownstream
// breaker.
func (s *Set) lookup(name string) *breaker {
	if name == "" {
		return nil
	}
	if len(name) > MaxDownstreamNameBytes || !utf8.ValidString(name) {
		name = OtherDownstream
	}
	if b, ok := s.byName[name]; ok {
		return b
	}
	if name != OtherDownstream && s.named >= s.cfg.MaxDownstreams {
		name = OtherDownstream
		if b, ok := s.byName[name]; ok {
			return b
		}
	}
	b := newBreaker(name)
	if name != OtherDownstream {
		s.named++
	}
	s.list = append(s.list, b)
	s.byName[name] = b
	return b
}
