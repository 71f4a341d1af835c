package breaker

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// model is the behaviour docs/breaker.md describes, written down as plainly
// as possible and on purpose not the way Set does it: it keeps every
// outcome it was told in one history and decides a trip by reading that
// history back (the run of failures since the last ack, the outcomes of
// the current fixed window); open times double from the previous one
// instead of being computed from a count of reopens. Nothing of Set or of
// gobreaker is used, so a mistake in Set's state switch shows up as a
// disagreement instead of being copied.
type model struct {
	cfg Config
	// history of the outcomes that feed breakers: acks (for every closed
	// breaker) and failures tagged with a downstream.
	history []outcome
	names   []string // breakers in creation order (transitions come in this order)
	bs      map[string]*mb
	// The subscription's one probe.
	probeOut bool
	probed   map[string]bool // the breakers half-open when the probe was sent
}

type outcome struct {
	at time.Time
	ok bool   // an ack of the subscription
	ds string // for a failure: the breaker it was tagged toward
}

type mb struct {
	state     State
	openUntil time.Time     // Open: when the open time is over
	openFor   time.Duration // the length of the last open time
	// since: the breaker counts the outcomes from history[since:] (it was
	// created or closed then).
	since int
}

func newModel(cfg Config) *model {
	return &model{cfg: cfg, bs: map[string]*mb{}, probed: map[string]bool{}}
}

// breakerFor is the breaker a tagged failure feeds (docs/breaker.md,
// "Telling Spool which downstream failed"), made closed on first use.
func (m *model) breakerFor(ds string) string {
	name := ds
	if len(ds) > MaxDownstreamNameBytes || !utf8.ValidString(ds) {
		name = OtherDownstream
	}
	if _, known := m.bs[name]; !known && name != OtherDownstream {
		named := 0
		for _, n := range m.names {
			if n != OtherDownstream {
				named++
			}
		}
		if named >= m.cfg.MaxDownstreams {
			name = OtherDownstream
		}
	}
	if _, known := m.bs[name]; !known {
		m.bs[name] = &mb{state: Closed, since: len(m.history)}
		m.names = append(m.names, name)
	}
	return name
}

// trips reads the history back to decide whether a closed breaker opens
// now: a run of consecutive_failures failures toward it with no ack in
// between, or in the current window at least min_requests outcomes of
// which at least failure_ratio failed. Windows are fixed: one starts with
// the first outcome after the previous one ended.
func (m *model) trips(name string) bool {
	var mine []outcome
	for _, o := range m.history[m.bs[name].since:] {
		if o.ok || o.ds == name {
			mine = append(mine, o)
		}
	}
	run := 0
	for i := len(mine) - 1; i >= 0 && !mine[i].ok; i-- {
		run++
	}
	if run >= m.cfg.ConsecutiveFailures {
		return true
	}
	var windowStart time.Time
	requests, failures := 0, 0
	for i, o := range mine {
		if i == 0 || !o.at.Before(windowStart.Add(m.cfg.Window)) {
			windowStart, requests, failures = o.at, 0, 0
		}
		requests++
		if !o.ok {
			failures++
		}
	}
	return requests >= m.cfg.MinRequests && float64(failures) >= m.cfg.FailureRatio*float64(requests)
}

// halfOpenAt: open, and its open time is over at now (Allow already treats
// such a breaker as half-open).
func (b *mb) halfOpenAt(now time.Time) bool {
	return b.state == HalfOpen || (b.state == Open && !now.Before(b.openUntil))
}

// advance reports open → half-open for each breaker whose open time is over.
func (m *model) advance(now time.Time) []Transition {
	var tr []Transition
	for _, n := range m.names {
		if b := m.bs[n]; b.state == Open && !now.Before(b.openUntil) {
			b.state = HalfOpen
			tr = append(tr, Transition{Downstream: n, From: Open, To: HalfOpen})
		}
	}
	return tr
}

func (m *model) open(n string, wait time.Duration, now time.Time) Transition {
	b := m.bs[n]
	from := b.state
	b.state, b.openFor, b.openUntil = Open, wait, now.Add(wait)
	return Transition{Downstream: n, From: from, To: Open, Wait: wait}
}

func (m *model) settleProbe() {
	m.probeOut = false
	m.probed = map[string]bool{}
}

// allow: nothing while any breaker is open (its time not over); one probe
// while some breaker is half-open and no probe is out; no limit otherwise.
func (m *model) allow(now time.Time) (int, bool) {
	half := false
	for _, b := range m.bs {
		if b.state == Open && now.Before(b.openUntil) {
			return 0, false
		}
		half = half || b.halfOpenAt(now)
	}
	switch {
	case !half:
		return -1, false
	case m.probeOut:
		return 0, false
	}
	return 1, true
}

// sent: the probe goes out and probes every breaker half-open now.
func (m *model) sent(now time.Time) []Transition {
	tr := m.advance(now)
	if m.probeOut {
		return tr
	}
	for n, b := range m.bs {
		if b.state == HalfOpen {
			m.probed[n] = true
			m.probeOut = true
		}
	}
	return tr
}

func (m *model) lost(now time.Time) []Transition {
	tr := m.advance(now)
	m.settleProbe()
	return tr
}

// success: an ack counts for every closed breaker; the probe's ack closes
// the breakers it probed, with fresh counts and the first open time again.
func (m *model) success(now time.Time, probe bool) []Transition {
	tr := m.advance(now)
	m.history = append(m.history, outcome{at: now, ok: true})
	if !probe || !m.probeOut {
		return tr
	}
	for _, n := range m.names {
		if m.probed[n] {
			b := m.bs[n]
			*b = mb{state: Closed, since: len(m.history)}
			tr = append(tr, Transition{Downstream: n, From: HalfOpen, To: Closed})
		}
	}
	m.settleProbe()
	return tr
}

// failure: docs/breaker.md, the States table and "The guarantee".
func (m *model) failure(now time.Time, ds string, probe bool) (counted bool, tr []Transition) {
	tr = m.advance(now)
	probe = probe && m.probeOut
	defer func() {
		if probe {
			m.settleProbe() // whatever the failure said, this probe is over
		}
	}()
	if ds == "" {
		return true, tr // untagged: the message's own failure, no breaker
	}
	n := m.breakerFor(ds)
	b := m.bs[n]
	switch {
	case b.state == Closed:
		m.history = append(m.history, outcome{at: now, ds: n})
		if m.trips(n) {
			return false, append(tr, m.open(n, m.cfg.OpenTimeout, now)) // the outage is known from here on
		}
		return true, tr
	case b.state == HalfOpen && probe && m.probed[n]:
		return false, append(tr, m.open(n, min(2*b.openFor, m.cfg.MaxOpenTimeout), now))
	}
	return false, tr // open, or half-open and not its probe: changes nothing
}

func (m *model) states() map[string]State {
	out := map[string]State{}
	for n, b := range m.bs {
		out[n] = b.state
	}
	return out
}

// TestSetAgainstModel drives a Set and the model with the same random calls
// (a well-behaved delivery loop mostly, sometimes a confused one) and checks
// that every answer agrees, plus the invariants the delivery loop and
// docs/breaker.md rely on.
func TestSetAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		open := time.Duration(rapid.IntRange(1, 5).Draw(rt, "open_s")) * time.Second
		cfg := Config{
			ConsecutiveFailures: rapid.IntRange(1, 6).Draw(rt, "consecutive"),
			FailureRatio:        rapid.SampledFrom([]float64{0.25, 0.5, 0.75, 1}).Draw(rt, "ratio"),
			MinRequests:         rapid.IntRange(1, 8).Draw(rt, "min_requests"),
			Window:              time.Duration(rapid.IntRange(1, 20).Draw(rt, "window_s")) * time.Second,
			OpenTimeout:         open,
			MaxOpenTimeout:      open + time.Duration(rapid.IntRange(0, 30).Draw(rt, "extra_max_s"))*time.Second,
			MaxDownstreams:      rapid.IntRange(1, 3).Draw(rt, "max_downstreams"),
		}
		s, err := NewSet(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		m := newModel(s.Config())
		now := t0
		// The loop's own view: is a probe out, so outcomes carry probe=true?
		loopProbe := false
		long := string(make([]byte, MaxDownstreamNameBytes+1))
		names := []string{"", "a", "b", "c", "d", OtherDownstream, long, "bad\xffname"}
		// countedRun: per breaker, the counted failures toward it since the
		// subscription's last ack or since it last closed (guarantee 4 of
		// docs/breaker.md: it stays below consecutive_failures).
		countedRun := map[string]int{}

		checkTr := func(what string, got, want []Transition) {
			if !slices.Equal(got, want) {
				rt.Fatalf("%s: transitions %v, model %v", what, got, want)
			}
			for _, x := range got {
				if x.To == Open && (x.Wait < cfg.OpenTimeout || x.Wait > cfg.MaxOpenTimeout) {
					rt.Fatalf("%s: %v: wait outside [%v, %v]", what, x, cfg.OpenTimeout, cfg.MaxOpenTimeout)
				}
				if x.To == Closed {
					countedRun[x.Downstream] = 0
				}
			}
		}
		// outcome picks the probe flag of an outcome: the loop's truth most
		// of the time, sometimes wrong.
		outcome := func(rt *rapid.T) bool {
			p := loopProbe && rapid.IntRange(0, 3).Draw(rt, "is_probe_outcome") > 0
			if rapid.IntRange(0, 9).Draw(rt, "confused") == 0 {
				p = !p
			}
			if p {
				loopProbe = false
			}
			return p
		}

		rt.Repeat(map[string]func(*rapid.T){
			"tick": func(rt *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(0, 4000).Draw(rt, "ms")) * time.Millisecond)
			},
			"jump": func(rt *rapid.T) {
				if at, ok := s.NextChange(); ok && rapid.Bool().Draw(rt, "to_next_change") {
					now = at
				} else {
					now = now.Add(time.Duration(rapid.IntRange(0, 60).Draw(rt, "s")) * time.Second)
				}
			},
			"advance": func(rt *rapid.T) {
				checkTr("Advance", s.Advance(now), m.advance(now))
			},
			"allow_and_send": func(rt *rapid.T) {
				n, p := s.Allow(now)
				mn, mp := m.allow(now)
				if n != mn || p != mp {
					rt.Fatalf("Allow = %d, %v; model %d, %v", n, p, mn, mp)
				}
				if p && rapid.Bool().Draw(rt, "send_probe") {
					checkTr("ProbeSent", s.ProbeSent(now), m.sent(now))
					loopProbe = true
				}
			},
			"stray_probe_sent": func(rt *rapid.T) {
				checkTr("ProbeSent", s.ProbeSent(now), m.sent(now))
			},
			"ack": func(rt *rapid.T) {
				p := outcome(rt)
				checkTr("Success", s.Success(now, p), m.success(now, p))
				clear(countedRun)
			},
			"retry": func(rt *rapid.T) {
				ds := rapid.SampledFrom(names).Draw(rt, "downstream")
				p := outcome(rt)
				c, tr := s.Failure(now, ds, p)
				mc, mtr := m.failure(now, ds, p)
				if c != mc {
					rt.Fatalf("Failure(%q, %v) counted %v, model %v", ds, p, c, mc)
				}
				checkTr("Failure", tr, mtr)
				if c && ds != "" {
					b := m.breakerFor(ds)
					countedRun[b]++
					if countedRun[b] >= cfg.ConsecutiveFailures {
						rt.Fatalf("%d counted failures toward %s since the last ack: detection must cost at most consecutive_failures-1 = %d", countedRun[b], b, cfg.ConsecutiveFailures-1)
					}
				}
			},
			"lost": func(rt *rapid.T) {
				loopProbe = false
				checkTr("ProbeLost", s.ProbeLost(now), m.lost(now))
			},
			"": func(rt *rapid.T) {
				got, want := s.States(), m.states()
				if !maps.Equal(got, want) {
					rt.Fatalf("States = %v, model %v", got, want)
				}
				if len(got) > cfg.MaxDownstreams+1 {
					rt.Fatalf("%d breakers, limit %d+1", len(got), cfg.MaxDownstreams)
				}
				// The invariants the delivery loop relies on.
				n, probe := s.Allow(now)
				anyOpen, anyHalf := false, false
				var next time.Time
				for _, b := range m.bs {
					if b.state == Open && now.Before(b.openUntil) {
						anyOpen = true
					}
					anyHalf = anyHalf || b.halfOpenAt(now)
					if b.state == Open && (next.IsZero() || b.openUntil.Before(next)) {
						next = b.openUntil
					}
				}
				if anyOpen && n != 0 {
					rt.Fatalf("Allow = %d while a breaker is open", n)
				}
				if anyHalf && n > 1 {
					rt.Fatalf("Allow = %d while a breaker is half-open", n)
				}
				if probe != (n == 1) || n < -1 || (n == -1) != (!anyOpen && !anyHalf) {
					rt.Fatalf("Allow = %d, %v with open=%v half-open=%v", n, probe, anyOpen, anyHalf)
				}
				at, ok := s.NextChange()
				if ok != !next.IsZero() || !at.Equal(next) {
					rt.Fatalf("NextChange = %v, %v; want %v", at, ok, next)
				}
				if _, out := s.Probe(); out != m.probeOut {
					rt.Fatalf("probe out %v, model %v", out, m.probeOut)
				}
			},
		})
	})
}

// ExampleSet shows the delivery loop's side of a downstream outage.
func ExampleSet() {
	s, _ := NewSet(Config{ConsecutiveFailures: 2, OpenTimeout: 5 * time.Second})
	now := t0
	for range 2 {
		counted, tr := s.Failure(now, "email-provider", false)
		fmt.Println("retry counted:", counted, tr)
	}
	n, _ := s.Allow(now)
	at, _ := s.NextChange()
	fmt.Println("allow:", n, "until", at.Sub(now))

	now = at
	n, probe := s.Allow(now)
	fmt.Println("allow:", n, "probe:", probe)
	fmt.Println(s.ProbeSent(now))
	fmt.Println(s.Success(now.Add(time.Second), true))
	n, _ = s.Allow(now)
	fmt.Println("allow:", n)
	// Output:
	// retry counted: true []
	// retry counted: false [email-provider: closed → open for 5s]
	// allow: 0 until 5s
	// allow: 1 probe: true
	// [email-provider: open → half-open]
	// [email-provider: half-open → closed]
	// allow: -1
}
