package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/sidecar/breaker"
)

// outageDetection plays the worst case of docs/breaker.md's guarantee 4
// against a real breaker.Set with a subscription's settings: one message
// alone in flight, every delivery of it failing toward the downstream that
// is down, until the breaker opens. It returns the attempt the message is
// at when delivery pauses, and whether it was dead-lettered first (a
// counted failure of its max_attempts-th attempt).
func outageDetection(t *testing.T, s SubscriptionConfig) (attempt int, deadLettered bool) {
	t.Helper()
	set, err := breaker.NewSet(breaker.Config{
		ConsecutiveFailures: s.Breaker.ConsecutiveFailures, FailureRatio: s.Breaker.FailureRatio,
		MinRequests: s.Breaker.MinRequests, Window: s.Breaker.Window,
		OpenTimeout: s.Breaker.OpenTimeout, MaxOpenTimeout: s.Breaker.MaxOpenTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	attempt = 1
	for range s.Breaker.ConsecutiveFailures + s.MaxAttempts {
		now = now.Add(time.Second)
		counted, _ := set.Failure(now, "email", false)
		if !counted {
			if n, _ := set.Allow(now); n != 0 {
				t.Fatalf("a failure was not counted, yet the breaker lets %d deliveries through", n)
			}
			return attempt, false // paused: the outage is detected
		}
		if attempt == s.MaxAttempts {
			return attempt, true
		}
		attempt++
	}
	t.Fatalf("the breaker never opened after %d failures in a row (consecutive_failures %d)", s.Breaker.ConsecutiveFailures+s.MaxAttempts, s.Breaker.ConsecutiveFailures)
	return 0, false
}

// Every configuration spoold accepts keeps the promise of docs/breaker.md:
// detecting an outage never dead-letters a message that had no failed
// attempt before it, and never leaves it on its last attempt (so a lease
// expiring once more, for example as the probe, does not dead-letter it
// either) — unless max_attempts is 1, where every attempt is the last.
// consecutive_failures equal to max_attempts used to be accepted and used
// every attempt of such a message.
func TestAcceptedBreakerSettingsLeaveAnAttemptAfterDetection(t *testing.T) {
	accepted := 0
	for maxAttempts := 1; maxAttempts <= 12; maxAttempts++ {
		for consecutive := 0; consecutive <= 14; consecutive++ { // 0: the default
			c := valid()
			s := &c.Subscriptions[0]
			s.MaxAttempts, s.Breaker.ConsecutiveFailures = maxAttempts, consecutive
			s.applyDefaults()
			if c.Validate() != nil {
				continue
			}
			accepted++
			attempt, dead := outageDetection(t, *s)
			what := fmt.Sprintf("max_attempts %d, consecutive_failures %d (set %d)", maxAttempts, s.Breaker.ConsecutiveFailures, consecutive)
			if dead {
				t.Errorf("%s: detecting the outage dead-lettered the message", what)
			} else if maxAttempts > 1 && attempt >= maxAttempts {
				t.Errorf("%s: detecting the outage left the message on attempt %d of %d: its last", what, attempt, maxAttempts)
			}
		}
	}
	if accepted < 12 {
		t.Fatalf("only %d of the settings tried were accepted", accepted)
	}
}

// consecutive_failures defaults to 5, lowered below max_attempts; a value
// at or above max_attempts is refused with what to do.
func TestConsecutiveFailuresBelowMaxAttempts(t *testing.T) {
	for _, tt := range []struct{ maxAttempts, want int }{{5, 4}, {10, 5}, {6, 5}, {3, 2}, {2, 1}, {1, 1}} {
		s := SubscriptionConfig{Topic: "orders", Group: "g", MaxAttempts: tt.maxAttempts}
		s.applyDefaults()
		if s.Breaker.ConsecutiveFailures != tt.want {
			t.Errorf("max_attempts %d: default consecutive_failures %d, want %d", tt.maxAttempts, s.Breaker.ConsecutiveFailures, tt.want)
		}
	}
	for _, tt := range []struct {
		maxAttempts, consecutive int
		allowed                  string // "" when valid
	}{
		{5, 4, ""},
		{5, 5, "at most 4 (below max_attempts, 5"},
		{5, 9, "at most 4 (below max_attempts, 5"},
		{1, 1, ""},
		{1, 2, "1 when max_attempts is 1"},
		{2, 2, "at most 1 (below max_attempts, 2"},
	} {
		c := valid()
		c.Subscriptions[0].MaxAttempts, c.Subscriptions[0].Breaker.ConsecutiveFailures = tt.maxAttempts, tt.consecutive
		errs := fieldErrors(c.Validate())
		switch {
		case tt.allowed == "" && len(errs) > 0:
			t.Errorf("max_attempts %d, consecutive_failures %d: %v", tt.maxAttempts, tt.consecutive, errs)
		case tt.allowed != "" && (len(errs) != 1 || errs[0].Field != "subscriptions[0].breaker.consecutive_failures" || !strings.Contains(errs[0].Allowed, tt.allowed)):
			t.Errorf("max_attempts %d, consecutive_failures %d: errors %v, want one on breaker.consecutive_failures saying %q", tt.maxAttempts, tt.consecutive, errs, tt.allowed)
		}
	}
}
