package demo

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// sample is one second of the live view.
type sample struct {
	at           time.Duration // since the start
	providerDown bool
	published    int64
	perSecond    int64 // published since the previous sample
	publishP99   time.Duration
	delivered    int64
	acked        int64
	retried      int64
	emailed      int64
	queueState
}

func takeSample(sc *runningSidecar, shop *checkout, stats *spool.Stats, prov *provider, at time.Duration, prev sample) sample {
	s := sample{
		at:           at,
		providerDown: prov.down(time.Now()),
		published:    shop.published.Load(),
		publishP99:   shop.latency.window(),
		delivered:    stats.Delivered.Load(),
		acked:        stats.Acked.Load(),
		retried:      stats.Retried.Load(),
		emailed:      shop.book.emailedOrders(),
		queueState:   sc.queueState(),
	}
	if !s.ok { // the admin API did not answer in time: show the last known state
		s.queueState = prev.queueState
		s.ok = false
	}
	s.perSecond = s.published - prev.published
	return s
}

// liveView prints a sample a second: redrawn in place on a terminal, one
// line each otherwise. It also keeps the peaks for the summary.
type liveView struct {
	o       Options
	start   time.Time
	out     io.Writer
	drawn   int // lines drawn last time (terminal)
	peakLag int64
	peakAge float64
	last    sample
}

func (v *liveView) draw(s sample) {
	v.peakLag = max(v.peakLag, s.lagMessages)
	v.peakAge = max(v.peakAge, s.lagSeconds)
	v.last = s
	provider := "up"
	if s.providerDown {
		provider = "DOWN"
	}
	phase := fmt.Sprintf("%.0fs of %s", s.at.Seconds(), v.o.Duration)
	if s.at > v.o.Duration {
		phase = fmt.Sprintf("%.0fs, draining", s.at.Seconds())
	}
	lag := fmt.Sprintf("%d msgs, oldest %.1f s", s.lagMessages, s.lagSeconds)
	stale := ""
	if !s.ok {
		stale = " (stale: the admin API did not answer within 1 s)"
	}
	if !v.o.Live {
		fmt.Fprintf(v.out, "[%s] published=%d publish_p99=%s delivered=%d acked=%d retried=%d dead_lettered=%d in_flight=%d lag=%d/%.1fs provider=%s%s\n",
			phase, s.published, ms(s.publishP99), s.delivered, s.acked, s.retried, s.dlq, s.inFlight, s.lagMessages, s.lagSeconds, strings.ToLower(provider), stale)
		return
	}
	lines := []string{
		fmt.Sprintf("\x1b[1mspool demo\x1b[0m  %s   email provider %s", phase, colour(provider)),
		"",
		fmt.Sprintf("  checkout      published %7d  (+%d/s)   publish p99 %s", s.published, s.perSecond, ms(s.publishP99)),
		fmt.Sprintf("  email worker  delivered %7d   acked %6d   retried %6d   dead-lettered %4d   in flight %4d", s.delivered, s.acked, s.retried, s.dlq, s.inFlight),
		fmt.Sprintf("  queue         lag %s%s", lag, stale),
	}
	var b strings.Builder
	if v.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dF", v.drawn) // to the start of the first line drawn
	}
	for _, l := range lines {
		b.WriteString("\x1b[2K" + l + "\n")
	}
	v.drawn = len(lines)
	io.WriteString(v.out, b.String())
}

func colour(provider string) string {
	if provider == "DOWN" {
		return "\x1b[1;31mDOWN\x1b[0m"
	}
	return "\x1b[32mup\x1b[0m"
}

func (v *liveView) finish() {
	if v.o.Live {
		fmt.Fprintln(v.out)
	}
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// Summary is the outcome of a run, checked order by order.
type Summary struct {
	Duration      time.Duration // whole run, drain included
	Interrupted   bool          // ended by Ctrl-C
	Published     int64         // orders checkout published
	PublishErrors int64         // checkouts whose publish failed
	PublishP50    time.Duration
	PublishP99    time.Duration
	PublishMax    time.Duration
	ProviderP50   time.Duration
	ProviderP99   time.Duration
	ProviderCalls int64
	ProviderFails int64
	Outage        time.Duration // as configured
	OutagePlayed  string        // "" (none), "partly" (the run stopped during it) or "whole"

	Delivered int64 // deliveries to the worker (attempts)
	Acked     int64
	Retried   int64

	Emailed      int64            // orders emailed
	DeadLettered int64            // orders in the DLQ
	DLQByReason  map[string]int64 // DLQ entries of published orders by reason
	Poison       int64            // poison orders published
	PoisonInDLQ  int64            // poison orders in the DLQ with ReasonInvalidEmail after one attempt
	Duplicates   int              // redeliveries of orders already emailed (skipped)
	SentTwice    int              // orders emailed more than once
	Lost         int64            // published, neither emailed nor dead-lettered, not queued
	Unfinished   int64            // still queued when the demo stopped

	PeakLag    int64
	PeakLagAge float64 // seconds

	LogLines []string // warnings and errors logged by the sidecar and the SDK
}

func summarize(o Options, b *book, shop *checkout, prov *provider, stats *spool.Stats, v *liveView, dlq map[string]*spoolv1.DeadLetter, last sample, took time.Duration) *Summary {
	pub, _ := shop.latency.quantiles(0.5, 0.99, 1)
	pl, _ := prov.latencies.quantiles(0.5, 0.99)
	s := &Summary{
		Duration: took, Outage: o.Outage,
		Published: shop.published.Load(), PublishErrors: shop.failed.Load(),
		PublishP50: pub[0], PublishP99: pub[1], PublishMax: pub[2],
		ProviderP50: pl[0], ProviderP99: pl[1], ProviderCalls: prov.calls.Load(), ProviderFails: prov.failures.Load(),
		Delivered: stats.Delivered.Load(), Acked: stats.Acked.Load(), Retried: stats.Retried.Load(),
		DLQByReason:  map[string]int64{},
		OutagePlayed: prov.played(time.Now()),
		PeakLag:      v.peakLag, PeakLagAge: v.peakAge,
	}
	b.mu.Lock()
	var missing int64
	for id, poison := range b.orders {
		if poison {
			s.Poison++
		}
		if b.sent[id] {
			s.Emailed++
			continue
		}
		if e, ok := dlq[id]; ok {
			s.DeadLettered++
			s.DLQByReason[e.GetReason()]++
			if poison && e.GetReason() == ReasonInvalidEmail && e.GetMessage().GetAttempt() == 1 {
				s.PoisonInDLQ++
			}
			continue
		}
		missing++
	}
	s.Duplicates, s.SentTwice = b.duplicates, b.sentTwice
	b.mu.Unlock()
	queued := int64(0)
	if last.ok {
		queued = min(missing, last.lagMessages)
	}
	s.Unfinished, s.Lost = queued, missing-queued
	return s
}

func printSummary(w io.Writer, s *Summary) {
	var b bytes.Buffer
	row := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "  %-24s %s\n", name, fmt.Sprintf(format, args...))
	}
	title := "Summary"
	if s.Interrupted {
		title += " (interrupted)"
	}
	fmt.Fprintf(&b, "\n%s after %.1f s\n\n", title, s.Duration.Seconds())
	row("orders published", "%d   (publish errors: %d)", s.Published, s.PublishErrors)
	row("publish latency", "p50 %s   p99 %s   max %s", ms(s.PublishP50), ms(s.PublishP99), ms(s.PublishMax))
	row("email provider", "p50 %s   p99 %s   (%d calls, %d failed)", ms(s.ProviderP50), ms(s.ProviderP99), s.ProviderCalls, s.ProviderFails)
	row("deliveries", "%d   (acked %d, retried %d)", s.Delivered, s.Acked, s.Retried)
	row("orders emailed", "%d   (redeliveries skipped by order id: %d, emailed twice: %d)", s.Emailed, s.Duplicates, s.SentTwice)
	reasons := slices.Sorted(maps.Keys(s.DLQByReason))
	var rs []string
	for _, r := range reasons {
		rs = append(rs, fmt.Sprintf("%q: %d", r, s.DLQByReason[r]))
	}
	row("orders dead-lettered", "%d   %s", s.DeadLettered, strings.Join(rs, ", "))
	row("peak lag", "%d messages, oldest %.1f s", s.PeakLag, s.PeakLagAge)
	if s.Unfinished > 0 {
		row("still queued", "%d   (the demo stopped before they were processed)", s.Unfinished)
	}
	row("lost", "%d", s.Lost)
	b.WriteString("\n")
	for _, p := range sentences(s) {
		b.WriteString(p + "\n")
	}
	if len(s.LogLines) > 0 {
		fmt.Fprintf(&b, "\nWarnings and errors logged by the sidecar and the SDK:\n")
		for _, l := range s.LogLines {
			b.WriteString("  " + l + "\n")
		}
	}
	w.Write(b.Bytes())
}

// sentences says in plain words what Spool bought, from the numbers only.
func sentences(s *Summary) []string {
	var out []string
	if s.Published == 0 {
		return []string{"No order was published, so there is nothing to tell."}
	}
	p := fmt.Sprintf("Checkout never waited for email: a publish took %s at p99, while the email provider took %s (p99 %s).",
		ms(s.PublishP99), ms(s.ProviderP50), ms(s.ProviderP99))
	if s.PublishP99 >= s.ProviderP50 {
		p = fmt.Sprintf("In this run a publish was not faster than an email: publish p99 %s against the provider's %s (p99 %s); is the machine overloaded, or --provider-latency very low?",
			ms(s.PublishP99), ms(s.ProviderP50), ms(s.ProviderP99))
	}
	if s.PublishErrors == 0 && s.OutagePlayed != "" {
		p += " No checkout failed, not even while the provider was down."
	} else if s.PublishErrors > 0 {
		p += fmt.Sprintf(" %d checkouts failed to publish.", s.PublishErrors)
	}
	out = append(out, p)

	switch {
	case s.Lost == 0 && s.Unfinished == 0:
		p = fmt.Sprintf("No order was lost: all %d orders were emailed (%d) or dead-lettered (%d); 0 lost.", s.Published, s.Emailed, s.DeadLettered)
	case s.Lost == 0:
		p = fmt.Sprintf("Of %d orders, %d were emailed, %d dead-lettered and %d were still queued when the demo stopped; 0 lost.", s.Published, s.Emailed, s.DeadLettered, s.Unfinished)
	default:
		p = fmt.Sprintf("%d of %d orders were LOST: published, but neither emailed nor dead-lettered nor queued.", s.Lost, s.Published)
	}
	p += fmt.Sprintf(" Delivery is at-least-once, so the worker checks each order id before emailing: %d redeliveries of orders already emailed were skipped, %d orders emailed twice.", s.Duplicates, s.SentTwice)
	out = append(out, p)

	if s.OutagePlayed != "" {
		p = fmt.Sprintf("While the provider was down, the circuit breaker toward email-provider (the worker tags its failures with that downstream) paused delivery after a few failed calls, so orders waited in the log instead of burning their attempts (%d retries in all): lag peaked at %d messages, the oldest waiting %.1f s",
			s.Retried, s.PeakLag, s.PeakLagAge)
		if s.OutagePlayed == "whole" && s.Lost == 0 && s.Unfinished == 0 {
			p += ", and the queue drained once the provider was back."
		} else {
			p += "; the demo stopped before the queue had drained."
		}
		if n := s.DLQByReason["max_attempts_exceeded"]; n > 0 {
			what := fmt.Sprintf("%d orders used up their", n)
			if n == 1 {
				what = "1 order used up its"
			}
			p += fmt.Sprintf(" %s %d attempts (the provider's random failures, or failures before the breaker opened) and sit in the DLQ as \"max_attempts_exceeded\": kept, not emailed, ready to be redriven.", what, maxAttempts)
		}
		out = append(out, p)
	}
	if s.Poison > 0 {
		out = append(out, fmt.Sprintf("Poison orders did not block anyone: %d of the %d orders with a malformed email address went to %s after one attempt, with reason %q.",
			s.PoisonInDLQ, s.Poison, DLQTopic, ReasonInvalidEmail))
	}
	return out
}

// logBuffer keeps the warnings and errors the sidecar and the SDK log, so
// that they do not tear the live view; the summary shows the first few.
type logBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	count int
}

const maxLogLines = 10

func newLogBuffer() *logBuffer { return &logBuffer{} }

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Write takes one record from the handler (one line).
func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count++
	if l.count <= maxLogLines {
		l.buf.Write(p)
	}
	return len(p), nil
}

func (l *logBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := strings.Split(strings.TrimSpace(l.buf.String()), "\n")
	if len(out) == 1 && out[0] == "" {
		return nil
	}
	if l.count > maxLogLines {
		out = append(out, fmt.Sprintf("... and %d more", l.count-maxLogLines))
	}
	return out
}
