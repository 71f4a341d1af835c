package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Handler processes one message. Its return value is the outcome (see
// Retry, RetryDownstream, DeadLetter): nil acknowledges the message, any
// other error retries it. ctx is cancelled when the delivery's lease is lost
// (the stream to the sidecar broke) or when the drain timeout passes during
// shutdown; a handler should then stop and return.
type Handler func(ctx context.Context, m *Message) error

// Subscribe dials addr (see Dial), runs Client.Subscribe and closes the
// connection when it returns.
func Subscribe(ctx context.Context, addr, group string, topics []string, h Handler, opts ...SubscribeOption) error {
	c, err := Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Subscribe(ctx, group, topics, h, opts...)
}

// Subscribe consumes topics (empty: all topics of the group) as consumer
// group group, calling h for each delivery, until ctx ends. It then drains:
// stops asking for messages, hands back received messages that were not
// started, waits for running handlers (up to the drain timeout), sends their
// outcomes and returns nil.
//
// When the stream to the sidecar breaks (a sidecar restart), Subscribe
// reconnects with exponential backoff and full jitter, forever, logging each
// attempt at Warn; while no sidecar answers, it also reconnects as soon as
// the connection is back (within 600 ms of the sidecar being ready with the
// default connect backoff, see ConnectBackoffMax). It returns an error only for an invalid call, a sidecar
// that refuses the subscription for good (unknown group or topic, bad
// argument), or handlers that ignored the drain timeout.
func (c *Client) Subscribe(ctx context.Context, group string, topics []string, h Handler, opts ...SubscribeOption) error {
	if group == "" {
		return errors.New("spool: subscribe: group is empty: name the consumer group declared in the sidecar's subscriptions")
	}
	if h == nil {
		return errors.New("spool: subscribe: handler is nil: pass a func(ctx, *spool.Message) error")
	}
	cfg, err := newSubscribeConfig(opts)
	if err != nil {
		return err
	}
	sub := newSubscriber(c, cfg, group, topics, h)
	return sub.run(ctx)
}

// subscriber is one Subscribe call: a fixed pool of workers shared by the
// successive streams (sessions) of the call, so the concurrency bound holds
// across reconnects.
type subscriber struct {
	client  *Client
	cfg     subscribeConfig
	group   string
	topics  []string
	handler Handler
	log     *slog.Logger
	stats   *Stats
	tracer  *handlerTracer
	opened  int // streams opened so far; only run's goroutine touches it

	work        chan workItem // deliveries received, not yet started
	stopWorkers chan struct{} // closed at drain: workers exit after their current handler
	draining    atomic.Bool   // set at drain: workers hand back what they pick up
	running     atomic.Int32  // workers alive
	workersDone chan struct{} // closed when the last worker exits
	workers     sync.WaitGroup

	// handlerBase is the parent of every handler ctx; cancelled when the
	// drain timeout passes (or Subscribe returns).
	handlerBase    context.Context
	cancelHandlers context.CancelFunc
}

type workItem struct {
	s    *session
	d    *spoolv1.Delivery
	wait *waitFrame // its frame in s.waiting (nil: not watched)
	i    int        // its index in wait
}

func newSubscriber(c *Client, cfg subscribeConfig, group string, topics []string, h Handler) *subscriber {
	sub := &subscriber{
		client: c, cfg: cfg, group: group, topics: topics, handler: h,
		log: cfg.logger.With("group", group, "addr", c.addr), stats: cfg.stats,
		tracer: newHandlerTracer(cfg.tracerProvider, topics),
		// Twice the credit, so the leftovers of a broken stream (dropped by
		// the workers) never block the receiver of the next one for long.
		work:        make(chan workItem, 2*cfg.credit()),
		stopWorkers: make(chan struct{}),
		workersDone: make(chan struct{}),
	}
	return sub
}

func (sub *subscriber) run(ctx context.Context) error {
	sub.handlerBase, sub.cancelHandlers = context.WithCancel(context.WithoutCancel(ctx))
	defer sub.cancelHandlers()
	sub.running.Store(int32(sub.cfg.concurrency))
	for range sub.cfg.concurrency {
		sub.workers.Go(sub.worker)
	}

	var (
		live    *session // the session to drain with, if any
		runErr  error
		attempt int
	)
	for ctx.Err() == nil {
		s, err := sub.open(ctx)
		if err == nil {
			err = s.serve(ctx)
			if err == nil { // ctx ended with the stream alive: drain through it
				live = s
				break
			}
			s.close()
			if s.started.Load() {
				attempt = 0
			}
		}
		if errors.Is(err, errFrameTooLarge) {
			runErr = fmt.Errorf("spool: subscribe group %q: the sidecar at %s sent a delivery frame larger than this client's receive limit of %d bytes (%w): raise WithMaxReceiveBytes above the sidecar's limits.max_message_bytes plus 1 MiB, or upgrade spoold so that it bounds frames by Start.max_receive_bytes; reconnecting would only get the same frame again", sub.group, sub.client.addr, sub.cfg.maxReceive, err)
			sub.log.Error("spool: subscribe stopped: a delivery frame is larger than this client can receive", "err", runErr)
			break
		}
		if permanent(err) {
			runErr = fmt.Errorf("spool: subscribe group %q: the sidecar at %s refused the subscription: %w: check the group and topics against the sidecar's subscriptions", sub.group, sub.client.addr, err)
			break
		}
		if ctx.Err() != nil {
			break
		}
		d := sub.cfg.backoff.next(attempt)
		attempt++
		if !sidecarUnreachable(err) {
			sub.log.Warn("spool: subscribe stream to the sidecar broke; reconnecting (deliveries in progress will be redelivered)", "err", err, "retry_in", d, "attempt", attempt)
			sleepCtx(ctx, d)
			continue
		}
		// Nothing answers: try again after d, or as soon as the sidecar is back.
		sub.log.Warn("spool: no sidecar answering; reconnecting (is spoold running? deliveries in progress will be redelivered)", "err", err, "retry_in", d, "attempt", attempt)
		sub.client.awaitReconnect(ctx, d)
	}
	return errors.Join(runErr, sub.drain(live))
}

// permanent says whether a stream error will not go away by reconnecting.
// Transport failures, sidecar restarts, overload and our own cancellation
// are retried; a refusal of the request itself is not.
func permanent(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition, codes.Unimplemented:
		return true
	default: // Unavailable, Aborted, ResourceExhausted, Internal, Unknown, DeadlineExceeded, Canceled
		return false
	}
}

// drain ends the call: stop credit, release what never started, wait for
// running handlers up to the drain timeout, send their outcomes, close the
// stream. live is the stream still open, or nil.
func (sub *subscriber) drain(live *session) error {
	sub.draining.Store(true)
	if live != nil {
		live.stopCredit()
	}
	sub.releaseQueued()
	close(sub.stopWorkers)

	var err error
	if !waitClosed(sub.workersDone, sub.cfg.drainTimeout) {
		n := sub.running.Load()
		sub.log.Warn("spool: drain timeout passed with handlers running; cancelling their ctx", "running", n, "drain_timeout", sub.cfg.drainTimeout)
		sub.cancelHandlers()
		if !waitClosed(sub.workersDone, abandonAfterCancelGrace) {
			n = sub.running.Load()
			err = fmt.Errorf("spool: drain: %d %w", n, errAbandoned)
			sub.log.Error("spool: drain: handlers ignore their ctx; abandoning them", "running", n)
		}
	}
	sub.releaseQueued()
	if live != nil {
		live.finish()
	}
	sub.cancelHandlers()
	if err == nil {
		sub.workers.Wait()
	}
	return err
}

// releaseQueued hands back every delivery received but not started.
func (sub *subscriber) releaseQueued() {
	for {
		select {
		case it := <-sub.work:
			it.s.waiting.take(it.wait, it.i)
			it.s.release(it.d)
		default:
			return
		}
	}
}

func waitClosed(ch <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// worker runs handlers one at a time until the drain.
func (sub *subscriber) worker() {
	defer func() {
		if sub.running.Add(-1) == 0 {
			close(sub.workersDone)
		}
	}()
	w := &leaseKeeper{}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	defer w.timer.Stop()
	for {
		select {
		case <-sub.stopWorkers:
			return
		case it := <-sub.work:
			sub.process(w, it)
		}
	}
}

func (sub *subscriber) process(w *leaseKeeper, it workItem) {
	s, d := it.s, it.d
	if s.isDead() {
		return // the stream broke: the sidecar released the delivery already
	}
	s.waiting.take(it.wait, it.i) // this worker's keeper takes over the lease, or it goes back
	if sub.draining.Load() {
		s.release(d)
		return
	}
	ref := refOf(d)
	w.begin(s, ref, d.GetLeaseDeadlineMs())
	m := newMessage(d)
	ctx, span := sub.tracer.start(s.handlerCtx, m)
	err := sub.call(ctx, m)
	sub.tracer.end(span, err)
	w.end()
	s.settle(settlementFor(ref, err))
}

// call runs the handler, turning a panic into a retry.
func (sub *subscriber) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
			sub.stats.Panics.Add(1)
			sub.log.Error("spool: handler panicked; the message will be retried",
				"topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "id", m.ID,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	return sub.handler(ctx, m)
}

// minExtendEvery bounds how often one delivery's lease is extended.
const minExtendEvery = 5 * time.Millisecond

// leaseKeeper extends the lease of the delivery its worker is running: at
// 2/3 of the lease, then every 2/3 of the visibility timeout, until the
// handler returns. One timer per worker, reused: no allocation per message.
type leaseKeeper struct {
	timer *time.Timer

	mu     sync.Mutex
	active bool
	s      *session
	ref    deliveryRef
	every  time.Duration
}

func (w *leaseKeeper) begin(s *session, ref deliveryRef, deadlineMs int64) {
	vis := time.Duration(s.visibilityMs.Load()) * time.Millisecond
	var at time.Duration
	switch {
	case deadlineMs > 0:
		lease := time.Until(time.UnixMilli(deadlineMs))
		at = max(lease*2/3, 0)
		if vis <= 0 {
			vis = lease // visibility timeout unknown: assume an extension grants as much again
		}
	case vis > 0:
		at = vis * 2 / 3
	default:
		return // no lease information: nothing to extend
	}
	w.mu.Lock()
	w.active, w.s, w.ref, w.every = true, s, ref, max(vis*2/3, minExtendEvery)
	w.mu.Unlock()
	w.timer.Reset(at)
}

func (w *leaseKeeper) end() {
	w.mu.Lock()
	w.active, w.s = false, nil
	w.mu.Unlock()
	w.timer.Stop()
}

func (w *leaseKeeper) fire() {
	w.mu.Lock()
	if !w.active {
		w.mu.Unlock()
		return
	}
	s, ref := w.s, w.ref
	if w.every > 0 {
		w.timer.Reset(w.every)
	}
	w.mu.Unlock()
	s.extend(ref)
}
