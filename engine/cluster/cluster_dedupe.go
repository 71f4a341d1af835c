package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/cluster/route"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/raft"
)

// Producer deduplication (the idempotent producer, between nodes).
//
// A node publishing to a partition is a producer: its forwarder for the
// partition draws a producer id and numbers the calls in call order (a
// batch's base sequence is its first call's); both travel in the batch
// header, of the batches it forwards and of those it proposes as the
// leader. The forwarder sends one batch at a time per partition and resends
// the same bytes when it cannot know the outcome (the connection broke
// after the request left, the leader changed), so a resent batch is always
// that producer's latest one. Every replica records, as it applies record
// entries, the last (sequence, base offset) of each producer id; the
// leader also keeps the batches it proposed and has not applied yet, and
// decides each arriving batch by producerBook's rules (producers.go): the
// last applied one is answered with its base offset, a pending one waits
// for its entry, an older one is refused, a new one is proposed. A leader
// answers such batches only once it has applied an entry of its own term:
// every entry of earlier leaders is then applied and in the table.
//
// With acks=leader (AcksLeader) a batch is answered once its entry is on
// the leader's disk, before it commits, so a resend can arrive between the
// answer and the commit, when the table does not have it yet. The leader
// keeps the answered batch as pending, marked durable with its entry's
// index and term, until the entry applies (or the producer's next batch
// replaces it). A resend of it then gets:
//   - acks=leader: the same answer (the base offset) at once, as long as
//     the leader's log still holds the entry (the same term at its index,
//     so the same entry); if a new leader replaced it, the batch is
//     proposed again — it was lost, and storing it now is not a duplicate;
//   - acks=all: the answer at the entry's commit (or, if it never commits,
//     ErrOutcomeUnknown when the resend's time runs out, and the producer
//     sends again).
// A resend of a batch whose first copy is not yet durable waits for that
// copy's outcome, as before.
//
// The table is not replicated state: each replica builds its own from what
// it applies, rebuilt at open from the last rebuildTailEntries committed
// entries, and kept in the partition's raft snapshots: a replica that
// installs one (it lagged behind the log's start) or opens from one starts
// from the table of the replica that took it. That table may be newer
// than the snapshot's index, so the entries after it are applied to it
// again: for each producer the newest batch (the highest base offset; a
// producer's batches are stored in order) wins, whatever the order in
// which they are seen.

// maxProducers bounds the producer ids remembered per partition; the one
// used least recently goes first (ClusterStatus.ProducersEvicted counts
// them). A producer id lives as long as a forwarder (a partition value of a
// node process), and its batches are resent only within produce_timeout.
const maxProducers = 4096

// producerTable is a partition's producerBook behind a lock, with the
// waiters' channels; the book decides, the table answers.
type producerTable struct {
	mu      sync.Mutex
	book    producerBook
	evicted *atomic.Uint64 // the node's count of evicted producers (nil: not counted)
}

type producerLast struct {
	seq  int32
	base int64
}

// pendingBatch is a producer's batch proposed by this leader and not yet
// applied; copies of it wait for the same outcome. durable: its first copy
// was proposed with AcksLeader and its entry (index, term) is on this
// leader's disk, at base.
type pendingBatch struct {
	seq     int32
	waiters []waiter

	durable     bool
	base        int64
	index, term uint64
}

// waiter is a copy of a batch waiting for its outcome: acks says which
// outcome answers it (AcksLeader: durable on the leader; AcksAll:
// committed).
type waiter struct {
	ch   chan produceOutcome
	acks engine.Acks
}

type produceOutcome struct {
	base int64
	err  error
}

// answer is one outcome for the waiters of a batch.
type answer struct {
	to  []waiter
	out produceOutcome
}

func (a answer) send() {
	for _, w := range a.to {
		w.ch <- a.out // buffered: one answer per waiter
	}
}

// lostAnswers answers the waiters of batches that will never be stored,
// and of evicted producers' batches (their outcome unknown). t.mu held;
// the answers are sent once it is released.
func (t *producerTable) lostAnswers(lost []*pendingBatch) []answer {
	var out []answer
	for _, p := range lost {
		out = append(out, answer{p.waiters, produceOutcome{err: fmt.Errorf("%w: a later batch of its producer was stored first, or a new leader replaced its entry", raft.ErrProposalLost)}})
		p.waiters = nil
	}
	for _, p := range t.book.evictedPending {
		out = append(out, answer{p.waiters, produceOutcome{err: fmt.Errorf("%w: its producer was evicted from the partition's producer table (maxProducers)", raft.ErrOutcomeUnknown)}})
		p.waiters = nil
	}
	t.book.evictedPending = nil
	if n := t.book.evicted; n > 0 && t.evicted != nil {
		t.evicted.Add(n)
		t.book.evicted = 0
	}
	return out
}

// proposedHere records that this leader proposed its own batch seq of
// producer id (not through admit: it is new by construction), so that a
// copy of an older batch of id is refused from now on.
func (t *producerTable) proposedHere(id int64, seq int32) {
	t.mu.Lock()
	t.book.proposedHere(id, seq)
	answers := t.lostAnswers(nil)
	t.mu.Unlock()
	for _, a := range answers {
		a.send()
	}
}

// countEvictions makes the table count its evicted producers in n.
func (t *producerTable) countEvictions(n *atomic.Uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.evicted = n
}

// applied records a record entry's producer fields (OnApply of the
// partition's replica) and answers the copies waiting for it.
func (t *producerTable) applied(e raftpb.Entry, base int64) {
	id, _, seq, ok := log.RecordsProducer(e.Data)
	if !ok || id == 0 || e.Type != raftpb.EntryNormal {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.note(id, producerLast{seq: seq, base: base})
}

// rebuildTailEntries is how many of the last committed entries a replica
// reads at open to learn its producers' last batches again.
const rebuildTailEntries = 1024

// rebuild fills the table from the committed entries at the tail of the
// partition's log (up to committed, a raft index): a replica that
// restarted then still recognises the batches resent to it as a new
// leader. Entries past the commit index are left out (they may yet be
// replaced), and what the replica applied since it opened wins.
func (t *producerTable) rebuild(p *log.Partition, committed uint64) error {
	first := max(p.FirstIndex(), committed-min(committed, rebuildTailEntries-1))
	if committed == 0 || first > committed {
		return nil
	}
	base, err := p.OffsetOfIndex(first)
	if err != nil {
		return err
	}
	type found struct {
		id int64
		l  producerLast
	}
	var seen []found
	for lo := first; lo <= committed; {
		ents, err := p.Entries(lo, committed+1, 4<<20)
		if err != nil {
			return err
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			id, _, seq, ok := log.RecordsProducer(e.Data)
			if e.Type != log.EntryData || !ok {
				continue
			}
			if id != 0 {
				seen = append(seen, found{id, producerLast{seq: seq, base: base}})
			}
			base += int64(binary.LittleEndian.Uint32(e.Data[4:8])) // the record count (log.PayloadType)
		}
		lo = ents[len(ents)-1].Index + 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range seen {
		t.note(f.id, f.l)
	}
	return nil
}

// note records l as producer id's last batch unless the table has a newer
// one (a higher base offset: what was applied since the replica opened, or
// a snapshot's table ahead of the entries applied after it). t.mu held
// (the answers go to buffered channels, one per waiter: never blocking).
func (t *producerTable) note(id int64, l producerLast) {
	done, lost := t.book.appliedBatch(id, l)
	answers := t.lostAnswers(lost)
	if done != nil {
		answers = append(answers, answer{done.waiters, produceOutcome{base: l.base}})
		done.waiters = nil
	}
	for _, a := range answers {
		a.send()
	}
}

// producerTableVersion is the first byte of an encoded producer table.
const producerTableVersion = 1

// producerEntryBytes: id (8), sequence (4), base offset (8).
const producerEntryBytes = 20

// snapshot encodes the table for the partition's raft snapshots
// (ReplicaConfig.SnapshotApp): version (1 byte), count (u32), then count ×
// (producer id i64, sequence i32, base offset i64), little-endian, oldest
// producer (the least recently used) first. At most maxProducers entries:
// ~80 KiB.
func (t *producerTable) snapshot() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	var body []byte
	n := 0
	t.book.each(func(id int64, l producerLast) {
		body = binary.LittleEndian.AppendUint64(body, uint64(id))
		body = binary.LittleEndian.AppendUint32(body, uint32(l.seq))
		body = binary.LittleEndian.AppendUint64(body, uint64(l.base))
		n++
	})
	if n == 0 {
		return nil
	}
	b := make([]byte, 0, 5+len(body))
	b = append(b, producerTableVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	return append(b, body...)
}

// decodeProducerTable decodes what snapshot encoded; it never panics and
// refuses more than maxProducers entries, ids of 0 and negative offsets.
func decodeProducerTable(b []byte) ([]int64, []producerLast, error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	if len(b) < 5 || b[0] != producerTableVersion {
		return nil, nil, fmt.Errorf("producer table: %d bytes, version %d (this build reads version %d)", len(b), b[0], producerTableVersion)
	}
	n := binary.LittleEndian.Uint32(b[1:])
	if n > maxProducers || int64(len(b)) != 5+int64(n)*producerEntryBytes {
		return nil, nil, fmt.Errorf("producer table: %d entries in %d bytes (at most %d entries of %d bytes)", n, len(b), maxProducers, producerEntryBytes)
	}
	ids, lasts := make([]int64, n), make([]producerLast, n)
	for i := range ids {
		e := b[5+i*producerEntryBytes:]
		ids[i] = int64(binary.LittleEndian.Uint64(e))
		lasts[i] = producerLast{seq: int32(binary.LittleEndian.Uint32(e[8:])), base: int64(binary.LittleEndian.Uint64(e[12:]))}
		if ids[i] == 0 || lasts[i].base < 0 {
			return nil, nil, fmt.Errorf("producer table: entry %d has producer id %d and base offset %d", i, ids[i], lasts[i].base)
		}
	}
	return ids, lasts, nil
}

// restore merges a snapshot's table (ReplicaConfig.OnSnapshot) into this
// one. A table that does not decode is left out with an error logged: the
// replica then knows fewer producers (a resend may be stored twice), which
// is no reason to stop it.
func (t *producerTable) restore(b []byte, logger *slog.Logger, partition string) {
	ids, lasts, err := decodeProducerTable(b)
	if err != nil {
		logger.Error("spool cluster: a partition snapshot's producer table is damaged; starting without it (resent batches may be stored twice)", "partition", partition, "err", err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, id := range ids {
		t.note(id, lasts[i])
	}
}

// proposeOnce proposes a producer's batch at this leader, which has
// applied an entry of its own term, as the producer table's rules say
// (producerBook): a copy of a batch applied or pending is answered with
// the first copy's outcome, a stray copy of an older batch is refused, a
// new batch is proposed. The batch stays pending until its entry applies
// or is known lost, whatever becomes of ctx: ctx bounds only this caller's
// wait.
func (c *cluster) proposeOnce(ctx context.Context, part *partition, id int64, seq int32, data []byte, acks engine.Acks) (int64, error) {
	if err := ctx.Err(); err != nil {
		// The sender has gone (its deadline passed on the way, or it gave
		// up): proposing now could store the batch after what its
		// producer published since. Nothing is done.
		return 0, fmt.Errorf("%w: batch %d of producer %x arrived after its request ended: not proposed: %w", raft.ErrProposalLost, seq, uint64(id), err)
	}
	t := &part.X.producers
	t.mu.Lock()
	v, p, base, latest, lost := t.book.admit(id, seq, acks, func(index, term uint64) bool { return stillLogged(part, index, term) })
	answers := t.lostAnswers(lost)
	var ch chan produceOutcome
	if v == verdictPropose || v == verdictWait {
		ch = make(chan produceOutcome, 1)
		p.waiters = append(p.waiters, waiter{ch: ch, acks: acks})
	}
	t.mu.Unlock()
	for _, a := range answers {
		a.send()
	}
	switch v {
	case verdictApplied, verdictDurable:
		return base, nil
	case verdictStale:
		return 0, fmt.Errorf("%w: batch %d of producer %x is older than its last batch %d, and neither stored nor pending: not stored again", errStaleBatch, seq, uint64(id), latest)
	case verdictPropose:
		c.role.proposeWith(part.X.raftGroup, data, proposeOptions(acks), func(res raft.Proposed, err error) {
			t.proposalDone(id, p, acks, res, err)
		})
	}
	select {
	case o := <-ch:
		return o.base, o.err
	case <-ctx.Done():
		t.mu.Lock()
		p.waiters = slices.DeleteFunc(p.waiters, func(w waiter) bool { return w.ch == ch })
		t.mu.Unlock()
		return 0, fmt.Errorf("%w: batch %d of producer %x: no outcome in time (it stays pending: a copy sent again waits for the same entry): %w", raft.ErrOutcomeUnknown, seq, uint64(id), ctx.Err())
	}
}

// proposalDone is raft's outcome of pending batch p's proposal (it runs
// on the raft worker: it only answers, on buffered channels). Durable with
// AcksLeader: the copies asking for as much are answered, the others wait
// for the commit (applied). Committed: every copy is answered; p stays
// pending until applied removes it (a copy arriving meanwhile waits for
// that). Never appended (nothing done): p is no longer pending. Outcome
// unknown: the copies waiting are told so (their senders may try another
// leader), and p stays pending — its entry may yet commit.
func (t *producerTable) proposalDone(id int64, p *pendingBatch, acks engine.Acks, res raft.Proposed, err error) {
	t.mu.Lock()
	if !t.book.isPending(id, p) {
		t.mu.Unlock() // applied, or found lost, already: its copies were answered
		return
	}
	var a answer
	switch {
	case err == nil && acks == engine.AcksLeader:
		p.durable, p.base, p.index, p.term = true, res.Base, res.Index, res.Term
		keep := p.waiters[:0]
		for _, w := range p.waiters {
			if w.acks == engine.AcksLeader {
				a.to = append(a.to, w)
			} else {
				keep = append(keep, w)
			}
		}
		clear(p.waiters[len(keep):])
		p.waiters = keep
	case err != nil && route.NothingDone(err):
		t.book.resolved(id, p)
		a.to, p.waiters = p.waiters, nil
	default:
		a.to, p.waiters = p.waiters, nil
	}
	a.out = produceOutcome{base: res.Base, err: err}
	t.mu.Unlock()
	a.send()
}

// stillLogged: the partition's log (here, at the leader) holds the entry
// of term at index — log matching makes it the same entry.
func stillLogged(part *partition, index, term uint64) bool {
	if part.Log == nil {
		return false
	}
	t, err := part.Log.Term(index)
	return err == nil && t == term
}

// newProducerID draws a forwarder's producer id (never 0: 0 is "no
// producer", the batches a leader proposes itself).
func newProducerID() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := int64(binary.LittleEndian.Uint64(b[:])); id != 0 {
			return id
		}
	}
}

// errStaleBatch: a producer's batch older than its last stored one.
var errStaleBatch = errors.New("stale producer batch")

// leaderCaughtUp reports whether this leader has applied an entry of its
// own term (and so every entry of earlier terms).
func leaderCaughtUp(part *partition, st raft.GroupStatus) bool {
	if part.Log == nil || !st.IsLeader {
		return false
	}
	t, err := part.Log.Term(st.CommitIndex)
	return err == nil && t == st.Term
}
