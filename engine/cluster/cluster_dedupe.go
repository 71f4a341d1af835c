package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/raft"
)

// Producer deduplication (the idempotent producer, between nodes).
//
// A node forwarding records to a partition's leader is a producer: it has
// a producer id (random, drawn when the node starts) and numbers its
// batches to each partition (the base sequence); both travel in the batch
// header. The forwarder sends one batch at a time per partition and resends
// the same bytes when it cannot know the outcome (the connection broke
// after the request left, the leader changed), so a resent batch is always
// that producer's latest one. Every replica records, as it applies record
// entries, the last (sequence, base offset) of each producer id; the
// leader answers a batch whose sequence is its producer's last applied one
// with that base offset instead of proposing it again, and attaches a batch
// already proposed and not yet answered to that proposal. A leader answers
// such batches only once it has applied an entry of its own term: every
// entry of earlier leaders is then applied and in the table.
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

// maxProducers bounds the producer ids remembered per partition; the
// oldest entries go first (a producer id lives as long as a node process,
// and its batches are resent only within produce_timeout).
const maxProducers = 4096

type producerTable struct {
	mu      sync.Mutex
	last    map[int64]producerLast
	order   []int64 // producer ids in the order first seen, for eviction
	pending map[int64]*pendingBatch
}

type producerLast struct {
	seq  int32
	base int64
}

// pendingBatch is a producer's batch proposed by this leader and not yet
// committed; resends of it wait for the same outcome. durable: its first
// copy was proposed with AcksLeader and its entry (index, term) is on this
// leader's disk, at base.
type pendingBatch struct {
	seq     int32
	waiters []waiter

	durable     bool
	base        int64
	index, term uint64
}

// waiter is a resend waiting for a pending batch: acks says which outcome
// answers it (AcksLeader: durable on the leader; AcksAll: committed).
type waiter struct {
	ch   chan produceOutcome
	acks engine.Acks
}

type produceOutcome struct {
	base int64
	err  error
}

// applied records a record entry's producer fields (OnApply of the
// partition's replica).
func (t *producerTable) applied(e raftpb.Entry, base int64) {
	id, _, seq, ok := log.RecordsProducer(e.Data)
	if !ok || id == 0 || e.Type != raftpb.EntryNormal {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.note(id, producerLast{seq: seq, base: base})
	// A pending batch committed: its waiters have their answer.
	if p := t.pending[id]; p != nil && p.seq == seq {
		delete(t.pending, id)
		for _, w := range p.waiters {
			w.ch <- produceOutcome{base: base} // buffered: one answer per waiter
		}
		p.waiters = nil
	}
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
	found := map[int64]producerLast{}
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
				found[id] = producerLast{seq: seq, base: base}
			}
			base += int64(binary.LittleEndian.Uint32(e.Data[4:8])) // the record count (log.PayloadType)
		}
		lo = ents[len(ents)-1].Index + 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, l := range found {
		t.note(id, l)
	}
	return nil
}

// note records l as producer id's last batch unless the table has a newer
// one (a higher base offset: what was applied since the replica opened, or
// a snapshot's table ahead of the entries applied after it). t.mu held.
func (t *producerTable) note(id int64, l producerLast) {
	if t.last == nil {
		t.last = map[int64]producerLast{}
	}
	old, known := t.last[id]
	if known && old.base >= l.base {
		return
	}
	t.last[id] = l
	if !known {
		t.order = append(t.order, id)
		if len(t.order) > maxProducers {
			delete(t.last, t.order[0])
			t.order = t.order[1:]
		}
	}
}

// producerTableVersion is the first byte of an encoded producer table.
const producerTableVersion = 1

// producerEntryBytes: id (8), sequence (4), base offset (8).
const producerEntryBytes = 20

// snapshot encodes the table for the partition's raft snapshots
// (ReplicaConfig.SnapshotApp): version (1 byte), count (u32), then count ×
// (producer id i64, sequence i32, base offset i64), little-endian, oldest
// producer first. At most maxProducers entries: ~80 KiB.
func (t *producerTable) snapshot() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.order) == 0 {
		return nil
	}
	b := make([]byte, 0, 5+producerEntryBytes*len(t.order))
	b = append(b, producerTableVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(t.order)))
	for _, id := range t.order {
		l := t.last[id]
		b = binary.LittleEndian.AppendUint64(b, uint64(id))
		b = binary.LittleEndian.AppendUint32(b, uint32(l.seq))
		b = binary.LittleEndian.AppendUint64(b, uint64(l.base))
	}
	return b
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

// proposeOnce proposes a producer's batch at this leader unless it is its
// last applied batch (answered with its base offset) or already proposed
// (the caller waits for that proposal's outcome; see above for acks=leader).
func (c *cluster) proposeOnce(ctx context.Context, part *partition, id int64, seq int32, data []byte, acks engine.Acks) (int64, error) {
	t := &part.X.producers
	t.mu.Lock()
	if l, ok := t.last[id]; ok {
		if l.seq == seq {
			t.mu.Unlock()
			return l.base, nil
		}
		// An older batch than the producer's last (sequences wrap): its
		// producer has moved on, so this is a stray copy; storing it would
		// store it twice.
		if d := seq - l.seq; d < 0 && d > -(1<<30) {
			t.mu.Unlock()
			return 0, fmt.Errorf("%w: batch %d of producer %x is older than its last stored batch %d: not stored again", errStaleBatch, seq, uint64(id), l.seq)
		}
	}
	if p := t.pending[id]; p != nil && p.seq == seq {
		if p.durable && !stillLogged(part, p.index, p.term) {
			delete(t.pending, id) // replaced by a new leader's entry: lost, store it again
		} else {
			if p.durable && acks == engine.AcksLeader {
				t.mu.Unlock()
				return p.base, nil
			}
			ch := make(chan produceOutcome, 1)
			p.waiters = append(p.waiters, waiter{ch: ch, acks: acks})
			t.mu.Unlock()
			select {
			case o := <-ch:
				return o.base, o.err
			case <-ctx.Done():
				return 0, raft.ErrOutcomeUnknown
			}
		}
	}
	if t.pending == nil {
		t.pending = map[int64]*pendingBatch{}
	}
	p := &pendingBatch{seq: seq}
	t.pending[id] = p
	t.mu.Unlock()

	res, err := c.propose(ctx, part.X.raftGroup, data, acks)

	t.mu.Lock()
	var answer []waiter
	if err == nil && acks == engine.AcksLeader && t.pending[id] == p {
		// Durable, not committed: answer the resends asking for as much,
		// keep the others for the commit (applied).
		p.durable, p.base, p.index, p.term = true, res.Base, res.Index, res.Term
		keep := p.waiters[:0]
		for _, w := range p.waiters {
			if w.acks == engine.AcksLeader {
				answer = append(answer, w)
			} else {
				keep = append(keep, w)
			}
		}
		p.waiters = keep
	} else {
		if t.pending[id] == p {
			delete(t.pending, id)
		}
		answer, p.waiters = p.waiters, nil
	}
	t.mu.Unlock()
	for _, w := range answer {
		w.ch <- produceOutcome{res.Base, err}
	}
	return res.Base, err
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
