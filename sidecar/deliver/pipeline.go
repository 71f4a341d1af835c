package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/sidecar/ledger"
)

// mailbox passes items to one goroutine without ever blocking the sender:
// a mutex-guarded slice plus a capacity-1 signal channel (a signal already
// pending is enough). Its safety rests on nothing but the mutex: any
// goroutine may put — the engine's appender, a callback run synchronously
// on the receiver's own goroutine, the ledger pipeline — and none waits.
type mailbox[T any] struct {
	mu     sync.Mutex
	items  []T
	signal chan struct{}
}

func newMailbox[T any]() *mailbox[T] { return &mailbox[T]{signal: make(chan struct{}, 1)} }

func (b *mailbox[T]) put(x T) {
	b.mu.Lock()
	b.items = append(b.items, x)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// take moves every queued item to dst.
func (b *mailbox[T]) take(dst []T) []T {
	b.mu.Lock()
	dst = append(dst, b.items...)
	clear(b.items)
	b.items = b.items[:0]
	b.mu.Unlock()
	return dst
}

// ledgerOp is one entry of the ledger pipeline: a claim batch or a batch of
// settlement writes, in the order the machine emitted them.
type ledgerOp struct {
	claim *claimJob
	s     *sub
	ops   ledgerOps
}

// errSettlementAhead answers a claim that was not sent because a
// settlement of one of its messages, ahead of it in the pipeline, cannot be
// written (the ledger fails): the claim must not overtake it (it would
// count an attempt or re-grant a message that is done).
var errSettlementAhead = fmt.Errorf("%w: an earlier settlement is not written yet", ledger.ErrUnavailable)

// pipeline carries out a group's ledger traffic in the order the machine
// emitted it, as far as order matters: a settlement (Complete, Release,
// Dead) of a message is in Redis before any later claim of that message.
//
// Two goroutines, so that a claim's round trip overlaps the round trips of
// settlements of other messages (taking turns cost e2e-ledger a fifth of
// its throughput): run, the dispatcher, sends claims itself, one at a time
// in order, and hands settlement writes to the writer (runWriter), which
// writes them first-in first-out. The dispatcher counts the message ids of
// writes handed over and not yet written (pending); a claim that names one
// of them waits until it is written, or, while the writer cannot write
// (the ledger fails), is answered errSettlementAhead without reaching the
// ledger (the subscription's redis_unavailable policy then decides). A
// failed write is kept and retried every ledgerRetryWait, later writes
// queue behind it, at most maxLedgerBacklog (the oldest are dropped and
// counted: a dropped write can only cause a redelivery, never a loss).
//
// The writer gathers settlements for up to writeDelay before it writes
// them, so that at a moderate rate one script call carries the acks of
// several frames instead of each frame's few (the call, not the message,
// is most of a small batch's cost, in spoold and in Redis). It writes at
// once when it holds ledgerWriteBatch messages, when the dispatcher waits
// for one of them (a claim of a message whose settlement is gathered:
// hurry), and when the loop ends.
type pipeline struct {
	led     ledger.Ledger
	group   string
	owner   string
	log     *slog.Logger
	in      *mailbox[ledgerOp]
	answers func(*claimJob) // must not block
	// writeDelay is how long the writer may gather settlements before
	// writing them (GroupConfig.LedgerWriteDelay; 0: at once).
	writeDelay time.Duration

	// Dispatcher state.
	queue   []ledgerOp
	pending map[string]int // ids in writes handed to the writer, not yet written or dropped
	doneBuf [][]string

	// Between the dispatcher and the writer.
	writes  *mailbox[ledgerOp]
	written *mailbox[[]string] // ids of writes finished (written or dropped)
	failing atomic.Bool        // the writer holds a write it could not write
	hurry   atomic.Bool        // the dispatcher waits for a write: no gathering

	// Writer state.
	held        []ledgerOp // settlement writes not yet written, oldest first
	retryAt     time.Time
	gathered    []ledgerOp // handed over, waiting for the write delay
	gatherItems int        // messages in gathered
	gatherSince time.Time  // when the oldest of gathered was taken
}

// ledgerWriteBatch is how many gathered settlements make the writer write
// without waiting out the write delay.
const ledgerWriteBatch = 256

// run dispatches until finish is closed (the loop has ended: what is
// queued is written within ctx) or ctx ends. It owns the writer goroutine.
func (pl *pipeline) run(ctx context.Context, finish <-chan struct{}) {
	pl.pending = map[string]int{}
	pl.writes, pl.written = newMailbox[ledgerOp](), newMailbox[[]string]()
	writerFinish, writerDone := make(chan struct{}), make(chan struct{})
	go func() { // owned: awaited below
		defer close(writerDone)
		pl.runWriter(ctx, writerFinish)
	}()
	defer func() { <-writerDone }()
	defer close(writerFinish)
	for {
		select {
		case <-pl.in.signal:
		case <-pl.written.signal:
			pl.collect()
			continue
		case <-finish:
			pl.step(ctx)
			return
		case <-ctx.Done():
			return
		}
		pl.step(ctx)
	}
}

// collect forgets the ids of writes the writer has finished.
func (pl *pipeline) collect() {
	pl.doneBuf = pl.written.take(pl.doneBuf[:0])
	for _, ids := range pl.doneBuf {
		for _, id := range ids {
			if pl.pending[id]--; pl.pending[id] <= 0 {
				delete(pl.pending, id)
			}
		}
	}
	clear(pl.doneBuf)
}

// step carries out what is queued, in order.
func (pl *pipeline) step(ctx context.Context) {
	pl.queue = pl.in.take(pl.queue[:0])
	for i := 0; i < len(pl.queue); i++ {
		op := pl.queue[i]
		if op.claim != nil {
			j := op.claim
			if pl.awaitSettlements(ctx, j) {
				pl.claim(ctx, j)
			} else {
				j.err = errSettlementAhead
			}
			pl.answers(j)
			continue
		}
		// Merge consecutive writes of the same subscription into one call
		// per kind.
		for i+1 < len(pl.queue) && pl.queue[i+1].claim == nil && pl.queue[i+1].s == op.s {
			i++
			op.ops.append(pl.queue[i].ops)
		}
		for _, id := range op.ops.ids(nil) {
			pl.pending[id]++
		}
		pl.writes.put(op)
	}
	clear(pl.queue)
}

// awaitSettlements waits until no write of a message of j is pending. It
// returns false when one cannot be written now (the ledger fails) or ctx
// ends.
func (pl *pipeline) awaitSettlements(ctx context.Context, j *claimJob) bool {
	for hurried := false; ; {
		pl.collect()
		if !pl.conflicts(j) {
			return true
		}
		if pl.failing.Load() {
			return false
		}
		if !hurried {
			// The write may be gathering: have it written now.
			pl.hurry.Store(true)
			select {
			case pl.writes.signal <- struct{}{}:
			default:
			}
			hurried = true
		}
		select {
		case <-pl.written.signal:
		case <-ctx.Done():
			return false
		}
	}
}

func (pl *pipeline) conflicts(j *claimJob) bool {
	if len(pl.pending) == 0 {
		return false
	}
	for i := range j.cands {
		if pl.pending[string(j.cands[i].d.Value.ID)] > 0 {
			return true
		}
	}
	return false
}

// runWriter writes settlement batches first-in first-out until finish is
// closed (then it writes what is queued, retrying within ctx) or ctx ends.
func (pl *pipeline) runWriter(ctx context.Context, finish <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var wake <-chan time.Time
		if at, ok := pl.nextWrite(); ok {
			resetTimer(timer, time.Until(at))
			wake = timer.C
		}
		force := false
		select {
		case <-pl.writes.signal:
			force = pl.hurry.Swap(false)
			pl.gather()
		case <-wake:
		case <-finish:
			pl.gather()
			pl.writeStep(ctx, true)
			for len(pl.held) > 0 && ctx.Err() == nil {
				select {
				case <-time.After(time.Until(pl.retryAt)):
				case <-ctx.Done():
				}
				pl.writeStep(ctx, true)
			}
			if n := pl.heldItems(); n > 0 {
				pl.log.Warn("ledger writes not finished at shutdown; those messages may be redelivered after the restart", "writes", n)
			}
			return
		case <-ctx.Done():
			return
		}
		pl.writeStep(ctx, force)
	}
}

// gather takes the writes handed over since the last call.
func (pl *pipeline) gather() {
	n := len(pl.gathered)
	pl.gathered = pl.writes.take(pl.gathered)
	if n == 0 && len(pl.gathered) > 0 {
		pl.gatherSince = time.Now()
	}
	for _, op := range pl.gathered[n:] {
		pl.gatherItems += op.ops.len()
	}
}

// nextWrite is when the writer has something to do without being
// signalled: retry the held writes, or write what it gathered.
func (pl *pipeline) nextWrite() (time.Time, bool) {
	var at time.Time
	if len(pl.held) > 0 {
		at = pl.retryAt
	}
	if len(pl.gathered) > 0 {
		if g := pl.gatherSince.Add(pl.writeDelay); at.IsZero() || g.Before(at) {
			at = g
		}
	}
	return at, !at.IsZero()
}

// writeStep retries held writes when due, then writes what was gathered
// if force, if it is enough or has waited the write delay, or if writes are
// held (it then queues behind them).
func (pl *pipeline) writeStep(ctx context.Context, force bool) {
	if len(pl.held) > 0 && !time.Now().Before(pl.retryAt) {
		for len(pl.held) > 0 {
			if err := pl.write(ctx, &pl.held[0]); err != nil {
				pl.retryAt = time.Now().Add(ledgerRetryWait)
				break
			}
			pl.held = pl.held[1:]
		}
	}
	due := force || len(pl.held) > 0 || pl.gatherItems >= ledgerWriteBatch ||
		!time.Now().Before(pl.gatherSince.Add(pl.writeDelay))
	if len(pl.gathered) > 0 && due {
		for i := 0; i < len(pl.gathered); i++ {
			op := pl.gathered[i]
			// Merge consecutive writes of the same subscription into one
			// call per kind (as the dispatcher does with what it finds
			// queued together).
			for i+1 < len(pl.gathered) && pl.gathered[i+1].s == op.s {
				i++
				op.ops.append(pl.gathered[i].ops)
			}
			if len(pl.held) > 0 {
				pl.hold(op)
				continue
			}
			if err := pl.write(ctx, &op); err != nil {
				pl.retryAt = time.Now().Add(ledgerRetryWait)
				pl.hold(op)
			}
		}
		clear(pl.gathered)
		pl.gathered, pl.gatherItems = pl.gathered[:0], 0
	}
	pl.failing.Store(len(pl.held) > 0)
	if len(pl.held) > 0 {
		// Wake a dispatcher waiting for a held write: its claim is answered
		// errSettlementAhead instead of waiting for the outage to end.
		pl.written.put(nil)
	}
}

func (pl *pipeline) hold(op ledgerOp) {
	pl.held = append(pl.held, op)
	if n := pl.heldItems(); n > maxLedgerBacklog {
		drop := n - maxLedgerBacklog
		pl.log.Warn("ledger backlog full: dropping the oldest settlements (they may be redelivered later)", "dropped", drop)
		for i := range pl.held {
			h := &pl.held[i]
			k := drop
			var ids []string
			h.ops.complete, ids = trimOldestIDs(h.ops.complete, &drop, ids, func(f ledger.Finish) string { return f.ID })
			h.ops.release, ids = trimOldestIDs(h.ops.release, &drop, ids, func(r ledger.Release) string { return r.ID })
			h.ops.dead, ids = trimOldestIDs(h.ops.dead, &drop, ids, func(f ledger.Finish) string { return f.ID })
			pl.finished(ids)
			h.s.metrics.ledgerDropped.Add(float64(k - drop))
			if drop == 0 {
				break
			}
		}
	}
}

func (pl *pipeline) heldItems() int {
	n := 0
	for i := range pl.held {
		n += pl.held[i].ops.len()
	}
	return n
}

func (pl *pipeline) claim(ctx context.Context, j *claimJob) {
	claims := make([]ledger.Claim, len(j.cands))
	for i, cd := range j.cands {
		claims[i] = ledger.Claim{ID: string(cd.d.Value.ID), Lease: cd.d.Deadline, Generation: cd.gen}
	}
	c, cancel := context.WithTimeout(ctx, ledgerTimeout)
	j.res, j.err = pl.led.Claim(c, pl.group, pl.owner, j.now, j.s.cfg.DedupeTTL, claims)
	cancel()
	if j.err == nil && len(j.res) != len(j.cands) {
		j.err = errors.New("ledger answered a claim batch with the wrong number of results")
	}
}

// write applies one batch of settlements: completes, releases, then dead
// writes (a release and the dead write of the same grant may share a batch:
// the dead write must come last). A step that succeeded is not repeated
// when a later one fails.
func (pl *pipeline) write(ctx context.Context, op *ledgerOp) error {
	o := &op.ops
	ttl := op.s.cfg.DedupeTTL
	call := func(f func(context.Context) error) error {
		c, cancel := context.WithTimeout(ctx, ledgerTimeout)
		defer cancel()
		return f(c)
	}
	if len(o.complete) > 0 {
		if err := call(func(c context.Context) error { return pl.led.Complete(c, pl.group, ttl, o.complete) }); err != nil {
			return err
		}
		pl.finished((&ledgerOps{complete: o.complete}).ids(nil))
		o.complete = nil
	}
	if len(o.release) > 0 {
		if err := call(func(c context.Context) error { return pl.led.Release(c, pl.group, ttl, o.release) }); err != nil {
			return err
		}
		pl.finished((&ledgerOps{release: o.release}).ids(nil))
		o.release = nil
	}
	if len(o.dead) > 0 {
		if err := call(func(c context.Context) error { return pl.led.Dead(c, pl.group, ttl, o.dead) }); err != nil {
			return err
		}
		pl.finished((&ledgerOps{dead: o.dead}).ids(nil))
		o.dead = nil
	}
	return nil
}

// finished tells the dispatcher that the writes of ids are done.
func (pl *pipeline) finished(ids []string) {
	if pl.written != nil && len(ids) > 0 {
		pl.written.put(ids)
	}
}

// ids appends the message ids of every write in o.
func (o *ledgerOps) ids(dst []string) []string {
	for _, f := range o.complete {
		dst = append(dst, f.ID)
	}
	for _, r := range o.release {
		dst = append(dst, r.ID)
	}
	for _, f := range o.dead {
		dst = append(dst, f.ID)
	}
	return dst
}

func (o *ledgerOps) append(x ledgerOps) {
	o.complete = append(o.complete, x.complete...)
	o.release = append(o.release, x.release...)
	o.dead = append(o.dead, x.dead...)
}

// trimOldestIDs drops up to *n of the oldest items of a, appending their
// ids to ids.
func trimOldestIDs[T any](a []T, n *int, ids []string, id func(T) string) ([]T, []string) {
	k := min(*n, len(a))
	*n -= k
	for _, x := range a[:k] {
		ids = append(ids, id(x))
	}
	return append(a[:0], a[k:]...), ids
}
