package backoff

import (
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestValidateDefaults(t *testing.T) {
	var c Config
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c != (Config{Base: time.Second, Max: time.Minute, Multiplier: 2}) {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Base: -1}, "Base"},
		{Config{Max: -time.Second}, "Max"},
		{Config{Base: time.Minute, Max: time.Second}, "Max"},
		{Config{Multiplier: 0.5}, "Multiplier"},
		{Config{Multiplier: math.NaN()}, "Multiplier"},
		{Config{Multiplier: math.Inf(1)}, "Multiplier"},
		{Config{Jitter: -0.1}, "Jitter"},
		{Config{Jitter: 1.5}, "Jitter"},
		{Config{Jitter: math.NaN()}, "Jitter"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.c, err, tc.want)
		}
	}
}

func TestDelayTable(t *testing.T) {
	c := Config{Base: time.Second, Max: time.Minute, Multiplier: 2}
	for _, tc := range []struct {
		attempt int
		rand    float64
		want    time.Duration
	}{
		{1, 0, 0},
		{1, 0.5, 500 * time.Millisecond},
		{0, 0.5, 500 * time.Millisecond}, // attempts below 1 count as 1
		{-7, 0.5, 500 * time.Millisecond},
		{2, 0.5, time.Second},
		{3, 0.25, time.Second},
		{6, 1, 32 * time.Second},
		{7, 1, time.Minute}, // 64s capped at 60s
		{7, 0.5, 30 * time.Second},
		{1000, 0.5, 30 * time.Second},
		{math.MaxInt, 0.5, 30 * time.Second}, // no overflow
		{3, -1, 0},                           // clamped
		{3, math.NaN(), 0},
		{3, 2, 4 * time.Second},
	} {
		if got := c.Delay(tc.attempt, tc.rand); got != tc.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tc.attempt, tc.rand, got, tc.want)
		}
	}
	// Multiplier 1: constant cap.
	flat := Config{Base: 3 * time.Second, Max: time.Minute, Multiplier: 1}
	if got := flat.Delay(50, 0.5); got != 1500*time.Millisecond {
		t.Errorf("flat Delay = %v", got)
	}
}

func TestDelayProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Config{
			Base:       time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "base")),
			Multiplier: rapid.Float64Range(1, 1000).Draw(t, "mult"),
		}
		c.Max = c.Base + time.Duration(rapid.Int64Range(0, math.MaxInt64-int64(c.Base)).Draw(t, "extra"))
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		a := rapid.IntRange(math.MinInt, math.MaxInt).Draw(t, "attempt")
		r := rapid.Float64Range(0, 1).Draw(t, "rand")
		d := c.Delay(a, r)
		if d < 0 || d > c.Max {
			t.Fatalf("Delay(%d, %v) = %v outside [0, %v]", a, r, d, c.Max)
		}
		if d > c.Cap(a) {
			t.Fatalf("Delay(%d, %v) = %v above Cap %v", a, r, d, c.Cap(a))
		}
		if a < math.MaxInt && c.Cap(a+1) < c.Cap(a) {
			t.Fatalf("Cap not monotone: Cap(%d)=%v > Cap(%d)=%v", a, c.Cap(a), a+1, c.Cap(a+1))
		}
		if a >= 1 && a < 60 {
			want := math.Min(float64(c.Max), float64(c.Base)*math.Pow(c.Multiplier, float64(a-1)))
			if got := float64(c.Cap(a)); math.Abs(got-want) > want*1e-9+1 {
				t.Fatalf("Cap(%d) = %v, want %v", a, got, want)
			}
		}
	})
}

// A partial jitter keeps the delay in [(1-Jitter)·Cap, Cap]: engine/transport
// reconnects after at least half the cap.
func TestDelayPartialJitter(t *testing.T) {
	c := Config{Base: time.Second, Max: 8 * time.Second, Multiplier: 2, Jitter: 0.5}
	for _, tc := range []struct {
		attempt int
		rand    float64
		want    time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{1, 0.5, 750 * time.Millisecond},
		{1, 1, time.Second},
		{3, 0, 2 * time.Second},
		{3, math.NaN(), 2 * time.Second},
		{3, -1, 2 * time.Second},
		{3, 2, 4 * time.Second},
		{9, 0.5, 6 * time.Second},
	} {
		if got := c.Delay(tc.attempt, tc.rand); got != tc.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tc.attempt, tc.rand, got, tc.want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		c := Config{
			Base:       time.Duration(rapid.Int64Range(1, int64(time.Hour)).Draw(t, "base")),
			Multiplier: rapid.Float64Range(1, 1000).Draw(t, "mult"),
			Jitter:     rapid.Float64Range(0, 1).Draw(t, "jitter"),
		}
		c.Max = c.Base + time.Duration(rapid.Int64Range(0, int64(24*time.Hour)).Draw(t, "extra"))
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		a := rapid.IntRange(-5, 100).Draw(t, "attempt")
		r := rapid.Float64Range(0, 1).Draw(t, "rand")
		limit := c.Cap(a)
		j := c.Jitter
		if j == 0 {
			j = 1
		}
		lo := time.Duration((1 - j) * float64(limit))
		if d := c.Delay(a, r); d < lo-1 || d > limit {
			t.Fatalf("Delay(%d, %v) = %v outside [%v, %v]", a, r, d, lo, limit)
		}
	})
}
