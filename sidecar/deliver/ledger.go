package deliver

import (
	"context"
	"errors"
	"time"

	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// RedisPolicy says what delivery does while the ledger is unavailable.
type RedisPolicy int

const (
	// PolicyPause delivers nothing until the ledger is back: nothing is lost,
	// nothing is handled twice because of the outage.
	PolicyPause RedisPolicy = iota
	// PolicyDeliver goes on without dedupe (at-least-once); every such
	// delivery is counted in spool_undeduped_deliveries_total.
	PolicyDeliver
)

// Ledger call budget and retry pace (the ledger's breaker fails fast while open).
const (
	ledgerTimeout   = time.Second
	ledgerRetryWait = 500 * time.Millisecond
	// maxLedgerBacklog bounds settlements waiting to be written to the
	// ledger while it is unavailable (limit ledger_max_backlog); beyond it
	// the oldest are dropped and counted: a dropped Complete can only cause
	// a redelivery, never a loss.
	maxLedgerBacklog = 100_000
)

// ledgerOps are the ledger writes of one subscription waiting to be flushed.
type ledgerOps struct {
	complete []ledger.Finish
	release  []ledger.Release
	dead     []ledger.Finish
}

func (o *ledgerOps) len() int { return len(o.complete) + len(o.release) + len(o.dead) }

// maxClaimsInFlight bounds ledger claims outstanding per group: while one
// batch is at Redis the loop prepares and sends the next, so the loop and
// Redis work at the same time instead of taking turns.
const maxClaimsInFlight = 2

// claimJob is one batch of candidates of one subscription at the ledger.
type claimJob struct {
	s     *sub
	cands []candidate
	now   time.Time
	res   []ledger.ClaimResult
	err   error
}

// claim is where the ledger checks every delivery before it goes out, in
// one batch per subscription, asynchronously: the candidates' credit is
// reserved now and they are sent (or not) when the answer comes back
// (applyClaim). Granted ones get the ledger's fencing token and attempt
// number; one already done (or dead) is acked without reaching the app (a
// dedupe hit); one held by a live lease elsewhere waits for that lease; one
// whose attempts are used up goes to the dead-letter topic.
func (g *Group) claim(now time.Time, cands []candidate) {
	for _, s := range g.subs {
		var mine []candidate
		for _, cd := range cands {
			if cd.s == s {
				mine = append(mine, cd)
			}
		}
		if len(mine) == 0 {
			continue
		}
		if now.Before(g.ledgerRetryAt) && s.cfg.RedisPolicy == PolicyPause {
			for _, cd := range mine {
				_ = cd.p.tr.Defer(now, cd.d.Offset, cd.d.Token, g.ledgerRetryAt)
			}
			continue
		}
		for _, cd := range mine {
			cd.c.credit--
			cd.c.reserved++
			if cd.probe {
				s.probePending = true
			}
		}
		g.claimsInFlight++
		g.claims <- &claimJob{s: s, cands: mine, now: now} // capacity covers every job in flight
	}
}

// runClaimer sends claim batches to the ledger, one at a time, in order.
func (g *Group) runClaimer() {
	for j := range g.claims {
		claims := make([]ledger.Claim, len(j.cands))
		for i, cd := range j.cands {
			claims[i] = ledger.Claim{ID: string(cd.d.Value.ID), Lease: cd.d.Deadline}
		}
		ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
		j.res, j.err = g.cfg.Ledger.Claim(ctx, g.cfg.Name, g.cfg.Owner, j.now, j.s.cfg.DedupeTTL, claims)
		cancel()
		if j.err == nil && len(j.res) != len(j.cands) {
			j.err = errors.New("ledger answered a claim batch with the wrong number of results")
		}
		g.claimDone <- j // capacity covers every job in flight
	}
}

// applyClaim applies the ledger's answer to one batch and sends what it
// granted; credit of candidates not sent goes back to their consumers.
func (g *Group) applyClaim(now time.Time, j *claimJob) {
	g.claimsInFlight--
	s := j.s
	s.probePending = false
	for _, cd := range j.cands {
		cd.c.reserved--
		cd.c.credit++ // taken again below for each candidate sent
	}
	var granted []candidate
	if j.err != nil {
		granted = g.ledgerDown(now, s, j.cands, j.err)
	} else {
		granted = g.admitted(now, s, j.cands, j.res)
	}
	out := granted[:0]
	for _, cd := range granted {
		if cd.c.closed || g.draining {
			// Its stream ended (or spoold began draining) while the ledger
			// answered: back, uncounted.
			if cd.p.tr.Release(now, cd.d.Offset, cd.d.Token, false) == nil {
				g.ledgerRelease(s, sent{id: string(cd.d.Value.ID), wire: cd.wire}, "", true)
			}
			continue
		}
		cd.c.credit--
		out = append(out, cd)
	}
	g.send(now, out)
}

// admitted applies claim results and returns the granted candidates.
func (g *Group) admitted(now time.Time, s *sub, cands []candidate, res []ledger.ClaimResult) []candidate {
	out := make([]candidate, 0, len(cands))
	for i, r := range res {
		cd := cands[i]
		off, tok := cd.d.Offset, cd.d.Token
		switch r.Status {
		case ledger.Granted:
			if r.Attempts > s.cfg.Tracker.MaxAttempts {
				// Attempts made before a restart or failover used it up.
				_ = cd.p.tr.DeadLetter(now, off, tok, tracker.ReasonMaxAttempts)
				continue
			}
			cd.wire, cd.attempt, cd.lastError = r.Token, max(r.Attempts, 1), r.LastError
			cd.p.setWire(off, r.Token)
			out = append(out, cd)
		case ledger.Done, ledger.Dead:
			_ = cd.p.tr.Ack(now, off, tok)
			delete(cd.p.history, off)
			s.dedupeHits.Inc()
		case ledger.Busy:
			_ = cd.p.tr.Defer(now, off, tok, r.BusyUntil)
		}
	}
	return out
}

// ledgerDown applies the subscription's policy to candidates the ledger
// could not check.
func (g *Group) ledgerDown(now time.Time, s *sub, cands []candidate, err error) []candidate {
	if s.cfg.RedisPolicy == PolicyDeliver {
		s.undeduped.Add(float64(len(cands)))
		for i := range cands {
			cands[i].wire, cands[i].attempt = cands[i].d.Token, cands[i].d.Attempt
		}
		return cands
	}
	if now.After(g.ledgerRetryAt) {
		g.log.Warn("ledger unavailable: pausing delivery (redis_unavailable: pause); nothing is lost", "topic", s.cfg.Topic, "err", err)
	}
	g.ledgerRetryAt = now.Add(ledgerRetryWait)
	for _, cd := range cands {
		_ = cd.p.tr.Defer(now, cd.d.Offset, cd.d.Token, g.ledgerRetryAt)
	}
	return nil
}

// ledgerBatch is one subscription's settlements handed to the ledger writer.
type ledgerBatch struct {
	s   *sub
	ops ledgerOps
}

// ledgerWriterQueue bounds batches waiting for the ledger writer; while it
// is full (Redis slow or down), settlements wait in the loop, bounded by
// maxLedgerBacklog.
const ledgerWriterQueue = 8

// flushLedger hands the settlements of every subscription to the ledger
// writer (runLedgerWriter), so that the loop never waits for Redis to
// record an ack. When the writer is busy they stay queued here (bounded).
func (g *Group) flushLedger() {
	if g.cfg.Ledger == nil {
		return
	}
	for _, s := range g.subs {
		o := &s.ledger
		if o.len() == 0 {
			continue
		}
		select {
		case g.ledgerWrites <- ledgerBatch{s: s, ops: *o}:
			s.ledger = ledgerOps{}
			continue
		default:
		}
		if n := o.len(); n > maxLedgerBacklog {
			drop := n - maxLedgerBacklog
			g.log.Warn("ledger backlog full: dropping the oldest settlements (they may be redelivered later)", "topic", s.cfg.Topic, "dropped", drop)
			s.ledgerDropped.Add(float64(drop))
			o.complete = trimOldest(o.complete, &drop)
			o.release = trimOldest(o.release, &drop)
			o.dead = trimOldest(o.dead, &drop)
		}
	}
}

// runLedgerWriter writes settlement batches to the ledger in the order the
// loop handed them over. A failed write is retried (Redis down: the
// breaker fails fast, so this waits ledgerRetryWait between tries) until it
// succeeds or ctx ends; the loop meanwhile queues new settlements, bounded.
// It returns when the loop closes g.ledgerWrites (after the last batch) or
// ctx ends.
func (g *Group) runLedgerWriter(ctx context.Context) {
	for b := range g.ledgerWrites {
		if ctx.Err() != nil {
			return
		}
		g.writeLedger(ctx, b)
	}
}

func (g *Group) writeLedger(ctx context.Context, b ledgerBatch) {
	l, name, ttl := g.cfg.Ledger, g.cfg.Name, b.s.cfg.DedupeTTL
	steps := []func(context.Context) error{
		func(c context.Context) error { return l.Complete(c, name, ttl, b.ops.complete) },
		func(c context.Context) error { return l.Release(c, name, ttl, b.ops.release) },
		func(c context.Context) error { return l.Dead(c, name, ttl, b.ops.dead) },
	}
	sizes := []int{len(b.ops.complete), len(b.ops.release), len(b.ops.dead)}
	for i, step := range steps {
		for sizes[i] > 0 {
			c, cancel := context.WithTimeout(ctx, ledgerTimeout)
			err := step(c)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			select {
			case <-time.After(ledgerRetryWait):
			case <-ctx.Done():
				return
			}
		}
	}
}

// finishLedger hands the last settlements to the writer and gives it a
// bounded time to write what it holds, then stops it.
func (g *Group) finishLedger(stopWriter func(), writerDone <-chan struct{}) {
	deadline := time.After(2 * ledgerTimeout)
	for _, s := range g.subs {
		if s.ledger.len() == 0 || g.cfg.Ledger == nil {
			continue
		}
		select {
		case g.ledgerWrites <- ledgerBatch{s: s, ops: s.ledger}:
			s.ledger = ledgerOps{}
		case <-deadline:
		}
	}
	close(g.ledgerWrites) // the loop has ended: nothing else sends
	select {
	case <-writerDone:
	case <-deadline:
		g.log.Warn("ledger writes not finished at shutdown; those messages may be redelivered after the restart")
	}
	stopWriter()
	<-writerDone
}

func trimOldest[T any](a []T, n *int) []T {
	k := min(*n, len(a))
	*n -= k
	return append(a[:0], a[k:]...)
}

// setWire remembers the fencing token the app saw for an offset, for the
// ledger write that follows a dead letter.
func (p *part) setWire(offset int64, token uint64) {
	if p.wire == nil {
		p.wire = map[int64]uint64{}
	}
	p.wire[offset] = token
}

func (p *part) takeWire(offset int64) uint64 {
	t := p.wire[offset]
	delete(p.wire, offset)
	return t
}
