package main

import (
	"bytes"
	"context"
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
	o.DrainTimeout = 25 * time.Second // ends as soon as the queue is empty; generous for a loaded CI machine
	o.Out = &out                      // not a terminal: one line per second
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
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
