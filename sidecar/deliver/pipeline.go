package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
// settlement ahead of it in the pipeline is not written yet: the claim
// must not overtake it (it would count an attempt or re-grant a message
// that is done).
var errSettlementAhead = fmt.Errorf("%w: an earlier settlement is not written yet", ledger.ErrUnavailable)

// pipeline is the one goroutine that talks to the ledger for a group.
// Claims and settlement writes are carried out strictly in the order the
// machine emitted them, so a settlement of a message is in Redis before
// any later claim of it. A settlement write that fails is kept at the head
// and retried every ledgerRetryWait; claims behind it are answered
// errSettlementAhead without reaching the ledger (the subscription's
// redis_unavailable policy then decides), and later settlements queue
// behind it, at most maxLedgerBacklog (the oldest are dropped and counted:
// a dropped write can only cause a redelivery, never a loss).
type pipeline struct {
	led     ledger.Ledger
	group   string
	owner   string
	log     *slog.Logger
	in      *mailbox[ledgerOp]
	answers func(*claimJob) // must not block

	queue   []ledgerOp
	held    []ledgerOp // settlement writes not yet written, oldest first
	retryAt time.Time
}

func (pl *pipeline) run(ctx context.Context, finish <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var retry <-chan time.Time
		if len(pl.held) > 0 {
			resetTimer(timer, time.Until(pl.retryAt))
			retry = timer.C
		}
		select {
		case <-pl.in.signal:
		case <-retry:
		case <-finish:
			// The loop has ended: write what is queued, within ctx.
			pl.step(ctx)
			for len(pl.held) > 0 && ctx.Err() == nil {
				select {
				case <-time.After(time.Until(pl.retryAt)):
				case <-ctx.Done():
				}
				pl.step(ctx)
			}
			if n := pl.heldItems(); n > 0 {
				pl.log.Warn("ledger writes not finished at shutdown; those messages may be redelivered after the restart", "writes", n)
			}
			return
		case <-ctx.Done():
			return
		}
		pl.step(ctx)
	}
}

// step retries held writes when due, then carries out what is queued.
func (pl *pipeline) step(ctx context.Context) {
	if len(pl.held) > 0 && !time.Now().Before(pl.retryAt) {
		for len(pl.held) > 0 {
			if err := pl.write(ctx, pl.held[0]); err != nil {
				pl.retryAt = time.Now().Add(ledgerRetryWait)
				break
			}
			pl.held = pl.held[1:]
		}
	}
	pl.queue = pl.in.take(pl.queue[:0])
	for i := 0; i < len(pl.queue); i++ {
		op := pl.queue[i]
		if op.claim != nil {
			j := op.claim
			if len(pl.held) > 0 {
				j.err = errSettlementAhead
			} else {
				pl.claim(ctx, j)
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
		if len(pl.held) > 0 {
			pl.hold(op)
			continue
		}
		if err := pl.write(ctx, op); err != nil {
			pl.retryAt = time.Now().Add(ledgerRetryWait)
			pl.hold(op)
		}
	}
	clear(pl.queue)
}

func (pl *pipeline) hold(op ledgerOp) {
	pl.held = append(pl.held, op)
	if n := pl.heldItems(); n > maxLedgerBacklog {
		drop := n - maxLedgerBacklog
		pl.log.Warn("ledger backlog full: dropping the oldest settlements (they may be redelivered later)", "dropped", drop)
		for i := range pl.held {
			h := &pl.held[i]
			k := drop
			h.ops.complete = trimOldest(h.ops.complete, &drop)
			h.ops.release = trimOldest(h.ops.release, &drop)
			h.ops.dead = trimOldest(h.ops.dead, &drop)
			h.s.ledgerDropped.Add(float64(k - drop))
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
		claims[i] = ledger.Claim{ID: string(cd.d.Value.ID), Lease: cd.d.Deadline}
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
func (pl *pipeline) write(ctx context.Context, op ledgerOp) error {
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
		o.complete = nil
	}
	if len(o.release) > 0 {
		if err := call(func(c context.Context) error { return pl.led.Release(c, pl.group, ttl, o.release) }); err != nil {
			return err
		}
		o.release = nil
	}
	if len(o.dead) > 0 {
		if err := call(func(c context.Context) error { return pl.led.Dead(c, pl.group, ttl, o.dead) }); err != nil {
			return err
		}
		o.dead = nil
	}
	return nil
}

func (o *ledgerOps) append(x ledgerOps) {
	o.complete = append(o.complete, x.complete...)
	o.release = append(o.release, x.release...)
	o.dead = append(o.dead, x.dead...)
}

func trimOldest[T any](a []T, n *int) []T {
	k := min(*n, len(a))
	*n -= k
	return append(a[:0], a[k:]...)
}
