package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// session is one Subscribe stream. Two goroutines: the receiver hands
// deliveries to the subscriber's workers; the sender coalesces everything
// queued since its last frame (settlements, extensions, credit) into one
// frame, so frames batch under load and go out at once when idle.
//
// Locks: session.mu and leaseKeeper.mu are leaves; neither is held while
// taking the other (leaseKeeper.fire unlocks before calling session.extend),
// nor during a Send or Recv. waitingLeases.mu is taken before session.mu
// (its fire queues extensions with it held), never while holding it.
type session struct {
	sub          *subscriber
	stream       grpc.BidiStreamingClient[spoolv1.SubscribeRequest, spoolv1.SubscribeResponse]
	cancelStream context.CancelFunc
	handlerCtx   context.Context
	cancelHandle context.CancelFunc
	g            sync.WaitGroup

	started      atomic.Bool
	visibilityMs atomic.Int64
	// available is the credit handed to Send minus the deliveries received.
	// Credit queued but not yet sent does not count: the sidecar cannot
	// have used it. It is added just before Send, so a delivery the sidecar
	// sends against that credit is never seen before it is counted.
	available atomic.Int64

	wake     chan struct{} // cap 1: something was queued
	closeReq chan struct{} // closed by finish: flush, CloseSend, exit
	broken   chan struct{} // closed by fail

	waiting waitingLeases // deliveries received, not yet started by a worker

	mu       sync.Mutex
	dead     bool  // stream broke or was finished: drop settlements
	err      error // why it broke
	noCredit bool  // draining: settle without returning credit
	pending  outbox
}

// outbox is what the sender has yet to send. Values, not protos.
type outbox struct {
	settles []settlement
	extends []deliveryRef
	credit  uint32
}

func (o *outbox) empty() bool { return len(o.settles) == 0 && len(o.extends) == 0 && o.credit == 0 }

// open starts a stream and sends Start with the initial credit.
func (sub *subscriber) open(ctx context.Context) (*session, error) {
	// The stream outlives ctx (it carries the drain), but opening it must
	// not: a sidecar that never answers would hold shutdown.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopWatch := context.AfterFunc(ctx, cancel)
	defer stopWatch()
	// The receive limit is set on the call (it overrides a dial-wide
	// default) and stated in Start, so the sidecar sizes frames below it.
	stream, err := sub.client.sub.Subscribe(sctx, grpc.MaxCallRecvMsgSize(sub.cfg.maxReceive))
	if err != nil {
		cancel()
		return nil, err
	}
	credit := sub.cfg.credit()
	first := &spoolv1.SubscribeRequest{
		Start: &spoolv1.Start{
			Group:  sub.group,
			Topics: sub.topics,
			// The bound on outstanding deliveries is what runs plus what is
			// prefetched; the credit below enforces the same number.
			MaxInFlight:     uint32(credit),
			ConsumerName:    sub.cfg.consumerName,
			AppVersion:      sub.cfg.appVersion,
			MaxReceiveBytes: uint32(sub.cfg.maxReceive),
		},
		Credit: uint32(credit),
	}
	if err := stream.Send(first); err != nil {
		if errors.Is(err, io.EOF) { // the real error is the stream's status
			_, err = stream.Recv()
		}
		cancel()
		return nil, err
	}
	// From here the stream outlives ctx: it carries the drain. Stop watching
	// ctx before the receiver starts, or a ctx cancelled once a handler has
	// started (a delivery can arrive at once) would cut the stream under the
	// drain. If ctx has ended already, the stream is being cancelled.
	if !stopWatch() {
		cancel()
		return nil, ctx.Err()
	}
	s := &session{
		sub: sub, stream: stream, cancelStream: cancel,
		wake: make(chan struct{}, 1), closeReq: make(chan struct{}), broken: make(chan struct{}),
	}
	s.handlerCtx, s.cancelHandle = context.WithCancel(sub.handlerBase)
	s.available.Store(int64(credit))
	// Counted before the receiver starts: a delivery of this stream can be
	// handled and acked at once, and whoever reads the stats after the ack
	// must see the stream that carried it.
	if sub.opened++; sub.opened > 1 {
		sub.stats.Reconnects.Add(1)
	}
	s.g.Go(s.recvLoop)
	s.g.Go(s.sendLoop)
	return s, nil
}

// serve waits until the stream breaks (its error) or ctx ends (nil).
func (s *session) serve(ctx context.Context) error {
	select {
	case <-s.broken:
		return s.err
	case <-ctx.Done():
		return nil
	}
}

// fail marks the stream broken: settlements are dropped from now on, running
// handlers lose their lease (ctx cancelled) and both goroutines end.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	s.dead, s.err = true, err
	s.mu.Unlock()
	s.waiting.stop()
	close(s.broken)
	s.cancelHandle()
	s.cancelStream()
}

// close ends a broken session and waits for its goroutines.
func (s *session) close() {
	s.fail(errors.New("closed"))
	s.g.Wait()
}

// finish flushes what is queued, half-closes the stream, waits (bounded) for
// the sidecar to end it, then closes.
func (s *session) finish() {
	close(s.closeReq)
	if !waitClosed(s.broken, closeStreamTimeout) {
		s.sub.log.Warn("spool: the sidecar did not end the stream after the drain; closing it", "timeout", closeStreamTimeout)
	}
	s.close()
}

func (s *session) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

func (s *session) stopCredit() {
	s.mu.Lock()
	s.noCredit = true
	s.pending.credit = 0
	s.mu.Unlock()
}

// settle queues a handler's outcome and returns its credit.
func (s *session) settle(st settlement) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		s.sub.stats.Dropped.Add(1)
		return
	}
	if st.returnCredit && !s.noCredit {
		s.pending.credit++
	}
	s.pending.settles = append(s.pending.settles, st)
	// An extension of the same delivery still queued would go in the same
	// frame, and the sidecar applies settlements first: it would refuse the
	// extension (NOT_IN_FLIGHT, docs/protocol.md). Extensions are few: the
	// queue is short.
	s.pending.extends = slices.DeleteFunc(s.pending.extends, func(r deliveryRef) bool { return r == st.ref })
	s.mu.Unlock()
	s.notify()
	switch st.outcome {
	case spoolv1.Outcome_OUTCOME_ACK:
		s.sub.stats.Acked.Add(1)
	case spoolv1.Outcome_OUTCOME_RETRY:
		s.sub.stats.Retried.Add(1)
	case spoolv1.Outcome_OUTCOME_DEAD_LETTER:
		s.sub.stats.DeadLettered.Add(1)
	case spoolv1.Outcome_OUTCOME_RELEASE:
		s.sub.stats.Released.Add(1)
	}
}

// release hands back a delivery that was never started, without credit.
func (s *session) release(d *spoolv1.Delivery) {
	s.settle(settlement{ref: refOf(d), outcome: spoolv1.Outcome_OUTCOME_RELEASE})
}

// extend queues a lease extension (extend_by_ms 0: the visibility timeout).
func (s *session) extend(ref deliveryRef) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	s.pending.extends = append(s.pending.extends, ref)
	s.mu.Unlock()
	s.sub.stats.Extended.Add(1)
	s.notify()
}

func (s *session) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *session) recvLoop() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			switch {
			case errors.Is(err, io.EOF):
				err = errors.New("the sidecar ended the stream")
			case frameTooLarge(err):
				err = fmt.Errorf("%w: %w", errFrameTooLarge, err)
			}
			s.fail(err)
			return
		}
		if st := resp.GetStarted(); st != nil {
			s.visibilityMs.Store(int64(st.GetVisibilityTimeoutMs()))
			s.started.Store(true)
		}
		for _, se := range resp.GetSettleErrors() {
			s.sub.stats.SettleErrors.Add(1)
			r := se.GetRef()
			s.sub.log.Warn("spool: the sidecar rejected a settlement (the message may be redelivered; handlers should be idempotent)",
				"reason", se.GetReason(), "message", se.GetMessage(),
				"topic", r.GetTopic(), "partition", r.GetPartition(), "offset", r.GetOffset(), "fencing_token", r.GetFencingToken())
		}
		ds := resp.GetDeliveries()
		s.sub.stats.Delivered.Add(int64(len(ds)))
		// The sidecar sent this frame against the credit it had then: take
		// it for the whole frame before any delivery reaches a worker, whose
		// settlement would return credit the sidecar had not seen.
		within := s.takeCredit(len(ds))
		for _, d := range ds[within:] {
			s.sub.log.Warn("spool: the sidecar sent more deliveries than the credit granted; handing the excess back",
				"topic", d.GetTopic(), "partition", d.GetPartition(), "offset", d.GetOffset())
			s.release(d)
		}
		ds = ds[:within]
		// Their leases run from now: keep them while they wait for a worker.
		refs := make([]deliveryRef, len(ds))
		var deadline int64 // the earliest
		for i, d := range ds {
			refs[i] = refOf(d)
			if dl := d.GetLeaseDeadlineMs(); dl > 0 && (deadline == 0 || dl < deadline) {
				deadline = dl
			}
		}
		f := s.waiting.add(s, refs, deadline)
		for i, d := range ds {
			// The drain may start while this frame is handed over: what
			// is left of it goes back now, not after the running handlers.
			if s.sub.draining.Load() {
				s.waiting.take(f, i)
				s.release(d)
				continue
			}
			select {
			case s.sub.work <- workItem{s: s, d: d, wait: f, i: i}:
			case <-s.broken:
				return
			}
		}
	}
}

// takeCredit takes credit for n deliveries received in one frame and returns
// how many of them it covers; the rest were sent beyond the credit granted.
func (s *session) takeCredit(n int) int {
	for {
		a := s.available.Load()
		k := coveredByCredit(a, n)
		if s.available.CompareAndSwap(a, a-int64(k)) {
			return k
		}
	}
}

// coveredByCredit is how many of n deliveries an available credit covers.
func coveredByCredit(available int64, n int) int {
	return int(min(max(available, 0), int64(n)))
}

func (s *session) sendLoop() {
	var cur outbox
	closing := false
	for {
		if !closing {
			select {
			case <-s.wake:
			case <-s.closeReq:
				closing = true
			case <-s.broken:
				return
			}
		}
		// One yield lets handlers finishing right now join this frame:
		// under load frames carry many settlements, when idle the frame
		// still leaves at once.
		runtime.Gosched()
		for {
			s.mu.Lock()
			if s.dead {
				s.mu.Unlock()
				return
			}
			cur.settles, cur.extends, cur.credit = cur.settles[:0], cur.extends[:0], 0
			s.pending, cur = cur, s.pending
			s.mu.Unlock()
			if cur.empty() {
				break
			}
			s.available.Add(int64(cur.credit)) // before Send: see available
			if err := s.stream.Send(buildFrame(&cur)); err != nil {
				if errors.Is(err, io.EOF) {
					err = fmt.Errorf("send: the stream ended (%w)", err)
				}
				s.fail(err)
				return
			}
		}
		if closing {
			_ = s.stream.CloseSend()
			return
		}
	}
}

// buildFrame turns an outbox into one frame. The protos are allocated in
// slabs per frame, not per message; they are never reused after Send, as
// stats handlers may read a sent message lazily.
func buildFrame(o *outbox) *spoolv1.SubscribeRequest {
	req := &spoolv1.SubscribeRequest{Credit: o.credit}
	nAck := 0
	for i := range o.settles {
		if o.settles[i].outcome == spoolv1.Outcome_OUTCOME_ACK {
			nAck++
		}
	}
	nRefs := len(o.settles) + len(o.extends)
	refs := make([]spoolv1.DeliveryRef, nRefs)
	ri := 0
	ref := func(r deliveryRef) *spoolv1.DeliveryRef {
		p := &refs[ri]
		ri++
		p.Topic, p.Partition, p.Offset, p.FencingToken = r.topic, r.partition, r.offset, r.token
		return p
	}
	if nAck > 0 {
		acks := make([]spoolv1.Ack, nAck)
		req.Acks = make([]*spoolv1.Ack, 0, nAck)
		for i := range o.settles {
			if o.settles[i].outcome == spoolv1.Outcome_OUTCOME_ACK {
				a := &acks[len(req.Acks)]
				a.Ref = ref(o.settles[i].ref)
				req.Acks = append(req.Acks, a)
			}
		}
	}
	if nNack := len(o.settles) - nAck; nNack > 0 {
		nacks := make([]spoolv1.Nack, nNack)
		req.Nacks = make([]*spoolv1.Nack, 0, nNack)
		for i := range o.settles {
			st := &o.settles[i]
			if st.outcome == spoolv1.Outcome_OUTCOME_ACK {
				continue
			}
			n := &nacks[len(req.Nacks)]
			n.Ref, n.Outcome, n.RetryAfterMs = ref(st.ref), st.outcome, st.retryAfter
			n.Reason, n.Error, n.Downstream = st.reason, st.errText, st.downstream
			req.Nacks = append(req.Nacks, n)
		}
	}
	if len(o.extends) > 0 {
		exts := make([]spoolv1.Extend, len(o.extends))
		req.Extends = make([]*spoolv1.Extend, len(o.extends))
		for i, r := range o.extends {
			exts[i].Ref = ref(r)
			req.Extends[i] = &exts[i]
		}
	}
	return req
}

// waitingLeases extends the leases of deliveries received ahead (prefetch)
// while they wait for a worker: at 2/3 of the lease, then every 2/3 of the
// visibility timeout, like a running delivery's leaseKeeper. It watches
// frames, not deliveries: a frame's deliveries arrive together with leases
// that end together, so one entry per frame holds them, with which of them
// no worker has taken yet; a worker taking one (take) marks it, and the
// frame goes when its last is taken. One timer for all of them, armed for
// the earliest: adding a frame due earlier than the timer re-arms it,
// taking does not (the timer may then fire with nothing due, and re-arms).
// Only fire looks at every frame waiting. A worker takes a delivery before
// its own keeper starts.
type waitingLeases struct {
	mu     sync.Mutex // taken before session.mu (fire calls session.extend with it held), never after
	frames map[*waitFrame]struct{}
	every  time.Duration
	s      *session
	timer  *time.Timer
	armed  time.Time // when the timer fires; zero: not armed
}

// waitFrame is the deliveries of one frame handed to the workers.
type waitFrame struct {
	refs  []deliveryRef
	taken []bool // by a worker (or handed back)
	left  int    // not taken
	due   time.Time
}

// add watches the leases of refs, deliveries of one frame, the earliest of
// whose lease deadlines is deadlineMs (0: none given). It returns nil when
// there is nothing to extend (no lease information); take accepts that.
func (w *waitingLeases) add(s *session, refs []deliveryRef, deadlineMs int64) *waitFrame {
	if len(refs) == 0 {
		return nil
	}
	now := time.Now() // one reading of the clock per frame: it is not free on every machine
	vis := time.Duration(s.visibilityMs.Load()) * time.Millisecond
	var at time.Duration
	switch {
	case deadlineMs > 0:
		lease := time.UnixMilli(deadlineMs).Sub(now)
		at = max(lease*2/3, 0)
		if vis <= 0 {
			vis = lease
		}
	case vis > 0:
		at = vis * 2 / 3
	default:
		return nil // no lease information: nothing to extend
	}
	f := &waitFrame{refs: refs, taken: make([]bool, len(refs)), left: len(refs), due: now.Add(at)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.frames == nil {
		w.frames = map[*waitFrame]struct{}{}
		w.s = s
		w.timer = time.AfterFunc(time.Hour, w.fire)
		w.armed = time.Time{}
	}
	w.every = max(vis*2/3, minExtendEvery)
	w.frames[f] = struct{}{}
	if w.armed.IsZero() || f.due.Before(w.armed) {
		w.armed = f.due
		w.timer.Reset(max(at, 0))
	}
	return f
}

// take ends the watch of delivery i of f (a worker's keeper takes over its
// lease, or it is handed back). f may be nil (add watched nothing).
func (w *waitingLeases) take(f *waitFrame, i int) {
	if f == nil {
		return
	}
	w.mu.Lock()
	if !f.taken[i] {
		f.taken[i] = true
		if f.left--; f.left == 0 && w.frames != nil {
			delete(w.frames, f)
		}
	}
	w.mu.Unlock()
}

// stop ends the timer (the session is closing).
func (w *waitingLeases) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	w.frames = nil
}

// armLocked sets the timer for the earliest extension due, if any.
func (w *waitingLeases) armLocked() {
	w.armed = time.Time{}
	if w.timer == nil || len(w.frames) == 0 {
		return
	}
	for f := range w.frames {
		if w.armed.IsZero() || f.due.Before(w.armed) {
			w.armed = f.due
		}
	}
	w.timer.Reset(max(time.Until(w.armed), 0))
}

// fire queues the extensions due. It queues them with w.mu held: a worker
// taking a delivery (take) then either finds its extension already queued,
// ahead of the delivery's settlement in the stream, or takes it before it
// is queued — never an extension sent after the settlement (the sidecar
// would answer it with a settle error).
func (w *waitingLeases) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for f := range w.frames {
		if f.due.After(now) {
			continue
		}
		f.due = now.Add(w.every)
		for i, ref := range f.refs {
			if !f.taken[i] {
				w.s.extend(ref)
			}
		}
	}
	w.armLocked()
}
