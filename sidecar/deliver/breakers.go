package deliver

import (
	"log/slog"
	"time"

	"github.com/spoolmq/spool/sidecar/breaker"
)

// allowance is how many deliveries the subscription may hand out now, out
// of free: all of them while its breakers are closed, none while one is
// open, one probe while one is half-open.
func (s *sub) allowance(now time.Time, free int) (int, bool) {
	if s.brk == nil {
		return free, false
	}
	if s.probePending {
		return 0, false // the probe waits for the ledger
	}
	n, probe := s.brk.Allow(now)
	switch {
	case n < 0:
		return free, false
	case n == 0:
		return 0, false
	}
	return min(n, free), probe
}

func (m *machine) probeSent(now time.Time, s *sub) {
	if s.brk != nil {
		m.report(s, s.brk.ProbeSent(now))
	}
}

// probeLost settles a probe whose outcome says nothing about the
// downstreams (lease expired, released, dead-lettered, stream gone).
func (m *machine) probeLost(now time.Time, s *sub, o sent) {
	if s.brk != nil && o.probe {
		m.report(s, s.brk.ProbeLost(now))
	}
}

// advanceBreakers half-opens the breakers whose open time is over. Sending
// a probe does it too, but a subscription may have nothing to probe with (a
// member that owns none of its partitions, every message waiting for its
// retry): without this, the breaker's past half-open time stays the loop's
// next wake-up and the loop spins.
func (m *machine) advanceBreakers(now time.Time) {
	for _, s := range m.subs {
		if s.brk != nil {
			m.report(s, s.brk.Advance(now))
		}
	}
}

// stateValue is the breaker state as exported in spool_breaker_state.
func stateValue(st breaker.State) float64 {
	switch st {
	case breaker.HalfOpen:
		return 1
	case breaker.Open:
		return 2
	}
	return 0
}

// paused reports whether a breaker holds the subscription: it then fetches
// nothing either, so lag grows in the log, not in memory.
func (s *sub) paused(now time.Time) bool {
	if s.brk == nil {
		return false
	}
	n, _ := s.brk.Allow(now)
	return n == 0
}

// report turns breaker transitions into metrics and log lines.
func (m *machine) report(s *sub, trs []breaker.Transition) {
	for _, tr := range trs {
		m.count(metricKey{id: metBreakerTransitions, l1: s.cfg.Topic, l2: tr.Downstream, l3: tr.To.String()}, 1)
		m.gauge(metricKey{id: metBreakerState, l1: s.cfg.Topic, l2: tr.Downstream}, stateValue(tr.To))
		switch tr.To {
		case breaker.Open:
			m.note(slog.LevelWarn, "circuit breaker open: delivery paused, attempts not counted", "topic", s.cfg.Topic, "downstream", tr.Downstream, "wait", tr.Wait)
		case breaker.HalfOpen:
			m.note(slog.LevelInfo, "circuit breaker half-open: sending one probe", "topic", s.cfg.Topic, "downstream", tr.Downstream)
		case breaker.Closed:
			m.note(slog.LevelInfo, "circuit breaker closed: delivery resumes", "topic", s.cfg.Topic, "downstream", tr.Downstream)
		}
	}
}
