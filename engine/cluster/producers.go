package cluster

import (
	"container/list"

	"github.com/spoolmq/spool/engine"
)

// producerBook is the producer table's rules (cluster_dedupe.go), pure: no
// lock, no goroutine, no clock, no I/O. What it cannot know itself comes in
// as an argument: whether the leader's log still holds an entry.
// producerTable wraps it with a lock and the waiters'
// channels.
//
// Per producer it keeps the last batch applied (sequence, base offset),
// the batches proposed by this leader and not yet applied (pending, in
// sequence order), and the latest sequence it has seen proposed (here, or
// at this leader through admit) or applied. The rules:
//
//   - A batch whose sequence is the last applied one is answered with its
//     base offset.
//   - A batch that is pending is not proposed again: its copy waits for
//     the first copy's outcome (or, asking acks=leader of a first copy
//     durable on this leader, is answered at once) — unless the first copy
//     is known lost, then it is proposed again.
//   - Any other batch below the producer's latest sequence is refused (a
//     stray or delayed copy of a batch the producer has moved on from):
//     never proposed again.
//   - The latest batch, neither applied nor pending (its proposal was
//     dropped, or its entry is known lost), and a batch above the latest
//     are proposed, and pending from then on.
//
// A pending batch lives until its entry applies (answered), a later batch
// of its producer applies (then it never will: lost), raft says it was
// never appended (lost), or it is known lost: its entry (index, term),
// known once durable on this leader, is no longer in the leader's log. The
// callers' contexts play no part: a caller that stops waiting leaves the
// batch pending, and its resend waits for the same entry.
//
// Producers are evicted by recency: when more than limit are known, the
// one used least recently goes (its pending batches' waiters are told the
// outcome is unknown).
type producerBook struct {
	limit   int
	byID    map[int64]*list.Element // of *producerState
	lru     list.List               // least recently used first
	evicted uint64                  // producers evicted since the table last counted them
	// evictedPending holds the pending batches of evicted producers until
	// the table tells their waiters.
	evictedPending []*pendingBatch
}

// producerState is one producer's entry in the book.
type producerState struct {
	id         int64
	hasApplied bool
	applied    producerLast
	hasLatest  bool
	latest     int32           // the highest sequence proposed or applied
	pending    []*pendingBatch // in sequence order
}

// maxPendingBatches bounds one producer's pending batches; beyond it the
// oldest is forgotten (a copy of it is then refused as stale, never
// proposed again).
const maxPendingBatches = 64

// verdict is what to do with a producer's batch arriving at the leader.
type verdict int

const (
	verdictPropose verdict = iota // propose it (it is pending from now on)
	verdictApplied                // answer with the last applied batch's base offset
	verdictDurable                // answer with the pending first copy's base offset (acks=leader)
	verdictWait                   // wait for the pending first copy's outcome
	verdictStale                  // refuse: at or below the producer's latest, and not known
)

// entryLogged reports whether the leader's log holds an entry of term at index.
type entryLogged func(index, term uint64) bool

// admit decides a batch (id, seq) asking acks, at a leader that has
// applied an entry of its own term. It returns the pending batch for
// verdictPropose (new, now pending), verdictWait and verdictDurable, the
// base offset for verdictApplied and verdictDurable, and the producer's
// latest sequence for verdictStale. Batches it finds lost are returned in
// lost: their waiters are to be told.
func (b *producerBook) admit(id int64, seq int32, acks engine.Acks, logged entryLogged) (v verdict, p *pendingBatch, base int64, latest int32, lost []*pendingBatch) {
	s := b.touch(id)
	if s.hasApplied && s.applied.seq == seq {
		return verdictApplied, nil, s.applied.base, seq, nil
	}
	for i, q := range s.pending {
		if q.seq != seq {
			continue
		}
		if !q.durable || logged(q.index, q.term) {
			if q.durable && acks == engine.AcksLeader {
				return verdictDurable, q, q.base, seq, nil
			}
			return verdictWait, q, 0, seq, nil
		}
		s.pending = append(s.pending[:i], s.pending[i+1:]...)
		lost = append(lost, q)
		break
	}
	// The latest batch neither applied nor pending was never appended, or
	// is known lost: it may be proposed again.
	if s.hasLatest && seq != s.latest && !after(seq, s.latest) {
		return verdictStale, nil, 0, s.latest, lost
	}
	p = &pendingBatch{seq: seq}
	s.pending = append(s.pending, p)
	s.hasLatest, s.latest = true, seq
	if len(s.pending) > maxPendingBatches {
		lost = append(lost, s.pending[0])
		s.pending = s.pending[1:]
	}
	return verdictPropose, p, 0, seq, lost
}

// after reports whether sequence a comes after b (sequences wrap: a
// sequence more than 2^30 behind counts as after).
func after(a, b int32) bool {
	d := a - b
	return d > 0 || d <= -(1<<30)
}

// appliedBatch records an applied batch of producer id at base. It
// returns the pending batches it resolves: answered, the one of that
// sequence (if pending); lost, those before it (they did not apply before
// it, so they never will).
func (b *producerBook) appliedBatch(id int64, l producerLast) (answered *pendingBatch, lost []*pendingBatch) {
	s := b.touch(id)
	if !s.hasApplied || l.base > s.applied.base {
		s.hasApplied, s.applied = true, l
		if !s.hasLatest || after(l.seq, s.latest) {
			s.hasLatest, s.latest = true, l.seq
		}
	}
	keep := s.pending[:0]
	for _, q := range s.pending {
		switch {
		case q.seq == l.seq:
			answered = q
		case !after(q.seq, l.seq):
			lost = append(lost, q)
		default:
			keep = append(keep, q)
		}
	}
	clear(s.pending[len(keep):])
	s.pending = keep
	return answered, lost
}

// proposedHere raises producer id's latest sequence to seq: a batch this
// leader proposed itself, outside admit.
func (b *producerBook) proposedHere(id int64, seq int32) {
	s := b.touch(id)
	if !s.hasLatest || after(seq, s.latest) {
		s.hasLatest, s.latest = true, seq
	}
}

// resolved removes pending batch p of producer id (its proposal failed:
// never appended).
func (b *producerBook) resolved(id int64, p *pendingBatch) {
	e := b.byID[id]
	if e == nil {
		return
	}
	s := e.Value.(*producerState)
	for i, q := range s.pending {
		if q == p {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return
		}
	}
}

// each calls f for every producer with an applied batch, least recently
// used first.
func (b *producerBook) each(f func(id int64, l producerLast)) {
	for e := b.lru.Front(); e != nil; e = e.Next() {
		if s := e.Value.(*producerState); s.hasApplied {
			f(s.id, s.applied)
		}
	}
}

// lastApplied is producer id's last applied batch.
func (b *producerBook) lastApplied(id int64) (producerLast, bool) {
	if e := b.byID[id]; e != nil {
		s := e.Value.(*producerState)
		return s.applied, s.hasApplied
	}
	return producerLast{}, false
}

// isPending reports whether p is still pending for producer id.
func (b *producerBook) isPending(id int64, p *pendingBatch) bool {
	e := b.byID[id]
	if e == nil {
		return false
	}
	for _, q := range e.Value.(*producerState).pending {
		if q == p {
			return true
		}
	}
	return false
}

// touch returns producer id's state, made the most recently used; a new
// producer beyond limit evicts the least recently used one.
func (b *producerBook) touch(id int64) *producerState {
	if b.byID == nil {
		b.byID = map[int64]*list.Element{}
	}
	if e := b.byID[id]; e != nil {
		b.lru.MoveToBack(e)
		return e.Value.(*producerState)
	}
	s := &producerState{id: id}
	b.byID[id] = b.lru.PushBack(s)
	if limit := b.limitOrDefault(); len(b.byID) > limit {
		old := b.lru.Front()
		b.lru.Remove(old)
		delete(b.byID, old.Value.(*producerState).id)
		b.evicted++
		b.evictedPending = append(b.evictedPending, old.Value.(*producerState).pending...)
	}
	return s
}

func (b *producerBook) limitOrDefault() int {
	if b.limit > 0 {
		return b.limit
	}
	return maxProducers
}
