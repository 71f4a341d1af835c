package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/cmd/spool/demo"
)

// TestDemo runs a short demo (high rate, a 1 s outage, fast provider) and
// checks its promises: no order lost, retries and dead letters happened, and
// the summary was printed.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a sidecar for about 5 s")
	}
	var out bytes.Buffer
	o := demo.DefaultOptions()
	o.Duration = 4 * time.Second
	o.Rate = 500
	o.FailRate = 0.2
	o.ProviderLatency = 20 * time.Millisecond
	o.Outage = time.Second
	o.PoisonEvery = 50
	// The drain ends as soon as the queue is empty (about 10 s here). The
	// provider's random failures (20%) trip the breaker now and then (five in
	// a row), and a few failed probes in a row keep delivery paused for a
	// while (open 1, 2, 4, 4 ... s): once in CI the queue was not empty after
	// 25 s. The budget is generous for that and for a loaded CI machine.
	o.DrainTimeout = 50 * time.Second
	o.Out = &out // not a terminal: one line per second
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	s, err := demo.Run(ctx, o)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("demo.Run: %v", err)
	}
	if s.Interrupted {
		t.Fatal("the demo did not finish draining before the test's deadline")
	}
	if s.Published < 1000 {
		t.Errorf("published %d orders, want at least 1000 at 500/s for 4 s", s.Published)
	}
	if s.Lost != 0 || s.Unfinished != 0 {
		t.Errorf("lost %d, unfinished %d: want every order emailed or dead-lettered", s.Lost, s.Unfinished)
	}
	if s.Emailed+s.DeadLettered != s.Published {
		t.Errorf("emailed %d + dead-lettered %d != published %d", s.Emailed, s.DeadLettered, s.Published)
	}
	if s.Retried == 0 {
		t.Error("nothing was retried, though the provider fails 20% of calls and has an outage")
	}
	if s.DeadLettered == 0 {
		t.Error("nothing was dead-lettered, though every 50th order is poison")
	}
	if s.PoisonInDLQ != s.Poison {
		t.Errorf("%d of %d poison orders in the DLQ with reason %q after one attempt, want all", s.PoisonInDLQ, s.Poison, demo.ReasonInvalidEmail)
	}
	if s.SentTwice != 0 {
		t.Errorf("%d orders emailed twice, want 0 (the worker dedupes by order id)", s.SentTwice)
	}
	for _, want := range []string{"Summary after", "orders published", "lost                     0", "No order was lost", demo.DLQTopic} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestDemoKeep: with Keep, the demo's sidecar stays up after the summary
// and spool shows what the demo did: the group caught up, dead letters of
// the poison orders, and the messages in the topic.
func TestDemoKeep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a sidecar for about 3 s")
	}
	o := demo.DefaultOptions()
	o.Duration = 2 * time.Second
	o.Rate = 200
	o.ProviderLatency = 5 * time.Millisecond
	o.Outage = 0
	o.PoisonEvery = 20
	o.DrainTimeout = 25 * time.Second
	o.Keep = true
	out := &lockedBuffer{}
	o.Out = out
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { // owned: awaited below
		_, err := demo.Run(ctx, o)
		done <- err
	}()
	re := regexp.MustCompile(`spool --admin (\S+) topic describe`)
	var admin string
	eventually(t, 40*time.Second, "the demo says its sidecar keeps running", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the demo ended: %v\n%s", err, out.String())
		default:
		}
		if m := re.FindStringSubmatch(out.String()); m != nil {
			admin = m[1]
			return true
		}
		return false
	})
	envs := map[string]string{envAdmin: admin}
	r := runSpool(t, envs, "", false, "group", "describe", demo.Group, "-o", "json")
	var g []groupView
	if err := json.Unmarshal([]byte(r.stdout), &g); r.code != 0 || err != nil || len(g) != 1 || g[0].LagMessages != 0 {
		t.Errorf("spool group describe after the demo: exit %d, %v: %s%s", r.code, err, r.stdout, r.stderr)
	}
	r = runSpool(t, envs, "", false, "dlq", "list", "--group", demo.Group, "--topic", demo.Topic, "-o", "json")
	var sum dlqSummaryView
	if err := json.Unmarshal([]byte(r.stdout), &sum); r.code != 0 || err != nil || sum.Matched == 0 || len(sum.ByReason) == 0 || sum.ByReason[0].Value != demo.ReasonInvalidEmail {
		t.Errorf("spool dlq list after the demo: exit %d, %v: %s%s", r.code, err, r.stdout, r.stderr)
	}
	r = runSpool(t, envs, "", false, "tail", demo.Topic, "--from-beginning", "--limit", "3")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("spool tail after the demo: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("demo.Run: %v", err)
	}
}
