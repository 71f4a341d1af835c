package breaker

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// model is a dumb reimplementation of a Set, with plain counters instead of
// gobreaker, that the property test checks the Set against.
type model struct {
	cfg      Config
	order    []string
	bs       map[string]*mBreaker
	named    int
	probeOut bool
}

type mBreaker struct {
	state     State
	until     time.Time
	reopens   int
	probing   bool
	winEnd    time.Time
	req, fail int
	run       int
}

func (m *model) wait(reopens int) time.Duration {
	w := m.cfg.OpenTimeout
	for range reopens {
		w *= 2
		if w >= m.cfg.MaxOpenTimeout {
			return m.cfg.MaxOpenTimeout
		}
	}
	return w
}

func (m *model) advance(now time.Time) []Transition {
	var tr []Transition
	for _, n := range m.order {
		if b := m.bs[n]; b.state == Open && !now.Before(b.until) {
			b.state, b.probing = HalfOpen, false
			tr = append(tr, Transition{n, Open, HalfOpen, 0})
		}
	}
	return tr
}

func (m *model) allow(now time.Time) (int, bool) {
	anyOpen, anyHalf := false, false
	for _, b := range m.bs {
		if b.state == Open && now.Before(b.until) {
			anyOpen = true
		} else if b.state != Closed {
			anyHalf = true
		}
	}
	switch {
	case anyOpen:
		return 0, false
	case !anyHalf:
		return -1, false
	case m.probeOut:
		return 0, false
	}
	return 1, true
}

func (m *model) settle() {
	m.probeOut = false
	for _, b := range m.bs {
		b.probing = false
	}
}

func (m *model) count(b *mBreaker, now time.Time, ok bool) (tripped bool) {
	if b.winEnd.IsZero() || !now.Before(b.winEnd) {
		b.req, b.fail, b.winEnd = 0, 0, now.Add(m.cfg.Window)
	}
	b.req++
	if ok {
		b.run = 0
		return false
	}
	b.fail++
	b.run++
	return b.run >= m.cfg.ConsecutiveFailures ||
		(b.req >= m.cfg.MinRequests && float64(b.fail) >= m.cfg.FailureRatio*float64(b.req))
}

func (m *model) open(n string, b *mBreaker, now time.Time) Transition {
	from := b.state
	w := m.wait(b.reopens)
	*b = mBreaker{state: Open, until: now.Add(w), reopens: b.reopens}
	return Transition{n, from, Open, w}
}

func (m *model) close(n string, b *mBreaker) Transition {
	*b = mBreaker{}
	return Transition{n, HalfOpen, Closed, 0}
}

func (m *model) success(now time.Time, probe bool) []Transition {
	tr := m.advance(now)
	closing := probe && m.probeOut
	for _, n := range m.order {
		b := m.bs[n]
		if b.state == Closed {
			m.count(b, now, true)
		} else if closing && b.probing {
			tr = append(tr, m.close(n, b))
		}
	}
	if closing {
		m.settle()
	}
	return tr
}

func (m *model) failure(now time.Time, ds string, probe bool) (bool, []Transition) {
	tr := m.advance(now)
	probe = probe && m.probeOut
	counted := true
	if ds != "" {
		if len(ds) > MaxDownstreamNameBytes {
			ds = OtherDownstream
		}
		if _, ok := m.bs[ds]; !ok && ds != OtherDownstream && m.named >= m.cfg.MaxDownstreams {
			ds = OtherDownstream
		}
		b, ok := m.bs[ds]
		if !ok {
			b = &mBreaker{}
			m.bs[ds] = b
			m.order = append(m.order, ds)
			if ds != OtherDownstream {
				m.named++
			}
		}
		switch b.state {
		case Closed:
			if m.count(b, now, false) {
				tr = append(tr, m.open(ds, b, now))
				counted = false
			}
		case Open:
			counted = false
		case HalfOpen:
			counted = false
			if probe && b.probing {
				b.reopens++
				tr = append(tr, m.open(ds, b, now))
			}
		}
	}
	if probe {
		m.settle()
	}
	return counted, tr
}

func (m *model) sent(now time.Time) []Transition {
	tr := m.advance(now)
	if !m.probeOut {
		for _, b := range m.bs {
			if b.state == HalfOpen {
				b.probing, m.probeOut = true, true
			}
		}
	}
	return tr
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
// that every answer agrees, plus the invariants the delivery loop relies on.
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
		m := &model{cfg: s.Config(), bs: map[string]*mBreaker{}}
		now := t0
		// The loop's own view: is a probe out, so outcomes carry probe=true?
		loopProbe := false
		names := []string{"", "a", "b", "c", "d", OtherDownstream}

		checkTr := func(what string, got, want []Transition) {
			if !slices.Equal(got, want) {
				rt.Fatalf("%s: transitions %v, model %v", what, got, want)
			}
			for _, x := range got {
				if x.To == Open && (x.Wait < cfg.OpenTimeout || x.Wait > cfg.MaxOpenTimeout) {
					rt.Fatalf("%s: %v: wait outside [%v, %v]", what, x, cfg.OpenTimeout, cfg.MaxOpenTimeout)
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
			},
			"lost": func(rt *rapid.T) {
				loopProbe = false
				checkTr("ProbeLost", s.ProbeLost(now), m.advance(now))
				m.settle()
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
				for _, name := range m.order {
					b := m.bs[name]
					if b.state == Open && now.Before(b.until) {
						anyOpen = true
					}
					if b.state == HalfOpen || (b.state == Open && !now.Before(b.until)) {
						anyHalf = true
					}
					if b.state == Open && (next.IsZero() || b.until.Before(next)) {
						next = b.until
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
