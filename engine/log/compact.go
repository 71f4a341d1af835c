package log

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"time"
)

// What a replicated partition needs to delete a prefix that every replica
// agrees on (CompactTo), and to start again from a snapshot (ResetTo). Local
// retention (SetRetention, maintain) decides alone on each node; a raft
// group's leader asks RetentionPoint where its own retention would start the
// log and proposes that point, and every replica applies it with CompactTo
// (docs/replication.md, "Snapshots, compaction and retention").

// ErrNotCompactable is wrapped by CompactTo for a point the log cannot
// compact to (past its end, or an offset that is not where the entry at
// index starts).
var ErrNotCompactable = errors.New("spool log: cannot compact to that point")

// RetentionPoint returns where retention by age (segments whose newest
// record is older than now-age) and size (the oldest segments beyond
// maxBytes in total) would start the log: the base offset and first raft
// index of the first segment to keep. Only closed segments are ever given
// up, like SetRetention's; the point returned is past the current log
// start, at most below (an offset: the committed end) and its index at most
// keepIndex (the first entry that must stay, say the lowest a follower
// still needs). ok is false when nothing would be deleted. Zero age and
// maxBytes mean no limit of that kind (then ok is false).
func (p *Partition) RetentionPoint(age time.Duration, maxBytes int64, now time.Time, below int64, keepIndex uint64) (offset int64, index uint64, ok bool) {
	if age <= 0 && maxBytes <= 0 {
		return 0, 0, false
	}
	p.s.roundMu.Lock()
	defer p.s.roundMu.Unlock()
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed || p.failed != nil {
		return 0, 0, false
	}
	var total int64
	for _, seg := range p.segs {
		total += seg.size
	}
	cut := now.Add(-age).UnixMilli()
	for i := 0; i < len(p.segs)-1; i++ {
		seg, next := p.segs[i], p.segs[i+1]
		old := age > 0 && seg.maxTs < cut
		big := maxBytes > 0 && total > maxBytes
		if !old && !big || next.base > below || next.firstIndex > keepIndex {
			break
		}
		total -= seg.size
		if next.base > p.start {
			offset, index, ok = next.base, next.firstIndex, true
		}
	}
	return offset, index, ok
}

// OffsetOfIndex returns the data offset the records of entry index start
// at (for an entry without records, the offset the next record takes):
// NextOffset for LastIndex()+1. ErrCompacted below FirstIndex,
// ErrUnavailable past LastIndex()+1. It reads one frame header at most.
func (p *Partition) OffsetOfIndex(index uint64) (int64, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return 0, ErrClosed
	}
	return p.offsetOfIndexLocked(index)
}

func (p *Partition) offsetOfIndexLocked(index uint64) (int64, error) {
	last := p.active().nextIndex - 1
	switch {
	case index < p.prevIndex+1:
		return 0, fmt.Errorf("%w: %s: index %d, the log starts after %d", ErrCompacted, p.name, index, p.prevIndex)
	case index == last+1:
		return p.active().next, nil
	case index > last+1:
		return 0, fmt.Errorf("%w: %s: index %d, the log ends at %d", ErrUnavailable, p.name, index, last)
	}
	j := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].firstIndex > index }) - 1
	seg := p.segs[max(j, 0)]
	if index == seg.nextIndex { // an empty segment's "first" entry is the next one's
		return seg.next, nil
	}
	_, h, err := seg.findIndex(index)
	if err != nil {
		return 0, err
	}
	return h.BaseOffset, nil
}

// CompactTo gives up the log below a point every replica of a raft group
// agrees on: the entries before index and the records before offset, which
// must be where the records of entry index start (OffsetOfIndex; for
// LastIndex()+1, NextOffset). StartOffset becomes offset: reads below it
// are refused from now on, as they are on every other replica. Whole
// segments whose entries are all before index are deleted and FirstIndex
// moves to the first entry of the first segment kept, which may be before
// index: segments are cut where each replica rolled them, so a replica may
// keep more entries (never more records) than another. A point at or below
// the current one is a no-op.
//
// Crash safety as for retention: the new log start (offset, and the index
// and term of the entry before the first segment kept) is written
// atomically first, then the segments are deleted; an open after a crash
// deletes the segments wholly before the log start (recover). The caller
// must have saved what it needs of the entries given up (a raft snapshot)
// before calling it.
func (p *Partition) CompactTo(index uint64, offset int64) error {
	p.s.roundMu.Lock()
	defer p.s.unlockRound(nil)
	if p.failed != nil {
		return p.failed
	}
	if ce := p.quarantine.Load(); ce != nil {
		return p.quarantineError(ce)
	}
	p.mu.RLock()
	closed := p.closed
	var at int64
	var err error
	if !closed {
		at, err = p.offsetOfIndexLocked(index)
	}
	p.mu.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case errors.Is(err, ErrCompacted):
		if offset <= p.start {
			return nil // already given up
		}
		return fmt.Errorf("%w: %s: index %d is before the log start (after %d) but offset %d is past the start offset %d", ErrNotCompactable, p.name, index, p.prevIndex, offset, p.start)
	case err != nil:
		return fmt.Errorf("%w: %s: %w", ErrNotCompactable, p.name, err)
	case at != offset:
		return fmt.Errorf("%w: %s: the records of entry %d start at offset %d, not %d", ErrNotCompactable, p.name, index, at, offset)
	case offset <= p.start && index <= p.prevIndex+1:
		return nil
	}
	// The first segment kept: the last one whose first entry is at or
	// before index (the active one is always kept).
	i := 0
	for i+1 < len(p.segs) && p.segs[i+1].firstIndex <= index && p.segs[i+1].base <= offset {
		i++
	}
	if err := p.s.checkpoint(); err != nil {
		return err
	}
	newStart := max(offset, p.start)
	prev := p.segs[i].firstIndex - 1
	prevTerm := p.termAt(prev)
	o := &p.s.opts
	if err := writeLogStart(o.FS, p.dir, logStart{offset: newStart, index: prev, term: prevTerm}); err != nil {
		return err
	}
	p.mu.Lock()
	p.clearReadHints()
	gone := slices.Clone(p.segs[:i])
	p.segs = slices.Clone(p.segs[i:])
	p.start = newStart
	p.prevIndex, p.prevTerm = prev, prevTerm
	k := max(sort.Search(len(p.terms), func(k int) bool { return p.terms[k].first > prev+1 })-1, 0)
	p.terms = slices.Clone(p.terms[k:])
	p.mu.Unlock()
	p.startA.Store(newStart)
	p.firstIdx.Store(prev + 1)
	for _, seg := range gone {
		seg.closeFiles()
		removeSegmentFiles(o.FS, p.dir, seg.base)
	}
	if len(gone) > 0 {
		if err := o.FS.SyncDir(p.dir); err != nil {
			o.Logger.Warn("spool log: directory sync after compaction", "dir", p.dir, "err", err)
		}
	}
	o.Logger.Info("spool log: compacted", "partition", p.name, "segments", len(gone), "log_start", newStart, "first_index", prev+1)
	return nil
}

// ResetTo replaces the whole log with an empty one that continues after
// entry index of term term, whose next record takes offset: what a raft
// replica does when it installs a snapshot (the records before offset are
// on other replicas, not here). Afterwards LastIndex() is index, Term(index)
// is term, FirstIndex() is index+1, and StartOffset, NextOffset and
// DurableOffset are offset. It refuses to run on a quarantined or failed
// partition.
//
// Crash safety: every segment is deleted, from the last one back (the .log
// first, then its index files), each followed by a directory fsync, as
// TruncateAfter does; then the log start (offset, index, term) is written
// atomically; then the new empty segment is created and the directory
// fsynced. After a crash the log is therefore a prefix of the old one (a
// truncation), or empty after the old log start, or empty after (index,
// term) at offset: the caller, which saved its snapshot first, recognises
// the first two by a log that does not hold (index, term) and calls ResetTo
// again.
func (p *Partition) ResetTo(index, term uint64, offset int64) error {
	if offset < 0 || (index == 0) != (term == 0) {
		return fmt.Errorf("spool log: %s: reset to index %d, term %d, offset %d: an index needs a term (both 0 or neither) and the offset must not be negative", p.name, index, term, offset)
	}
	p.s.roundMu.Lock()
	defer p.s.unlockRound(nil)
	if p.failed != nil {
		return p.failed
	}
	if ce := p.quarantine.Load(); ce != nil {
		return p.quarantineError(ce)
	}
	p.mu.RLock()
	closed := p.closed
	p.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := p.s.checkpoint(); err != nil {
		return err
	}
	p.mu.Lock()
	p.clearReadHints()
	defer p.mu.Unlock()
	o := &p.s.opts
	fsys := o.FS
	fail := func(op, file string, err error) error {
		err = ioError(op, file, err)
		p.failed = fmt.Errorf("spool log: partition %s: reset to index %d failed half way; reopen the store, which recovers the log as it is on disk: %w", p.name, index, err)
		o.Logger.Error("spool log: partition failed", "partition", p.name, "err", p.failed)
		return p.failed
	}
	for k := len(p.segs) - 1; k >= 0; k-- {
		seg := p.segs[k]
		seg.removed, seg.dirty = true, false
		seg.closeFiles()
		if err := fsys.Remove(seg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail("remove", seg.path, err)
		}
		removeSegmentFiles(fsys, p.dir, seg.base)
		if err := fsys.SyncDir(p.dir); err != nil {
			return fail("directory sync", p.dir, err)
		}
	}
	if err := writeLogStart(fsys, p.dir, logStart{offset: offset, index: index, term: term}); err != nil {
		return fail("log start write", p.dir, err)
	}
	seg, err := openSegment(fsys, p.dir, offset, true)
	if err != nil {
		return fail("segment create", p.dir, err)
	}
	if err := fsys.SyncDir(p.dir); err != nil {
		seg.closeFiles()
		return fail("directory sync", p.dir, err)
	}
	seg.entries = []indexEntry{}
	seg.firstIndex, seg.nextIndex, seg.syncedIdx = index+1, index+1, index+1
	seg.created = o.Now()
	p.segs = []*segment{seg}
	p.start, p.prevIndex, p.prevTerm, p.lastTerm, p.terms = offset, index, term, term, nil
	p.startA.Store(offset)
	p.next.Store(offset)
	p.durable.Store(offset)
	p.firstIdx.Store(index + 1)
	p.lastIdx.Store(index)
	p.durIdx.Store(index)
	if p.onDurable != nil {
		p.s.moved = append(p.s.moved, durableMove{hook: p.onDurable, end: offset})
	}
	o.Logger.Info("spool log: reset", "partition", p.name, "index", index, "term", term, "offset", offset)
	return nil
}
