package deliver

import (
	"log/slog"
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
func (m *machine) claim(now time.Time, cands []candidate) {
	for _, s := range m.subs {
		// One allocation of the right size: a candidate is ~300 bytes, and
		// growing the batch by appends was a sixth of all bytes spoold
		// allocated at a steady rate (heap profile of steady at 5k/s).
		n := 0
		for i := range cands {
			if cands[i].s == s {
				n++
			}
		}
		if n == 0 {
			continue
		}
		mine := make([]candidate, 0, n)
		for i := range cands {
			if cands[i].s == s {
				mine = append(mine, cands[i])
			}
		}
		if now.Before(m.ledgerRetryAt) && s.cfg.RedisPolicy == PolicyPause {
			for _, cd := range mine {
				_ = cd.p.tr.Defer(now, cd.d.Offset, cd.d.Token, m.ledgerRetryAt)
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
		m.claimsInFlight++
		m.emit(action{kind: actClaim, claim: &claimJob{s: s, cands: mine, now: now}})
	}
}

// claimed applies the ledger's answer to one batch (an actClaim) and sends
// what it granted; credit of candidates not sent goes back to their
// consumers.
func (m *machine) claimed(now time.Time, j *claimJob) {
	m.claimsInFlight--
	// The answer may come after the session ran out (the process stood
	// still, or the ledger was slow): fence first, so that a stopped
	// partition's grants go back below instead of to the app.
	m.selfFence(now)
	s := j.s
	s.probePending = false
	for _, cd := range j.cands {
		cd.c.reserved--
		cd.c.credit++ // taken again below for each candidate sent
	}
	var granted []candidate
	if j.err != nil {
		granted = m.ledgerDown(now, s, j.cands, j.err)
	} else {
		if !s.ledgerDownSince.IsZero() {
			m.note(slog.LevelInfo, "ledger available again: delivery with dedupe resumes", "topic", s.cfg.Topic, "down_for", now.Sub(s.ledgerDownSince).Round(time.Millisecond))
			s.ledgerDownSince = time.Time{}
		}
		granted = m.admitted(now, s, j.cands, j.res)
	}
	out := granted[:0]
	for _, cd := range granted {
		if m.cluster && cd.inc != cd.p.inc {
			// Its partition stopped while the ledger answered: hand the
			// lease back; the old tracker is gone.
			m.ledgerRelease(s, sent{id: string(cd.d.Value.ID), wire: cd.wire}, "", true)
			continue
		}
		if cd.c.closed || m.draining || !now.Before(cd.d.Deadline) || !m.delivering(cd.p) {
			// Its stream ended (or spoold began draining, or its lease ran
			// out) while the ledger answered: back, uncounted. If the
			// tracker already ended the lease, that attempt counted there,
			// and the ledger's next claim takes the entry over counting it
			// too: both agree.
			if cd.p.tr.Release(now, cd.d.Offset, cd.d.Token, false) == nil {
				m.ledgerRelease(s, sent{id: string(cd.d.Value.ID), wire: cd.wire}, "", true)
			}
			continue
		}
		cd.c.credit--
		out = append(out, cd)
	}
	m.send(now, out)
}

// admitted applies claim results and returns the granted candidates, in
// place of cands (the batch is the claim's own, not used after its answer).
func (m *machine) admitted(now time.Time, s *sub, cands []candidate, res []ledger.ClaimResult) []candidate {
	out := cands[:0]
	for i, r := range res {
		cd := cands[i]
		off, tok := cd.d.Offset, cd.d.Token
		switch r.Status {
		case ledger.Granted:
			if r.Attempts > s.cfg.Tracker.MaxAttempts {
				// Attempts made before a restart or failover used it up. The
				// ledger entry is now held under this grant's token: the dead
				// write must carry it.
				cd.p.setWire(off, r.Token)
				_ = cd.p.tr.DeadLetter(now, off, tok, tracker.ReasonMaxAttempts)
				continue
			}
			cd.wire, cd.attempt, cd.lastError = r.Token, max(r.Attempts, 1), r.LastError
			cd.p.setWire(off, r.Token)
			out = append(out, cd)
		case ledger.Done, ledger.Dead:
			_ = cd.p.tr.Ack(now, off, tok)
			delete(cd.p.history, off)
			s.stats[statDedupeHits]++
		case ledger.Busy:
			_ = cd.p.tr.Defer(now, off, tok, r.BusyUntil)
		}
	}
	return out
}

// ledgerDown applies the subscription's policy to candidates the ledger
// could not check.
func (m *machine) ledgerDown(now time.Time, s *sub, cands []candidate, err error) []candidate {
	// Log the outage once, when it starts (claimed logs its end), not once
	// per retry.
	first := s.ledgerDownSince.IsZero()
	if first {
		s.ledgerDownSince = now
	}
	if s.cfg.RedisPolicy == PolicyDeliver {
		if first {
			m.note(slog.LevelWarn, "ledger unavailable: delivering without dedupe (redis_unavailable: deliver); duplicates are counted in spool_undeduped_deliveries_total", "topic", s.cfg.Topic, "err", err)
		}
		s.stats[statUndeduped] += float64(len(cands))
		for i := range cands {
			cands[i].wire, cands[i].attempt = cands[i].d.Token, cands[i].d.Attempt
		}
		return cands
	}
	if first {
		m.note(slog.LevelWarn, "ledger unavailable: pausing delivery (redis_unavailable: pause); nothing is lost", "topic", s.cfg.Topic, "err", err)
	}
	m.ledgerRetryAt = now.Add(ledgerRetryWait)
	for _, cd := range cands {
		_ = cd.p.tr.Defer(now, cd.d.Offset, cd.d.Token, m.ledgerRetryAt)
	}
	return nil
}

// flushLedger hands the settlements queued by every subscription to the
// ledger pipeline as one actLedgerWrite each. It runs before any claim is
// emitted, so that a settlement always precedes, in the pipeline, a later
// claim of the same message.
func (m *machine) flushLedger() {
	if m.cfg.Ledger == nil {
		return
	}
	for _, s := range m.subs {
		if s.ledger.len() == 0 {
			continue
		}
		m.emit(action{kind: actLedgerWrite, s: s, writes: s.ledger})
		s.ledger = ledgerOps{}
	}
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
