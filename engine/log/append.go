package log

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// reqKind says what a request asks of the appender.
type reqKind uint8

const (
	reqRecords  reqKind = iota // AppendAsync/Append: one frame, index and term assigned at write
	reqEntries                 // AppendEntries: frames with their raft index and term
	reqTruncate                // TruncateAfter
)

// request is one append (or truncation) waiting for the appender. Requests
// and their buffers are pooled so that an append costs a constant number of
// allocations.
type request struct {
	p      *Partition
	kind   reqKind
	buf    *[]byte // frames back to back; returned to bufPool once written (nil for reqTruncate)
	count  int
	index  uint64                      // reqTruncate: keep entries up to this index
	done   func(base int64, err error) // AppendAsync
	doneE  func(err error)             // AppendEntries
	ch     chan result                 // Append, TruncateAfter: cap 1, so the appender never blocks
	base   int64
	end    int64  // offset end after the write
	endIdx uint64 // last raft index written
	err    error
}

type result struct {
	base int64
	err  error
}

const maxPooledBuf = 8 << 20

var (
	bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}
	reqPool = sync.Pool{New: func() any { return &request{ch: make(chan result, 1)} }}
)

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}

func (r *request) free() {
	ch := r.ch
	*r = request{ch: ch}
	reqPool.Put(r)
}

// prepare encodes recs into one pooled buffer, body CRC included (on the
// caller's goroutine). Timestamps of 0 become now.
func (p *Partition) prepare(recs []Record) (*request, error) {
	if len(recs) == 0 {
		return nil, ErrEmptyBatch
	}
	o := &p.s.opts
	now := o.Now().UnixMilli()
	if size := encodedBatchSize(recs, now); size > o.MaxBatchBytes {
		return nil, fmt.Errorf("%w: %d records encode to %d bytes, limit is %d (MaxBatchBytes)", ErrBatchTooLarge, len(recs), size, o.MaxBatchBytes)
	}
	bp := bufPool.Get().(*[]byte)
	*bp = encodeBatch((*bp)[:0], BatchHeader{Type: EntryData}, recs, now)
	r := reqPool.Get().(*request)
	r.p, r.buf, r.count, r.kind = p, bp, len(recs), reqRecords
	return r, nil
}

// Append appends recs as one batch and blocks until it is durable (per the
// Fsync mode), returning the offset of the first record. If ctx ends first
// the outcome is unknown: the batch may still be written.
//
// The batch becomes the raft entry LastIndex()+1, with the term of the last
// entry (1 if the log is empty): the single-node mode. A partition driven by
// raft appends with AppendEntries only.
func (p *Partition) Append(ctx context.Context, recs []Record) (int64, error) {
	r, err := p.prepare(recs)
	if err != nil {
		return -1, err
	}
	if err := p.s.enqueue(ctx, r); err != nil {
		putBuf(r.buf)
		r.free()
		return -1, err
	}
	select {
	case res := <-r.ch:
		r.free()
		return res.base, res.err
	case <-ctx.Done():
		// The appender still owns r; it is left to the garbage collector.
		return -1, fmt.Errorf("spool log: append to %s: outcome unknown: %w", p.name, ctx.Err())
	}
}

// AppendAsync is Append with a callback, called in append order on the
// appender goroutine once the round is over and no lock of this package is
// held. done must not block: the appender waits for it before its next
// round (engine/embedded and engine/cluster hand Produce callbacks to
// other goroutines). AppendAsync itself blocks while the pending queue is
// full (MaxPendingBytes) and fails at once on a closed store.
func (p *Partition) AppendAsync(recs []Record, done func(base int64, err error)) {
	r, err := p.prepare(recs)
	if err != nil {
		done(-1, err)
		return
	}
	r.done = done
	if err := p.s.enqueue(context.Background(), r); err != nil {
		putBuf(r.buf)
		r.free()
		done(-1, err)
	}
}

// enqueue adds r to the pending queue, waiting while it is full.
func (s *Store) enqueue(ctx context.Context, r *request) error {
	n := 0
	if r.buf != nil {
		n = len(*r.buf)
	}
	s.mu.Lock()
	for !s.closed && s.pendingBytes > 0 && s.pendingBytes+n > s.opts.MaxPendingBytes {
		space := s.space
		s.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return fmt.Errorf("spool log: waiting for room in the append queue: %w", ctx.Err())
		}
		s.mu.Lock()
	}
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.pending = append(s.pending, r)
	s.pendingBytes += n
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// dirtySeg is a segment written in this round, waiting for its fdatasync.
type dirtySeg struct {
	p   *Partition
	seg *segment
	err error
}

// round is one group commit: write every pending batch, with one write per
// partition and segment where it can (see run), and fdatasync every dirty
// file. It returns the batch with each request's result set; the
// caller completes it with unlockRound once roundMu is released, so that no
// waiter's callback runs under a lock of this package. Caller holds roundMu.
func (s *Store) round() []*request {
	s.mu.Lock()
	batch := s.pending
	if len(batch) == 0 {
		s.mu.Unlock()
		return nil
	}
	// Swap buffers. spare is taken (set to nil) so that pending and spare
	// never share an array: appends during this round must not overwrite batch.
	s.pending, s.spare = s.spare[:0], nil
	s.mu.Unlock()
	bytes := 0
	for i, r := range batch {
		if r.kind == reqTruncate {
			r.p.flush() // the appends before it, which it may remove
			r.err = r.p.truncateAfter(r.index, true)
			if r.p.lastIdx.Load() <= r.index {
				// Cut, even if it then failed (a failed fdatasync fails
				// the partition): the appends it removed fail alike.
				truncatedInRound(batch[:i], r.p, r.index)
			}
			continue
		}
		bytes += len(*r.buf)
		r.p.add(r)
	}
	for _, r := range batch {
		r.p.flush() // a no-op once the partition's run is written
	}
	for _, r := range batch {
		if r.buf != nil {
			putBuf(r.buf)
			r.buf = nil
		}
	}
	dirty := s.dirty
	defer func() {
		clear(dirty)
		s.dirty = dirty[:0]
		for _, r := range batch {
			clear(r.p.written)
			r.p.written = r.p.written[:0]
		}
	}()
	if s.opts.Fsync == FsyncAlways {
		if s.j != nil {
			s.journalRound(dirty)
		} else {
			s.syncRound(dirty)
		}
		for _, d := range dirty {
			d.p.syncErr = nil
		}
		for _, d := range dirty {
			switch {
			case d.seg.removed:
				// deleted by a TruncateAfter later in the round
			case d.p.failed != nil:
				// Failed in this round, by a truncation whose fdatasync
				// failed, say: the kernel may have dropped pages written
				// before it (syncFailed), so this sync vouches for nothing.
				// The round's appends not yet durable fail with the
				// partition's error; reopening recovers what is on disk.
				d.p.syncErr = d.p.failed
			case d.err != nil:
				d.p.syncErr = d.p.syncFailed(d.seg, d.err)
			default:
				d.p.synced(d.seg)
			}
		}
	}
	for _, r := range batch {
		if r.err == nil && r.kind != reqTruncate && s.opts.Fsync == FsyncAlways &&
			(r.end > r.p.durable.Load() || r.endIdx > r.p.durIdx.Load()) {
			r.err = r.p.syncErr
			if r.err == nil {
				r.err = errors.New("spool log: batch not durable after sync") // unreachable by design
			}
		}
		if r.err != nil {
			r.base = -1
		}
	}
	s.mu.Lock()
	s.pendingBytes -= bytes
	if !s.closed {
		close(s.space)
		s.space = make(chan struct{})
	}
	s.mu.Unlock()
	return batch
}

// durableMove is a partition's durable end having moved, for its OnDurable
// hook. It is recorded under roundMu and reported after releasing it.
type durableMove struct {
	hook func(end int64)
	end  int64
}

// unlockRound releases roundMu, then reports durable ends that moved under
// it and completes batch (from round), in that order: a waiter that reads
// after its append completes sees its records. Every path that takes roundMu
// releases it here, so hooks and callbacks never run under a lock of this
// package (LOCKS.md).
func (s *Store) unlockRound(batch []*request) {
	moved := s.moved
	s.moved = nil
	s.roundMu.Unlock()
	for _, m := range moved {
		m.hook(m.end)
	}
	if len(batch) == 0 {
		return
	}
	for _, r := range batch {
		switch {
		case r.done != nil:
			r.done(r.base, r.err)
			r.free()
		case r.doneE != nil:
			r.doneE(r.err)
			r.free()
		default:
			r.ch <- result{base: r.base, err: r.err} // cap 1: never blocks
		}
	}
	clear(batch)
	s.mu.Lock()
	if s.spare == nil {
		s.spare = batch[:0]
	}
	s.mu.Unlock()
}

// syncCounts count the syncs of append rounds (Store.SyncStats).
type syncCounts struct {
	files, fileSystem, fallbacks atomic.Uint64
}

// SyncStats are the syncs append rounds made (FsyncAlways).
type SyncStats struct {
	// Files counts fdatasyncs of segment files (by rounds, or by journal
	// checkpoints); FileSystem, syncs of the whole file system
	// (Options.SyncFileSystem), each standing for two or more files;
	// Fallbacks, file-system syncs that failed and were followed by one
	// fdatasync per file.
	Files, FileSystem, Fallbacks uint64
	// The journal's (Options.Journal): Journal counts its fdatasyncs (one
	// per round that wrote), JournalBytes the bytes appended to it,
	// Checkpoints the checkpoints that synced the segments behind it and
	// cut it, Replayed the records replayed when the store was opened.
	Journal, JournalBytes, Checkpoints, Replayed uint64
	// JournalLag is the journal's size now: bytes whose segments are not
	// synced yet, which a power loss would replay.
	JournalLag int64
}

// SyncStats returns the counts so far.
func (s *Store) SyncStats() SyncStats {
	return SyncStats{
		Files: s.syncs.files.Load(), FileSystem: s.syncs.fileSystem.Load(), Fallbacks: s.syncs.fallbacks.Load(),
		Journal: s.jstats.syncs.Load(), JournalBytes: s.jstats.bytes.Load(), Checkpoints: s.jstats.checkpoints.Load(),
		Replayed: s.jstats.replayed.Load(), JournalLag: int64(s.jstats.lag.Load()),
	}
}

// syncRound makes a round's dirty segments durable: with a file-system
// syncer and two or more of them, one sync of the file system (for a
// single file, its fdatasync is as cheap and does not wait on others'
// data); else, or when that fails, one fdatasync per segment, which also
// names the segment whose data could not be written. Caller holds roundMu.
func (s *Store) syncRound(dirty []dirtySeg) {
	if s.fsSync != nil {
		n := 0
		for i := range dirty {
			if d := &dirty[i]; d.seg.dirty && !d.seg.removed {
				n++
			}
		}
		if n >= 2 {
			err := s.fsSync.Sync()
			if err == nil {
				s.syncs.fileSystem.Add(1)
				for i := range dirty {
					dirty[i].seg.dirty = false
				}
				return
			}
			s.syncs.fallbacks.Add(1)
			s.opts.Logger.Warn("spool log: syncing the data dir's file system failed; syncing each file to find the failed one", "dir", s.dir, "err", err)
		}
	}
	s.syncs.files.Add(uint64(syncParallel(dirty)))
}

// maxSyncWorkers bounds the goroutines fdatasyncing in parallel in one round.
const maxSyncWorkers = 8

// syncParallel fdatasyncs every listed segment that is still dirty (rolled
// segments were synced by the roll), up to maxSyncWorkers at a time; the
// workers end before it returns. It returns the number synced.
func syncParallel(dirty []dirtySeg) int {
	var todo []*dirtySeg
	for i := range dirty {
		if d := &dirty[i]; d.seg.dirty && !d.seg.removed {
			d.seg.dirty = false
			todo = append(todo, d)
		}
	}
	return syncTodo(todo)
}

// syncEach fdatasyncs every listed segment, as syncParallel does, setting
// each one's err; it returns the number synced.
func syncEach(segs []dirtySeg) int {
	todo := make([]*dirtySeg, len(segs))
	for i := range segs {
		todo[i] = &segs[i]
	}
	return syncTodo(todo)
}

func syncTodo(todo []*dirtySeg) int {
	if len(todo) <= 1 {
		if len(todo) == 1 {
			todo[0].err = todo[0].seg.log.Sync()
		}
		return len(todo)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(todo), maxSyncWorkers) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(todo); i = int(next.Add(1)) - 1 {
				todo[i].err = todo[i].seg.log.Sync()
			}
		})
	}
	wg.Wait()
	return len(todo)
}

// maxRunBufs bounds the buffers of one run, so that it is written with one
// pwritev (IOV_MAX is 1024 on Linux).
const maxRunBufs = 1024

// run gathers the frames of one partition's consecutive requests in a round
// that go to the end of one segment, to write them with one call and
// publish them together (flush). A roll, a truncation and the end of the
// round end a run; a request cut by a roll has frames in two runs. The
// cursor fields say where the segment and the partition will end once the
// run is written. Owned by Store.roundMu's holder; empty outside a round.
type run struct {
	seg  *segment
	bufs [][]byte   // whole frames, in order: a request's, or part of one cut by a roll
	reqs []*request // reqs[i] owns bufs[i]
	// spill: reqs[0] has frames in an earlier run, written already, after
	// the raft index before; they go too if this run's write fails.
	spill  bool
	before uint64

	size      int64
	next      int64
	nextIndex uint64
	lastTerm  uint64
}

// gather returns p's run, starting it at the end of the active segment if
// it is empty.
func (p *Partition) gather() *run {
	rn := &p.run
	if len(rn.bufs) == 0 {
		seg := p.active()
		*rn = run{seg: seg, bufs: rn.bufs, reqs: rn.reqs, size: seg.size, next: seg.next, nextIndex: seg.nextIndex, lastTerm: p.lastTerm}
	}
	return rn
}

// add gathers r's frames into p's run, after writing the run where it must
// end first: before a roll (a run never crosses a segment's end, and the
// roll needs the old segment written) or when it is full. On failure r.err
// is set and nothing of r stays in the log; if the run holding r fails to
// be written, r fails with it (flush). Caller holds roundMu.
func (p *Partition) add(r *request) {
	if p.failed != nil {
		r.err = p.failed
		return
	}
	if ce := p.quarantine.Load(); ce != nil {
		r.err = p.quarantineError(ce)
		return
	}
	if j := p.s.j; j != nil && j.failed != nil {
		r.err = j.failed
		return
	}
	o := &p.s.opts
	b := *r.buf
	first, before := true, uint64(0)
	for len(b) > 0 {
		if p.failed != nil { // a write of the run failed, and so did its truncation
			r.err = p.failed
			return
		}
		rn := p.gather()
		if first && r.kind == reqEntries {
			// Against the end of the run: the log once it is written. If a
			// write of the run fails below, the loop checks again against
			// the log as it is then.
			if err := p.continues(b, rn.nextIndex, rn.lastTerm); err != nil {
				r.err = err
				return
			}
		}
		roll := rn.size > 0 && (rn.size+int64(frameLen(b)) > o.SegmentBytes ||
			rn.seg.size > 0 && o.Now().Sub(rn.seg.created) >= o.SegmentAge)
		if len(rn.bufs) > 0 && (roll || len(rn.bufs) == maxRunBufs) {
			if p.flush(); r.err != nil {
				return // r had frames in the run
			}
			continue
		}
		if roll {
			if err := p.roll(); err != nil {
				r.err = err
				if !first {
					p.takeBack(before, err) // r's frames in the old segment
				}
				return
			}
			rn = p.gather() // the new segment (or the same: roll keeps a record-less one)
		}
		n := frameLen(b) // at least one frame, then as many as fit
		for n < len(b) && rn.size+int64(n+frameLen(b[n:])) <= o.SegmentBytes {
			n += frameLen(b[n:])
		}
		if first {
			r.base, before, first = rn.next, rn.nextIndex-1, false
		} else if len(rn.bufs) == 0 {
			rn.spill, rn.before = true, before
		}
		rn.add(r, b[:n])
		b = b[n:]
	}
}

// add fills the placement of the whole frames b of r and appends them to
// the run. Base offsets are always assigned here, from the run's end;
// single-node records (reqRecords) also get raft indexes from there and the
// last term (1 in an empty log), raft entries carry theirs.
func (rn *run) add(r *request, b []byte) {
	le := binary.LittleEndian
	term := max(rn.lastTerm, 1)
	for f := b; len(f) > 0; {
		l := frameLen(f)
		idx, t := le.Uint64(f[offRaftIndex:]), le.Uint64(f[offRaftTerm:])
		if r.kind == reqRecords {
			idx, t = rn.nextIndex, term
		}
		setPlacement(f[:l], idx, t, rn.next)
		if EntryType(f[offType]) == EntryData {
			rn.next += int64(le.Uint32(f[offCount:]))
		}
		rn.nextIndex, rn.lastTerm = idx+1, t
		f = f[l:]
	}
	rn.size += int64(len(b))
	rn.bufs = append(rn.bufs, b)
	rn.reqs = append(rn.reqs, r)
}

// flush writes p's run with one call at the end of its segment and
// publishes it. If the write fails, the file is cut back to where the run
// began and every request of the run fails (with the frames the first one
// had in an earlier run), even those whose bytes the write may have
// reached: none is reported durable. Caller holds roundMu.
func (p *Partition) flush() {
	rn := &p.run
	if len(rn.bufs) == 0 {
		return
	}
	defer func() {
		clear(rn.bufs)
		clear(rn.reqs)
		rn.bufs, rn.reqs = rn.bufs[:0], rn.reqs[:0]
	}()
	seg := rn.seg
	at := seg.size
	if _, err := seg.log.WriteAtv(rn.bufs, at); err != nil {
		err = ioError("write", seg.path, err)
		for _, r := range rn.reqs {
			r.err = err
		}
		if terr := seg.log.Truncate(seg.size); terr != nil {
			p.failed = fmt.Errorf("spool log: partition %s: cannot truncate %s after a failed write (%v); reopen the store: %w", p.name, seg.path, terr, err)
			p.s.opts.Logger.Error("spool log: partition failed", "partition", p.name, "err", p.failed)
			return
		}
		if rn.spill {
			p.takeBack(rn.before, err)
		}
		return
	}
	if p.s.j != nil {
		p.s.journalRun(p, rn, at)
	}
	p.publish(rn)
	if !seg.dirty {
		seg.dirty = true
		p.s.dirty = append(p.s.dirty, dirtySeg{p: p, seg: seg})
	}
}

// cutWritten fails the requests of this round written to p whose entries
// reach next or beyond: a failed sync cut them back. Their end offsets
// alone would not say so once later appends of the round take the same
// offsets again. Caller holds roundMu.
func (p *Partition) cutWritten(next uint64, err error) {
	for _, r := range p.written {
		if r.err == nil && r.endIdx >= next {
			r.err = err
		}
	}
}

// takeBack removes what a request that failed part way wrote: the entries
// after before. Caller holds roundMu.
func (p *Partition) takeBack(before uint64, cause error) {
	if p.failed != nil {
		return
	}
	if err := p.truncateAfter(before, false); err != nil {
		p.failed = fmt.Errorf("spool log: partition %s: cannot take back a partly written append (%v); reopen the store: %w", p.name, err, cause)
	}
}

// frameLen returns the Length field of the frame at the start of b.
func frameLen(b []byte) int { return int(binary.LittleEndian.Uint32(b[offLength:])) }

// continues checks that the frames b (from AppendEntries) continue a log
// whose next raft index is next and whose last term is last: the first
// raft index is next and the term does not go down.
func (p *Partition) continues(b []byte, next, last uint64) error {
	le := binary.LittleEndian
	idx, term := le.Uint64(b[offRaftIndex:]), le.Uint64(b[offRaftTerm:])
	if idx != next {
		return fmt.Errorf("%w: %s: entries start at index %d, the log ends at %d (TruncateAfter first to replace entries)", ErrNotContiguous, p.name, idx, next-1)
	}
	if term < last {
		return fmt.Errorf("%w: %s: entry %d has term %d, the last entry has term %d", ErrTermDecrease, p.name, idx, term, last)
	}
	return nil
}

// publish makes the frames of the run, just written at the end of its
// segment, visible: sizes, offsets, index entries, terms, and the end of
// each request.
func (p *Partition) publish(rn *run) {
	o := &p.s.opts
	le := binary.LittleEndian
	seg := rn.seg
	now := o.Now()
	p.mu.Lock()
	if seg.size == 0 {
		seg.created = now
	}
	for i, b := range rn.bufs {
		for f := b; len(f) > 0; {
			l := frameLen(f)
			if seg.size > 0 && seg.sinceIdx >= o.IndexIntervalBytes {
				seg.entries = append(seg.entries, indexEntry{rel: uint32(seg.next - seg.base), pos: uint32(seg.size),
					irel: uint32(seg.nextIndex - seg.firstIndex), ts: seg.maxTs})
				seg.sinceIdx = 0
			}
			idx, t := le.Uint64(f[offRaftIndex:]), le.Uint64(f[offRaftTerm:])
			if EntryType(f[offType]) == EntryData {
				seg.next += int64(le.Uint32(f[offCount:]))
				seg.maxTs = max(seg.maxTs, int64(le.Uint64(f[offMaxTs:])))
			}
			seg.size += int64(l)
			seg.sinceIdx += l
			seg.nextIndex = idx + 1
			p.terms = addRun(p.terms, idx, t)
			p.lastTerm = t
			f = f[l:]
		}
		r := rn.reqs[i]
		r.end, r.endIdx = seg.next, seg.nextIndex-1
		if n := len(p.written); n == 0 || p.written[n-1] != r {
			p.written = append(p.written, r)
		}
	}
	p.mu.Unlock()
	p.next.Store(seg.next)
	p.lastIdx.Store(seg.nextIndex - 1)
}

// synced records a successful fdatasync of seg, and the durable end's move
// for the partition's OnDurable hook.
func (p *Partition) synced(seg *segment) {
	seg.synced, seg.syncedNext, seg.syncedIdx = seg.size, seg.next, seg.nextIndex
	if seg.nextIndex-1 > p.durIdx.Load() {
		p.durIdx.Store(seg.nextIndex - 1)
	}
	if seg == p.active() || seg.next > p.durable.Load() {
		if end := max(p.durable.Load(), seg.next); end != p.durable.Load() {
			p.durable.Store(end)
			if p.onDurable != nil {
				p.s.moved = append(p.s.moved, durableMove{hook: p.onDurable, end: end})
			}
		}
	}
}

// syncFailed handles a failed fdatasync of seg: after such a failure the
// kernel may have dropped the dirty pages, so the unsynced tail is truncated
// back to the last synced size and its appends fail.
func (p *Partition) syncFailed(seg *segment, err error) error {
	err = ioError("fdatasync", seg.path, err)
	p.s.opts.Logger.Error("spool log: fdatasync failed; dropping the unsynced tail", "file", seg.path,
		"position", seg.synced, "bytes_dropped", seg.size-seg.synced, "err", err)
	if terr := seg.log.Truncate(seg.synced); terr != nil {
		p.failed = fmt.Errorf("spool log: partition %s: cannot truncate %s after a failed sync (%v); reopen the store: %w", p.name, seg.path, terr, err)
		return p.failed
	}
	p.mu.Lock()
	p.clearReadHints()
	seg.size, seg.next, seg.nextIndex, seg.dirty = seg.synced, seg.syncedNext, seg.syncedIdx, false
	for len(seg.entries) > 0 && int64(seg.entries[len(seg.entries)-1].pos) >= seg.size {
		seg.entries = seg.entries[:len(seg.entries)-1]
	}
	seg.sinceIdx = 0
	p.trimTerms(seg.nextIndex)
	p.mu.Unlock()
	p.next.Store(p.active().next)
	p.lastIdx.Store(p.active().nextIndex - 1)
	return err
}

// syncDirty fdatasyncs the active segment if it has unsynced bytes
// (FsyncInterval timer, Close). A failure drops the unsynced tail
// (syncFailed, which logs it) and is returned.
func (p *Partition) syncDirty() error {
	if p.failed != nil {
		return nil
	}
	seg := p.active()
	if seg.synced == seg.size && p.durable.Load() == seg.next && p.durIdx.Load() == seg.nextIndex-1 {
		return nil
	}
	seg.dirty = false
	if err := seg.log.Sync(); err != nil {
		return p.syncFailed(seg, err)
	}
	p.synced(seg)
	return nil
}

// Roll closes the active segment and starts a new one (no-op if it is empty).
func (p *Partition) Roll() error {
	p.s.roundMu.Lock()
	defer p.s.unlockRound(nil)
	if p.failed != nil {
		return p.failed
	}
	p.mu.RLock()
	closed := p.closed
	p.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return p.roll()
}

// A segment that holds no record (only raft entries without records) is not
// rolled: segments are named by base offset, and the next one would get the
// same name. Such a segment may grow past SegmentBytes, by as many
// record-less entries as raft writes in a row.
func (p *Partition) roll() error {
	old := p.active()
	if old.size == 0 || old.next == old.base {
		return nil
	}
	fsys := p.s.opts.FS
	if old.synced < old.size || old.dirty || old.behind {
		old.dirty = false
		if err := old.log.Sync(); err != nil {
			// behind stays: the journal still holds what the file may lack.
			err = p.syncFailed(old, err)
			p.cutWritten(old.nextIndex, err)
			return err
		}
		old.behind = false
		p.synced(old)
	}
	if err := old.writeIndexes(fsys); err != nil {
		return ioError("index write", old.idxPath(), err)
	}
	seg, err := openSegment(fsys, p.dir, old.next, true)
	if err != nil {
		return ioError("segment create", p.dir, err)
	}
	seg.firstIndex, seg.nextIndex, seg.syncedIdx = old.nextIndex, old.nextIndex, old.nextIndex
	if err := fsys.SyncDir(p.dir); err != nil {
		seg.closeFiles()
		removeSegmentFiles(fsys, p.dir, seg.base)
		return ioError("directory sync", p.dir, err)
	}
	seg.entries = []indexEntry{}
	p.mu.Lock()
	old.closed, old.nIdx, old.entries = true, len(old.entries), nil
	p.segs = append(p.segs, seg)
	p.mu.Unlock()
	return nil
}

// maintain rolls an old active segment and applies retention. Caller holds roundMu.
func (p *Partition) maintain() error {
	if p.failed != nil {
		return nil
	}
	o := &p.s.opts
	now := o.Now()
	if seg := p.active(); seg.size > 0 && now.Sub(seg.created) >= o.SegmentAge {
		if err := p.roll(); err != nil {
			return err
		}
	}
	age, maxBytes := o.RetentionAge, o.RetentionBytes
	if p.retention {
		age, maxBytes = p.retentionAge, p.retentionMax
	}
	if age == 0 && maxBytes == 0 {
		return nil
	}
	var total int64
	for _, seg := range p.segs {
		total += seg.size
	}
	cut := now.Add(-age).UnixMilli()
	i := 0
	for ; i < len(p.segs)-1; i++ {
		seg := p.segs[i]
		old := age > 0 && seg.maxTs < cut
		big := maxBytes > 0 && total > maxBytes
		if !old && !big {
			break
		}
		total -= seg.size
	}
	if i == 0 {
		return nil
	}
	if err := p.s.checkpoint(); err != nil {
		return err
	}
	newStart := p.segs[i].base
	prev := p.segs[i].firstIndex - 1
	prevTerm := p.termAt(prev)
	if err := writeLogStart(o.FS, p.dir, logStart{offset: newStart, index: prev, term: prevTerm}); err != nil {
		return err
	}
	p.mu.Lock()
	p.clearReadHints()
	gone := slices.Clone(p.segs[:i])
	p.segs = slices.Clone(p.segs[i:])
	p.start = newStart
	p.prevIndex, p.prevTerm = prev, prevTerm
	// Keep the run holding the new first entry (it may start before it) and the later ones.
	k := max(sort.Search(len(p.terms), func(k int) bool { return p.terms[k].first > prev+1 })-1, 0)
	p.terms = slices.Clone(p.terms[k:])
	p.mu.Unlock()
	p.startA.Store(newStart)
	p.firstIdx.Store(prev + 1)
	for _, seg := range gone {
		seg.closeFiles()
		removeSegmentFiles(o.FS, p.dir, seg.base)
	}
	if err := o.FS.SyncDir(p.dir); err != nil {
		o.Logger.Warn("spool log: directory sync after retention", "dir", p.dir, "err", err)
	}
	o.Logger.Info("spool log: retention deleted segments", "partition", p.name, "segments", len(gone), "log_start", newStart)
	return nil
}
