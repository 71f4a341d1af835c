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
// round (engine.Node.Produce hands callbacks to other goroutines). AppendAsync itself blocks while the
// pending queue is full (MaxPendingBytes) and fails at once on a closed store.
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

// round is one group commit: write every pending batch and fdatasync every
// dirty file. It returns the batch with each request's result set; the
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
	var dirty []dirtySeg
	bytes := 0
	for i, r := range batch {
		if r.kind == reqTruncate {
			r.err = r.p.truncateAfter(r.index, true)
			if r.err == nil {
				truncatedInRound(batch[:i], r.p, r.index)
			}
			continue
		}
		bytes += len(*r.buf)
		if seg, newly := r.p.write(r); newly {
			dirty = append(dirty, dirtySeg{p: r.p, seg: seg})
		}
		putBuf(r.buf)
		r.buf = nil
	}
	if s.opts.Fsync == FsyncAlways {
		s.syncRound(dirty)
		for _, d := range dirty {
			d.p.syncErr = nil
		}
		for _, d := range dirty {
			if d.seg.removed {
				continue // deleted by a TruncateAfter later in the round
			}
			if d.err != nil {
				d.p.syncErr = d.p.syncFailed(d.seg, d.err)
			} else {
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
	// Files counts fdatasyncs of segment files; FileSystem, syncs of the
	// whole file system (Options.SyncFileSystem), each standing for two or
	// more files; Fallbacks, file-system syncs that failed and were
	// followed by one fdatasync per file.
	Files, FileSystem, Fallbacks uint64
}

// SyncStats returns the counts so far.
func (s *Store) SyncStats() SyncStats {
	return SyncStats{Files: s.syncs.files.Load(), FileSystem: s.syncs.fileSystem.Load(), Fallbacks: s.syncs.fallbacks.Load()}
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

// write appends r's frames to the active segment (rolling first when
// needed, possibly between frames). It returns the last segment written and
// whether it just became dirty; on failure r.err is set and nothing of r
// stays in the log.
func (p *Partition) write(r *request) (*segment, bool) {
	if p.failed != nil {
		r.err = p.failed
		return nil, false
	}
	if ce := p.quarantine.Load(); ce != nil {
		r.err = p.quarantineError(ce)
		return nil, false
	}
	o := &p.s.opts
	b := *r.buf
	if r.kind == reqEntries {
		if err := p.continues(b); err != nil {
			r.err = err
			return nil, false
		}
	}
	before := p.active().nextIndex - 1
	var seg *segment
	newly, wrote, first := false, false, true
	for len(b) > 0 {
		seg = p.active()
		if seg.size > 0 && (seg.size+int64(frameLen(b)) > o.SegmentBytes || o.Now().Sub(seg.created) >= o.SegmentAge) {
			if err := p.roll(); err != nil {
				r.err = err
				break
			}
			seg = p.active()
		}
		n := frameLen(b) // at least one frame, then as many as fit
		for n < len(b) && seg.size+int64(n+frameLen(b[n:])) <= o.SegmentBytes {
			n += frameLen(b[n:])
		}
		base := seg.next
		if err := p.writeChunk(seg, b[:n], r.kind == reqRecords); err != nil {
			r.err = err
			break
		}
		if first {
			r.base, first = base, false
		}
		wrote = true
		if !seg.dirty {
			newly, seg.dirty = true, true
		}
		b = b[n:]
	}
	if r.err != nil {
		if wrote && p.failed == nil {
			// Frames of r went to an earlier segment: take them back.
			if err := p.truncateAfter(before, false); err != nil {
				p.failed = fmt.Errorf("spool log: partition %s: cannot take back a partly written append (%v); reopen the store: %w", p.name, err, r.err)
			}
		}
		return nil, false
	}
	r.end, r.endIdx = seg.next, seg.nextIndex-1
	return seg, newly
}

// frameLen returns the Length field of the frame at the start of b.
func frameLen(b []byte) int { return int(binary.LittleEndian.Uint32(b[offLength:])) }

// continues checks that the frames b (from AppendEntries) continue the log:
// the first raft index is LastIndex()+1 and the term does not go down.
func (p *Partition) continues(b []byte) error {
	le := binary.LittleEndian
	idx, term := le.Uint64(b[offRaftIndex:]), le.Uint64(b[offRaftTerm:])
	if next := p.active().nextIndex; idx != next {
		return fmt.Errorf("%w: %s: entries start at index %d, the log ends at %d (TruncateAfter first to replace entries)", ErrNotContiguous, p.name, idx, next-1)
	}
	if term < p.lastTerm {
		return fmt.Errorf("%w: %s: entry %d has term %d, the last entry has term %d", ErrTermDecrease, p.name, idx, term, p.lastTerm)
	}
	return nil
}

// writeChunk writes the whole frames b at the end of seg, which must have
// room for them, and publishes them. With assign (single-node records) it
// gives them raft indexes from LastIndex()+1 and the last term (1 in an
// empty log); otherwise the frames carry theirs. Base offsets are always
// assigned here, from the partition's end.
func (p *Partition) writeChunk(seg *segment, b []byte, assign bool) error {
	o := &p.s.opts
	le := binary.LittleEndian
	next, nextIdx, term := seg.next, seg.nextIndex, max(p.lastTerm, 1)
	for f := b; len(f) > 0; {
		l := frameLen(f)
		idx, t := le.Uint64(f[offRaftIndex:]), le.Uint64(f[offRaftTerm:])
		if assign {
			idx, t = nextIdx, term
		}
		setPlacement(f[:l], idx, t, next)
		if EntryType(f[offType]) == EntryData {
			next += int64(le.Uint32(f[offCount:]))
		}
		nextIdx++
		f = f[l:]
	}
	if _, err := seg.log.WriteAt(b, seg.size); err != nil {
		err = ioError("write", seg.path, err)
		if terr := seg.log.Truncate(seg.size); terr != nil {
			p.failed = fmt.Errorf("spool log: partition %s: cannot truncate %s after a failed write (%v); reopen the store: %w", p.name, seg.path, terr, err)
			o.Logger.Error("spool log: partition failed", "partition", p.name, "err", p.failed)
		}
		return err
	}
	now := o.Now()
	p.mu.Lock()
	if seg.size == 0 {
		seg.created = now
	}
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
	p.mu.Unlock()
	p.next.Store(seg.next)
	p.lastIdx.Store(seg.nextIndex - 1)
	return nil
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
// (FsyncInterval timer, Close).
func (p *Partition) syncDirty() {
	if p.failed != nil {
		return
	}
	seg := p.active()
	if seg.synced == seg.size && p.durable.Load() == seg.next && p.durIdx.Load() == seg.nextIndex-1 {
		return
	}
	seg.dirty = false
	if err := seg.log.Sync(); err != nil {
		p.syncFailed(seg, err)
		return
	}
	p.synced(seg)
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
	if old.synced < old.size || old.dirty {
		old.dirty = false
		if err := old.log.Sync(); err != nil {
			return p.syncFailed(old, err)
		}
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
