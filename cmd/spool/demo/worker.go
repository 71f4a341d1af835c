package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	spool "github.com/spoolmq/spool/sdk/go"
)

// provider is a fake email provider: slow (0.5x..1.5x the mean latency),
// failing a share of calls, and down for one window of the run.
type provider struct {
	latency          time.Duration
	failRate         float64
	downFrom, downTo time.Time

	calls, failures atomic.Int64
	latencies       latencies
}

func newProvider(o Options, start time.Time) *provider {
	p := &provider{latency: o.ProviderLatency, failRate: o.FailRate}
	if o.Outage > 0 {
		p.downFrom = start.Add(o.Duration / 3)
		p.downTo = p.downFrom.Add(o.Outage)
	}
	return p
}

// played says how much of the outage happened by t: "", "partly" or "whole".
func (p *provider) played(t time.Time) string {
	switch {
	case p.downFrom.IsZero() || t.Before(p.downFrom):
		return ""
	case t.Before(p.downTo):
		return "partly"
	}
	return "whole"
}

// down says whether the provider is in its outage at t.
func (p *provider) down(t time.Time) bool {
	return !p.downFrom.IsZero() && !t.Before(p.downFrom) && t.Before(p.downTo)
}

var errOutage = errors.New("email provider: 503 service unavailable (outage)")

// send "sends" an email: it takes the provider's time, then fails or not.
func (p *provider) send(ctx context.Context, to string) error {
	p.calls.Add(1)
	t0 := time.Now()
	d := time.Duration(float64(p.latency) * (0.5 + rand.Float64()))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		p.failures.Add(1)
		return ctx.Err()
	}
	p.latencies.add(time.Since(t0))
	switch {
	case p.down(t0):
		p.failures.Add(1)
		return errOutage
	case rand.Float64() < p.failRate:
		p.failures.Add(1)
		return fmt.Errorf("email provider: timeout sending to %s", to)
	}
	return nil
}

// worker is the email-workers app: one handler, and an idempotent consumer
// (an order already emailed is acknowledged without a second email).
type worker struct {
	provider *provider
	book     *book
	tracer   trace.Tracer // the email-provider call's span
}

func (w *worker) handle(ctx context.Context, m *spool.Message) error {
	var o order
	if err := json.Unmarshal(m.Payload, &o); err != nil || o.OrderID == "" {
		return spool.DeadLetter("malformed order")
	}
	if !validEmail(o.Email) {
		return spool.DeadLetter(ReasonInvalidEmail)
	}
	if w.book.alreadyEmailed(o.OrderID) {
		return nil // a redelivery of an order we already emailed: do not email twice
	}
	// ctx carries the handler's span, continued from checkout's trace.
	ctx, span := w.tracer.Start(ctx, "email-provider send", trace.WithSpanKind(trace.SpanKindClient))
	err := w.provider.send(ctx, o.Email)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if err != nil {
		return spool.RetryDownstream(Downstream, 0, err)
	}
	w.book.emailed(o.OrderID)
	return nil
}

func validEmail(s string) bool {
	at := strings.IndexByte(s, '@')
	return at > 0 && at < len(s)-1 && !strings.ContainsAny(s, " \t\r\n")
}

// book is the demo's own record of every order, to check Spool's work:
// which orders checkout published, which the worker emailed and how often a
// delivery came for an order already emailed.
type book struct {
	mu         sync.Mutex
	orders     map[string]bool // published order id → poison
	sent       map[string]bool // emailed
	duplicates int             // deliveries of an order already emailed (skipped)
	sentTwice  int             // emails sent for an order already emailed
}

func newBook() *book {
	return &book{orders: map[string]bool{}, sent: map[string]bool{}}
}

func (b *book) published(id string, poison bool) {
	b.mu.Lock()
	b.orders[id] = poison
	b.mu.Unlock()
}

func (b *book) alreadyEmailed(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent[id] {
		b.duplicates++
		return true
	}
	return false
}

func (b *book) emailed(id string) {
	b.mu.Lock()
	if b.sent[id] {
		b.sentTwice++
	}
	b.sent[id] = true
	b.mu.Unlock()
}

func (b *book) emailedOrders() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(len(b.sent))
}
