package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	spool "github.com/spoolmq/spool/sdk/go"
)

// order is the payload of an order-placed event.
type order struct {
	OrderID    string `json:"order_id"`
	Email      string `json:"email"`
	TotalCents int    `json:"total_cents"`
	Items      int    `json:"items"`
}

// checkout places orders: each one is a publish to order-placed, keyed by
// order id, and that publish is all the checkout request waits for.
type checkout struct {
	client      *spool.Client
	book        *book
	poisonEvery int
	tracer      trace.Tracer // the checkout request's span, parent of the order's trace

	running   atomic.Int64 // checkout requests in progress
	published atomic.Int64
	failed    atomic.Int64 // publishes that returned an error
	latency   latencies    // of each successful publish
}

// run places rate orders per second until ctx ends, each in its own
// goroutine (like concurrent checkout requests), then waits for them.
func (c *checkout) run(ctx context.Context, rate int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	placed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			due := int(now.Sub(start).Seconds() * float64(rate))
			for ; placed < due; placed++ {
				n := placed + 1
				c.running.Add(1)
				wg.Go(func() {
					defer c.running.Add(-1)
					c.place(n)
				})
			}
		}
	}
}

// idle says whether no checkout request is in progress.
func (c *checkout) idle() bool { return c.running.Load() == 0 }

// place publishes order n. The request is not cancelled when the demo stops
// placing orders: a checkout that started completes.
func (c *checkout) place(n int) {
	o := order{OrderID: fmt.Sprintf("ord-%06d", n), Email: fmt.Sprintf("customer%d@example.com", n), TotalCents: 1000 + n%9000, Items: 1 + n%5}
	poison := c.poisonEvery > 0 && n%c.poisonEvery == 0
	if poison {
		o.Email = fmt.Sprintf("customer%d.example.com", n) // no @: can never be sent
	}
	payload, _ := json.Marshal(o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx, span := c.tracer.Start(ctx, "checkout "+o.OrderID, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	t0 := time.Now()
	// The publish carries ctx's trace context in the message headers: the
	// worker's handler continues this trace.
	_, err := c.client.Publish(ctx, Topic, []byte(o.OrderID), payload)
	took := time.Since(t0)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		c.failed.Add(1)
		return
	}
	c.latency.add(took)
	c.book.published(o.OrderID, poison)
	c.published.Add(1)
}

// latencies keeps every observation, and those since the last window() call.
type latencies struct {
	mu     sync.Mutex
	all    []time.Duration
	recent []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d)
	l.recent = append(l.recent, d)
	l.mu.Unlock()
}

// window returns the p99 of the observations since the previous call.
func (l *latencies) window() time.Duration {
	l.mu.Lock()
	r := l.recent
	l.recent = nil
	l.mu.Unlock()
	return quantile(r, 0.99)
}

// quantiles returns the given quantiles of every observation, and the count.
func (l *latencies) quantiles(qs ...float64) ([]time.Duration, int) {
	l.mu.Lock()
	all := slices.Clone(l.all)
	l.mu.Unlock()
	slices.Sort(all)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = sortedQuantile(all, q)
	}
	return out, len(all)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return sortedQuantile(ds, q)
}

func sortedQuantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
