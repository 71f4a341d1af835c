package breaker

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// t0 is the start of every script's clock.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// runScript runs a scenario against a new Set. Each line is
//
//	<time since t0> <op> [args] => <expected>
//
// with ops:
//
//	allow                  => -1 | 0 | 1 probe
//	sent | lost | advance  => transitions
//	ack [probe]            => transitions
//	fail <ds|-> [probe]    => counted|uncounted[; transitions]
//	next                   => <time since t0> | none
//	states                 => name=state … (sorted) | none
//
// Transitions print as "ds: from → to [for wait]" joined by "; ", or "-".
func runScript(t *testing.T, cfg Config, script string) {
	t.Helper()
	s, err := NewSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(script), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, want, ok := strings.Cut(line, "=>")
		if !ok {
			t.Fatalf("line %d %q: no =>", i+1, line)
		}
		f := strings.Fields(cmd)
		at, err := time.ParseDuration(f[0])
		if err != nil {
			t.Fatalf("line %d %q: %v", i+1, line, err)
		}
		now := t0.Add(at)
		probe := slices.Contains(f[2:], "probe")
		var got string
		switch f[1] {
		case "allow":
			n, p := s.Allow(now)
			got = fmt.Sprint(n)
			if p {
				got += " probe"
			}
		case "sent":
			got = trString(s.ProbeSent(now))
		case "lost":
			got = trString(s.ProbeLost(now))
		case "advance":
			got = trString(s.Advance(now))
		case "ack":
			got = trString(s.Success(now, probe))
		case "fail":
			ds := f[2]
			if ds == "-" {
				ds = ""
			}
			ds = strings.ReplaceAll(ds, `\xff`, "\xff")
			counted, tr := s.Failure(now, ds, probe)
			got = "uncounted"
			if counted {
				got = "counted"
			}
			if len(tr) > 0 {
				got += "; " + trString(tr)
			}
		case "next":
			got = "none"
			if at, ok := s.NextChange(); ok {
				got = at.Sub(t0).String()
			}
		case "states":
			var parts []string
			for ds, st := range s.States() {
				parts = append(parts, ds+"="+st.String())
			}
			slices.Sort(parts)
			got = strings.Join(parts, " ")
			if got == "" {
				got = "none"
			}
		default:
			t.Fatalf("line %d %q: unknown op %q", i+1, line, f[1])
		}
		if want = strings.TrimSpace(want); got != want {
			t.Errorf("line %d: %s\n got: %s\nwant: %s", i+1, strings.TrimSpace(cmd), got, want)
		}
	}
}

func trString(tr []Transition) string {
	if len(tr) == 0 {
		return "-"
	}
	parts := make([]string, len(tr))
	for i, x := range tr {
		parts[i] = x.String()
	}
	return strings.Join(parts, "; ")
}

// consecutiveOnly: the ratio rule is out of reach.
var consecutiveOnly = Config{ConsecutiveFailures: 3, MinRequests: 1_000_000, Window: 10 * time.Second,
	OpenTimeout: 5 * time.Second, MaxOpenTimeout: 12 * time.Second}

// ratioOnly: the consecutive rule is out of reach.
var ratioOnly = Config{ConsecutiveFailures: 1_000_000, FailureRatio: 0.5, MinRequests: 4,
	Window: 10 * time.Second, OpenTimeout: 5 * time.Second, MaxOpenTimeout: 12 * time.Second}

func TestTransitions(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		script string
	}{
		{"consecutive trip", consecutiveOnly, `
			0s states => none
			0s allow => -1
			0s fail email => counted
			1s fail email => counted
			# the failure that trips is not counted: the outage is known from here on
			2s fail email => uncounted; email: closed → open for 5s
			2s allow => 0
			2s states => email=open
			2s next => 7s
		`},
		{"a success breaks the run", consecutiveOnly, `
			0s fail email => counted
			0s fail email => counted
			0s ack => -
			0s fail email => counted
			0s fail email => counted
			0s fail email => uncounted; email: closed → open for 5s
		`},
		{"the run of failures is not windowed", consecutiveOnly, `
			0s fail email => counted
			25s fail email => counted
			70s fail email => uncounted; email: closed → open for 5s
		`},
		{"ratio trip waits for min requests", ratioOnly, `
			0s fail email => counted
			0s ack => -
			# 2 of 3 failed, but fewer than 4 requests
			0s fail email => counted
			0s ack => -
			# 3 of 5 failed
			0s fail email => uncounted; email: closed → open for 5s
		`},
		{"ratio below the threshold does not trip", ratioOnly, `
			0s fail email => counted
			0s ack => -
			0s ack => -
			0s ack => -
			# 2 of 5
			0s fail email => counted
			0s ack => -
			# 3 of 7
			0s fail email => counted
			# 4 of 8
			1s fail email => uncounted; email: closed → open for 5s
		`},
		{"window end resets the ratio counts", ratioOnly, `
			0s fail email => counted
			0s ack => -
			0s fail email => counted
			# the window [0s, 10s) is over: 1 request in the new one, not 4 with 3 failed
			10s fail email => counted
			10s ack => -
			10s ack => -
			# 2 of 4 in the window that started at 10s
			19.9s fail email => uncounted; email: closed → open for 5s
		`},
		{"half-open lets exactly one probe through", consecutiveOnly, `
			0s fail email => counted
			0s fail email => counted
			0s fail email => uncounted; email: closed → open for 5s
			4.999s allow => 0
			4.999s next => 5s
			# Allow sees the open time over before anything advanced it
			5s allow => 1 probe
			5s states => email=open
			5s sent => email: open → half-open
			5s states => email=half-open
			5s allow => 0
			5s next => none
			6s allow => 0
			6s sent => -
			6s allow => 0
		`},
		{"probe success closes and resumes delivery", consecutiveOnly, `
			0s fail email => counted
			0s fail email => counted
			0s fail email => uncounted; email: closed → open for 5s
			5s advance => email: open → half-open
			5s advance => -
			5s allow => 1 probe
			5s sent => -
			6s ack probe => email: half-open → closed
			6s allow => -1
			6s states => email=closed
			# fresh counts after closing
			6s fail email => counted
			6s fail email => counted
		`},
		{"acks of other deliveries do not close a half-open breaker", consecutiveOnly, `
			0s fail email => counted
			0s fail email => counted
			0s fail email => uncounted; email: closed → open for 5s
			1s ack => -
			5s ack => email: open → half-open
			5s allow => 1 probe
			5s sent => -
			5s ack => -
			5s allow => 0
			5s states => email=half-open
			# a probe flag with no probe out is an ordinary ack
			5s lost => -
			5s ack probe => -
			5s states => email=half-open
		`},
		{"probe failure reopens with a doubled wait, capped; closing resets the growth", consecutiveOnly, `
			0s fail email => counted
			0s fail email => counted
			0s fail email => uncounted; email: closed → open for 5s
			5s sent => email: open → half-open
			5s fail email probe => uncounted; email: half-open → open for 10s
			5s next => 15s
			14s allow => 0
			15s allow => 1 probe
			15s sent => email: open → half-open
			16s fail email probe => uncounted; email: half-open → open for 12s
			28s sent => email: open → half-open
			28s fail email probe => uncounted; email: half-open → open for 12s
			40s sent => email: open → half-open
			40s ack probe => email: half-open → closed
			41s fail email => counted
			41s fail email => counted
			41s fail email => uncounted; email: closed → open for 5s
		`},
		{"failures toward an open or half-open breaker are not counted", consecutiveOnly, `
			0s fail email => counted
			0s fail email => counted
			0s fail email => uncounted; email: closed → open for 5s
			1s fail email => uncounted
			2s fail email => uncounted
			# another downstream, closed: counted as usual
			2s fail sms => counted
			# untagged: counted
			2s fail - => counted
			5s advance => email: open → half-open
			# a delivery sent before the open, not the probe: uncounted, changes nothing
			5s fail email => uncounted
			5s states => email=half-open sms=closed
			5s allow => 1 probe
		`},
		{"untagged retries feed no breaker", consecutiveOnly, `
			0s fail - => counted
			0s fail - => counted
			0s fail - => counted
			0s fail - => counted
			0s states => none
			0s fail email => counted
			0s fail - => counted
			0s fail email => counted
			# untagged failures do not break email's run either
			0s fail - => counted
			0s fail email => uncounted; email: closed → open for 5s
		`},
		{"probe outcomes that say nothing about the downstream offer a new probe", consecutiveOnly, `
			0s fail email => counted
			0s fail email => counted
			0s fail email => uncounted; email: closed → open for 5s
			5s sent => email: open → half-open
			# untagged failure of the probe: the message's own problem, counted
			6s fail - probe => counted
			6s allow => 1 probe
			6s sent => -
			# failure toward another, closed downstream: counted there
			7s fail sms probe => counted
			7s allow => 1 probe
			7s sent => -
			# lease expiry, release, dead-letter by the app
			8s lost => -
			8s allow => 1 probe
			8s states => email=half-open sms=closed
		`},
		{"one probe for all half-open breakers; any open breaker pauses", consecutiveOnly, `
			0s fail a => counted
			0s fail a => counted
			0s fail a => uncounted; a: closed → open for 5s
			2s fail b => counted
			2s fail b => counted
			2s fail b => uncounted; b: closed → open for 5s
			5s next => 5s
			5s advance => a: open → half-open
			5s next => 7s
			5s allow => 0
			7s allow => 1 probe
			7s sent => b: open → half-open
			7s allow => 0
			8s ack probe => a: half-open → closed; b: half-open → closed
			8s allow => -1
		`},
		{"a probe failing toward one breaker reopens only that one", consecutiveOnly, `
			0s fail a => counted
			0s fail a => counted
			0s fail a => uncounted; a: closed → open for 5s
			0s fail b => counted
			0s fail b => counted
			0s fail b => uncounted; b: closed → open for 5s
			5s sent => a: open → half-open; b: open → half-open
			6s fail b probe => uncounted; b: half-open → open for 10s
			6s states => a=half-open b=open
			6s allow => 0
			16s allow => 1 probe
			16s sent => b: open → half-open
			16s ack probe => a: half-open → closed; b: half-open → closed
		`},
		{"a breaker that opens while the probe is out waits for its own probe", consecutiveOnly, `
			0s fail a => counted
			0s fail a => counted
			0s fail a => uncounted; a: closed → open for 5s
			5s sent => a: open → half-open
			5s fail b => counted
			5s fail b => counted
			5s fail b => uncounted; b: closed → open for 5s
			6s ack probe => a: half-open → closed
			6s allow => 0
			10s allow => 1 probe
			10s sent => b: open → half-open
			11s ack probe => b: half-open → closed
		`},
		{"downstream limit: further names share the other breaker", Config{ConsecutiveFailures: 2, MinRequests: 1000, MaxDownstreams: 2}, `
			0s fail a => counted
			0s fail b => counted
			0s fail c => counted
			0s states => a=closed b=closed other=closed
			0s fail d => uncounted; other: closed → open for 5s
			0s fail e => uncounted
			0s states => a=closed b=closed other=open
			# the tracked names keep their own breakers
			0s fail a => uncounted; a: closed → open for 5s
		`},
		{"unusable names share the other breaker", Config{ConsecutiveFailures: 2, MinRequests: 1000}, `
			0s fail 12345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890 => counted
			0s fail bad\xffname => uncounted; other: closed → open for 5s
			0s states => other=open
		`},
		{"an app tagging other feeds the shared breaker", Config{ConsecutiveFailures: 2, MinRequests: 1000, MaxDownstreams: 1}, `
			0s fail a => counted
			0s fail other => counted
			0s fail b => uncounted; other: closed → open for 5s
			0s states => a=closed other=open
		`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runScript(t, tt.cfg, tt.script) })
	}
}

func TestOpenWait(t *testing.T) {
	c := Config{OpenTimeout: 5 * time.Second, MaxOpenTimeout: 60 * time.Second}
	want := []time.Duration{5, 10, 20, 40, 60, 60}
	for i, w := range want {
		if got := c.OpenWait(i); got != w*time.Second {
			t.Errorf("OpenWait(%d) = %v, want %v", i, got, w*time.Second)
		}
	}
	big := Config{OpenTimeout: time.Hour, MaxOpenTimeout: 1<<63 - 1}
	for r, want := range map[int]time.Duration{0: time.Hour, 1: 2 * time.Hour, 40: big.MaxOpenTimeout, 100: big.MaxOpenTimeout, 1 << 30: big.MaxOpenTimeout, math.MaxInt: big.MaxOpenTimeout} {
		if got := big.OpenWait(r); got != want {
			t.Errorf("OpenWait(%d) = %v, want %v (overflowed?)", r, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	var c Config
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{ConsecutiveFailures: 5, FailureRatio: 0.5, MinRequests: 20, Window: 10 * time.Second,
		OpenTimeout: 5 * time.Second, MaxOpenTimeout: 60 * time.Second, MaxDownstreams: 64}
	if c != want {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
	// A long open timeout alone raises the default cap to it.
	c = Config{OpenTimeout: 2 * time.Minute}
	if err := c.Validate(); err != nil || c.MaxOpenTimeout != 2*time.Minute {
		t.Errorf("OpenTimeout 2m: MaxOpenTimeout %v, err %v", c.MaxOpenTimeout, err)
	}
	bad := []Config{
		{ConsecutiveFailures: -1},
		{FailureRatio: -0.1},
		{FailureRatio: 1.5},
		{MinRequests: -3},
		{Window: -time.Second},
		{OpenTimeout: -time.Second},
		{OpenTimeout: 10 * time.Second, MaxOpenTimeout: 5 * time.Second},
		{MaxDownstreams: -1},
		{MaxDownstreams: MaxDownstreamsLimit + 1},
	}
	for _, c := range bad {
		in := c
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", in)
		}
		if _, err := NewSet(in); err == nil {
			t.Errorf("NewSet(%+v) = nil error", in)
		}
	}
}
