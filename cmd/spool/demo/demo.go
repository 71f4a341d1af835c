// Package demo is `spool demo`: the problem of the seed — checkout must not
// wait seconds for an email provider, nor fail when it is down — played out
// in one process against a real Spool sidecar.
//
// Run starts a sidecar (sidecar.Run, dev config, temporary data dir), a
// checkout producer publishing "order-placed" events, and an email worker
// built on the Go SDK whose fake provider is slow, sometimes fails, has one
// outage, and meets a few poison orders. It shows live counts once a second,
// drains, and ends with a summary checked order by order: every published
// order must have been emailed or dead-lettered.
//
// Every goroutine Run starts is owned by Run and has ended when it returns.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sidecar"
	"github.com/spoolmq/spool/sidecar/tracing"
)

// Names the demo uses in the sidecar's configuration.
const (
	Topic      = "order-placed"
	Group      = "email-workers"
	DLQTopic   = Topic + ".dlq." + Group
	Downstream = "email-provider"
	// ReasonInvalidEmail is the dead-letter reason the worker gives poison orders.
	ReasonInvalidEmail = "invalid email address"
)

// Options configure a run. DefaultOptions are those of `spool demo`.
type Options struct {
	Duration        time.Duration // orders are placed for this long
	Rate            int           // orders per second
	FailRate        float64       // share of provider calls failing outside the outage
	ProviderLatency time.Duration // mean provider latency; each call takes 0.5x..1.5x
	Outage          time.Duration // provider outage starting at Duration/3; 0 for none
	PoisonEvery     int           // every n-th order has a malformed email address; 0 for none
	DrainTimeout    time.Duration // after Duration, wait at most this long for the queue to empty
	Live            bool          // redraw the live view in place (a terminal)
	Out             io.Writer     // live view and summary
	// AdminListen is the sidecar's admin address (AdminService and
	// /metrics); "127.0.0.1:0" picks a free port.
	AdminListen string
	// Keep leaves the sidecar running after the summary, with what the
	// demo did in it, until ctx ends: look at it with spool.
	Keep bool
	// OTLPEndpoint, when set, exports one trace per order over OTLP/gRPC
	// (host:port): checkout's span, the sidecar's publish and delivery
	// spans, the worker's handler span and its email-provider call.
	OTLPEndpoint string
}

// DefaultOptions are the defaults of `spool demo`.
func DefaultOptions() Options {
	return Options{
		Duration:        20 * time.Second,
		Rate:            200,
		FailRate:        0.2,
		ProviderLatency: 300 * time.Millisecond,
		Outage:          5 * time.Second,
		PoisonEvery:     150,
		DrainTimeout:    30 * time.Second,
		AdminListen:     "127.0.0.1:0",
	}
}

// OptionError is an option out of range.
type OptionError struct{ Msg string }

func (e *OptionError) Error() string { return e.Msg }

func (o *Options) validate() error {
	switch {
	case o.Duration <= 0:
		return &OptionError{fmt.Sprintf("--duration %s: use a positive duration like 20s", o.Duration)}
	case o.Rate < 1 || o.Rate > 100_000:
		return &OptionError{fmt.Sprintf("--rate %d: use 1..100000 orders per second", o.Rate)}
	case !(o.FailRate >= 0 && o.FailRate <= 1):
		return &OptionError{fmt.Sprintf("--fail-rate %v: use a share between 0 and 1, like 0.2", o.FailRate)}
	case o.ProviderLatency < 0 || o.ProviderLatency > time.Minute:
		return &OptionError{fmt.Sprintf("--provider-latency %s: use 0..1m", o.ProviderLatency)}
	case o.Outage < 0:
		return &OptionError{fmt.Sprintf("--outage %s: use 0 (no outage) or a positive duration", o.Outage)}
	case o.PoisonEvery < 0 || o.DrainTimeout <= 0:
		return &OptionError{"PoisonEvery must be >= 0 and DrainTimeout positive"}
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.AdminListen == "" {
		o.AdminListen = "127.0.0.1:0"
	}
	return nil
}

// Run runs the demo until Duration has passed and the queue has drained (or
// DrainTimeout passed), or until ctx ends (Ctrl-C: it stops placing orders,
// drains briefly and still summarises). It prints the live view and the
// summary to Out and returns the summary. An error with a nil summary means
// the demo could not run.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	logs := newLogBuffer()
	logger := logs.logger()

	tp, shutdownTracing, err := tracerProvider(o)
	if err != nil {
		return nil, err
	}
	defer shutdownTracing() // last: after the apps and the sidecar stopped

	sc, err := startSidecar(logger, o.AdminListen, tp)
	if err != nil {
		return nil, err
	}
	defer sc.stop()

	producerConn, err := spool.Dial(ctx, sc.app)
	if err != nil {
		return nil, err
	}
	defer producerConn.Close()
	workerConn, err := spool.Dial(ctx, sc.app)
	if err != nil {
		return nil, err
	}
	defer workerConn.Close()

	start := time.Now()
	book := newBook()
	prov := newProvider(o, start)
	shop := &checkout{client: producerConn, book: book, poisonEvery: o.PoisonEvery, tracer: tp.Tracer("spool-demo/checkout")}
	w := &worker{provider: prov, book: book, tracer: tp.Tracer("spool-demo/email-worker")}
	var stats spool.Stats

	var wg sync.WaitGroup
	workerCtx, stopWorker := context.WithCancel(context.Background())
	var workerErr error
	wg.Go(func() {
		workerErr = workerConn.Subscribe(workerCtx, Group, []string{Topic}, w.handle,
			spool.WithConcurrency(256), spool.WithStats(&stats), spool.WithLogger(logger),
			spool.WithConsumerName("email-worker"), spool.WithDrainTimeout(5*time.Second), spool.WithTracerProvider(tp))
	})
	shopCtx, stopShop := context.WithTimeout(ctx, o.Duration)
	wg.Go(func() { shop.run(shopCtx, o.Rate) })
	// Stop the worker and the shop whatever happens below, and wait for them
	// before the sidecar stops (deferred earlier, so it runs later).
	defer func() {
		stopShop()
		stopWorker()
		wg.Wait()
	}()

	view := &liveView{o: o, start: start, out: o.Out}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	interrupted := false
	wait := func() {
		if interrupted {
			<-tick.C
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done(): // Ctrl-C: stop placing orders, drain briefly, summarise
			interrupted = true
		}
	}
	var last sample
	var drainBy time.Time
	for {
		wait()
		last = takeSample(sc, shop, &stats, prov, time.Since(start), last)
		view.draw(last)
		if shopCtx.Err() == nil {
			continue // still placing orders
		}
		if drainBy.IsZero() {
			budget := o.DrainTimeout
			if interrupted {
				budget = min(budget, 3*time.Second)
			}
			drainBy = time.Now().Add(budget)
		}
		drained := shop.idle() && last.ok && last.lagMessages == 0 && last.inFlight == 0 &&
			last.published == book.emailedOrders()+last.dlq
		if drained || time.Now().After(drainBy) {
			break
		}
	}
	view.finish()

	dlq, dlqErr := readDeadLetters(sc)
	s := summarize(o, book, shop, prov, &stats, view, dlq, last, time.Since(start))
	s.Interrupted = interrupted
	s.LogLines = logs.lines()
	printSummary(o.Out, s)

	stopShop()
	stopWorker()
	wg.Wait()
	if o.Keep && !interrupted {
		printKeepHints(o.Out, sc.adminAddr)
		<-ctx.Done()
	}
	return s, errors.Join(dlqErr, workerErr)
}

// tracerProvider is the one TracerProvider for the demo's apps and its
// sidecar, passed to each (never set globally): no-op without an endpoint.
// shutdown flushes it.
func tracerProvider(o Options) (tp trace.TracerProvider, shutdown func(), err error) {
	if o.OTLPEndpoint == "" {
		return noop.NewTracerProvider(), func() {}, nil
	}
	p, err := tracing.NewProvider(tracing.Config{Endpoint: o.OTLPEndpoint, SampleRatio: 1, Node: "spool-demo", Version: sidecar.Version})
	if err != nil {
		return nil, nil, err
	}
	return p, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	}, nil
}

// printKeepHints tells how to look at the sidecar the demo leaves running.
func printKeepHints(out io.Writer, adminAddr string) {
	fmt.Fprintf(out, `
The sidecar keeps running with what the demo did in it; look at it with spool
from another terminal (Ctrl-C here stops it):

  spool --admin %[1]s topic describe %[2]s
  spool --admin %[1]s group describe %[3]s
  spool --admin %[1]s dlq list --group %[3]s --topic %[2]s
  spool --admin %[1]s dlq peek --group %[3]s --topic %[2]s --limit 3
  spool --admin %[1]s tail %[2]s --from-beginning --limit 5
`, adminAddr, Topic, Group)
}
