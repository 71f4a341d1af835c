package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const logStartFile = "log-start"

// Partition is one append-only log: a directory of segments.
//
// Mutations (appends, rolls, retention, truncation) happen only while
// holding Store.roundMu; readers take mu.RLock and see a consistent view.
type Partition struct {
	s    *Store
	name string
	dir  string
	id   int // position in Store.order, for stable iteration

	mu     sync.RWMutex
	segs   []*segment // (view) ascending base offsets; the last one is active
	start  int64      // (view) log start offset
	closed bool       // (view)

	next    atomic.Int64 // log end offset
	durable atomic.Int64 // everything below is fsynced
	startA  atomic.Int64
	failed  error // set by the appender when the files are in an unknown state
	// quarantine is the first corruption found in this partition (at open
	// or by a read); once set, appends are refused. See Quarantine.
	quarantine atomic.Pointer[CorruptionError]
	syncErr    error // fdatasync failure of the current round
	run        run   // frames of this round not written yet; guarded by Store.roundMu
	// written are the requests of this round written to the partition so
	// far, for a cut back later in the round (cutWritten); guarded by
	// Store.roundMu, emptied at the end of each round.
	written []*request

	// The raft view of the log (entries, not offsets). terms, prevIndex and
	// prevTerm are (view) fields: written under mu while holding
	// Store.roundMu. lastTerm is the term of the last entry (prevTerm when
	// the log is empty). prevIndex/prevTerm are the index and term of the
	// entry just before the first one (0, 0 until retention deletes a prefix).
	terms     []termRun
	prevIndex uint64
	prevTerm  uint64
	lastTerm  uint64
	lastIdx   atomic.Uint64 // LastIndex: raft index of the last entry written
	firstIdx  atomic.Uint64 // FirstIndex
	durIdx    atomic.Uint64 // last raft index known durable
	floor     atomic.Uint64 // TruncateAfter refuses to go below it (SetTruncateFloor)

	// onDurable is told each new durable end (SetOnDurable); guarded by Store.roundMu.
	onDurable func(end int64)

	// Where recent reads ended (read.go, readHint): set under mu.RLock,
	// cleared under mu.
	hints    [readHints]atomic.Pointer[readHint]
	hintTurn atomic.Uint32

	// Retention of this partition (SetRetention); guarded by Store.roundMu.
	// Unset, the Store's Options apply.
	retention    bool
	retentionAge time.Duration
	retentionMax int64
}

// SetRetention gives this partition its own retention (a topic's), in place
// of the Store's RetentionAge and RetentionBytes: whole closed segments
// whose newest record is older than age, or beyond a total of maxBytes, are
// deleted by the next maintenance. Zero means no limit of that kind.
func (p *Partition) SetRetention(age time.Duration, maxBytes int64) error {
	if age < 0 || maxBytes < 0 {
		return fmt.Errorf("spool log: %s: negative retention (%v, %d bytes)", p.name, age, maxBytes)
	}
	p.s.roundMu.Lock()
	defer p.s.roundMu.Unlock()
	p.retention, p.retentionAge, p.retentionMax = true, age, maxBytes
	return nil
}

// SetOnDurable installs hook, called with the new durable end each time the
// partition's durable end moves (after a group commit, a timer fsync with
// FsyncInterval, a roll or Close). It runs on the goroutine that moved the
// end once it has released every lock of this package, before the appends
// that became durable are completed; it must not block. Calls for one
// partition may overlap (an appender round and Close): treat the end as a
// high-water mark. The owner reads DurableOffset after installing it.
func (p *Partition) SetOnDurable(hook func(end int64)) {
	p.s.roundMu.Lock()
	defer p.s.roundMu.Unlock()
	p.onDurable = hook
}

// Quarantine marks the partition as damaged by ce: from now on appends fail
// with ErrQuarantined (those already written stay). Reads still serve
// whatever passes its checks; the owner decides how far to serve (the
// engine stops at the damage). It reports whether ce is the first: only the
// first corruption is kept and should be reported.
func (p *Partition) Quarantine(ce *CorruptionError) bool {
	return p.quarantine.CompareAndSwap(nil, ce)
}

// Quarantined returns the corruption that quarantined the partition, or nil.
func (p *Partition) Quarantined() *CorruptionError { return p.quarantine.Load() }

// quarantineError is what appends to a quarantined partition fail with.
func (p *Partition) quarantineError(ce *CorruptionError) error {
	return fmt.Errorf("%w: %s: %v; it serves records up to offset %d and refuses appends until repaired (spoold repair, docs/operations.md)",
		ErrQuarantined, p.name, ce, ce.Offset)
}

// StartOffset returns the first offset still in the log.
func (p *Partition) StartOffset() int64 { return p.startA.Load() }

// NextOffset returns the log end offset: the offset the next record gets.
func (p *Partition) NextOffset() int64 { return p.next.Load() }

// DurableOffset returns the offset below which every record is fsynced.
func (p *Partition) DurableOffset() int64 { return p.durable.Load() }

// Name returns the partition's name.
func (p *Partition) Name() string { return p.name }

func (p *Partition) active() *segment { return p.segs[len(p.segs)-1] }

// openPartition opens or creates the partition directory and recovers it.
func openPartition(s *Store, name string) (*Partition, error) {
	p := &Partition{s: s, name: name, dir: filepath.Join(s.dir, name)}
	fsys := s.opts.FS
	if _, err := fsys.ReadDir(p.dir); errors.Is(err, fs.ErrNotExist) {
		if err := fsys.MkdirAll(p.dir, DirMode); err != nil {
			return nil, fmt.Errorf("spool log: create partition %s: %w", name, err)
		}
		if err := fsys.SyncDir(s.dir); err != nil {
			return nil, fmt.Errorf("spool log: create partition %s: %w", name, err)
		}
	}
	if err := p.recover(); err != nil {
		for _, seg := range p.segs {
			seg.closeFiles()
		}
		return nil, err
	}
	return p, nil
}

func (p *Partition) recover() error {
	o := &p.s.opts
	fsys := o.FS
	ents, err := fsys.ReadDir(p.dir)
	if err != nil {
		return fmt.Errorf("spool log: read partition dir: %w", err)
	}
	var bases []int64
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".tmp") {
			fsys.Remove(filepath.Join(p.dir, n))
			continue
		}
		if b, ok := strings.CutSuffix(n, ".log"); ok && len(b) == 20 {
			if v, err := strconv.ParseInt(b, 10, 64); err == nil && v >= 0 {
				bases = append(bases, v)
			}
		}
	}
	slices.Sort(bases)
	var damaged *CorruptionError // with QuarantineCorrupt: the damage found
	ls, err := readLogStart(fsys, p.dir)
	lsDamaged := false
	if ce := (*CorruptionError)(nil); errors.As(err, &ce) && o.QuarantineCorrupt {
		damaged, ls, err, lsDamaged = ce, logStart{offset: -1}, nil, true // serve from the first segment
	}
	if err != nil {
		return err
	}
	logStartOff := ls.offset
	// Segments wholly below the log start are leftovers of an interrupted
	// retention or compaction: those followed by a segment that starts at
	// or before the log start, both as an offset and (when its first frame
	// can be read) as a raft index. A replicated partition's log start may
	// fall inside a segment whose successor starts at that offset with
	// entries the log still needs (CompactTo keeps it).
	for len(bases) > 1 && bases[1] <= logStartOff && !needed(fsys, p.dir, bases[1], ls.index) {
		removeSegmentFiles(fsys, p.dir, bases[0])
		bases = bases[1:]
	}
	p.prevIndex, p.prevTerm = ls.index, ls.term
	if lsDamaged && len(bases) > 0 {
		// The log start's index is unknown: trust the first segment's first entry.
		if idx, ok := firstRaftIndex(fsys, filepath.Join(p.dir, segmentName(bases[0], ".log"))); ok {
			p.prevIndex = idx - 1
		}
	}
	p.lastTerm = p.prevTerm
	if len(bases) == 0 {
		seg, err := openSegment(fsys, p.dir, max(logStartOff, 0), true)
		if err != nil {
			return fmt.Errorf("spool log: create segment: %w", err)
		}
		if err := fsys.SyncDir(p.dir); err != nil {
			seg.closeFiles()
			return fmt.Errorf("spool log: create segment: %w", err)
		}
		seg.entries = []indexEntry{}
		seg.firstIndex, seg.nextIndex, seg.syncedIdx = p.prevIndex+1, p.prevIndex+1, p.prevIndex+1
		p.segs = []*segment{seg}
	}
	nextIndex := p.prevIndex + 1
	for i, base := range bases {
		seg, err := openSegment(fsys, p.dir, base, false)
		if err != nil {
			return fmt.Errorf("spool log: open segment: %w", err)
		}
		seg.firstIndex, seg.nextIndex = nextIndex, nextIndex
		p.segs = append(p.segs, seg)
		var want int64 = -1
		if i+1 < len(bases) {
			want = bases[i+1]
		}
		err = p.recoverSegment(seg, want)
		nextIndex = seg.nextIndex
		if err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) || !o.QuarantineCorrupt {
				return err
			}
			// seg holds its good prefix; later segments stay unopened and untouched.
			damaged = ce
			break
		}
	}
	first, last := p.segs[0], p.active()
	p.start = max(logStartOff, first.base)
	if p.start > last.next {
		ce := &CorruptionError{File: filepath.Join(p.dir, logStartFile), Position: 0, Offset: last.next,
			Reason: fmt.Sprintf("log start %d is beyond the end of the log %d", logStartOff, last.next)}
		if !o.QuarantineCorrupt {
			return ce
		}
		damaged, p.start = ce, last.next
	}
	if damaged != nil {
		if damaged.Offset < 0 || damaged.Offset > last.next {
			damaged.Offset = last.next // where what is served ends
		}
		p.quarantine.Store(damaged)
		p.failed = p.quarantineError(damaged) // no appends, syncs or index writes
	}
	p.startA.Store(p.start)
	p.next.Store(last.next)
	p.durable.Store(last.next)
	p.firstIdx.Store(p.prevIndex + 1)
	p.lastIdx.Store(last.nextIndex - 1)
	p.durIdx.Store(last.nextIndex - 1)
	return nil
}

// needed reports whether the segment before the one at base holds entries
// after the log start's index: the segment at base starts past index+1.
func needed(fsys FS, dir string, base int64, index uint64) bool {
	idx, ok := firstRaftIndex(fsys, filepath.Join(dir, segmentName(base, ".log")))
	return ok && idx > index+1
}

// firstRaftIndex reads the raft index of the first batch of a segment file.
func firstRaftIndex(fsys FS, path string) (uint64, bool) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var hb [BatchHeaderSize]byte
	if _, err := f.ReadAt(hb[:], 0); err != nil {
		return 0, false
	}
	h, err := DecodeBatchHeader(hb[:])
	if err != nil || !headerCRCOK(hb[:]) || h.RaftIndex == 0 {
		return 0, false
	}
	return h.RaftIndex, true
}

// recoverSegment scans seg (from its last valid index entry) and rebuilds
// its index when needed. nextBase is the base of the following segment, or
// -1 if seg is the last (active) one, where a torn tail is truncated.
func (p *Partition) recoverSegment(seg *segment, nextBase int64) error {
	o := &p.s.opts
	last := nextBase < 0
	fi, err := seg.log.Stat()
	if err != nil {
		return err
	}
	seg.size = fi.Size()
	if seg.size > MaxSegmentBytes+maxBatchLength {
		seg.size, seg.entries = 0, []indexEntry{} // serve none of it if quarantined
		return &CorruptionError{File: seg.path, Offset: seg.base, Reason: "segment file too large"}
	}
	entries, indexOK := readIndexes(seg)
	w := newWindowReader(seg.log, seg.size)
	st := scanState{next: seg.base, nextIndex: seg.firstIndex, lastTerm: p.lastTerm, maxTs: noTimestamp}
	var out scanState
	scanned := false
	if len(entries) > 0 && o.FastOpen {
		// Walk the headers up to the last index entry (for the terms), then
		// verify everything from there.
		e := entries[len(entries)-1]
		pre, ok := walkHeaders(seg, st, int64(e.pos))
		if ok && pre.next == seg.base+int64(e.rel) && pre.nextIndex == seg.firstIndex+uint64(e.irel) {
			pre.maxTs, pre.entries = e.ts, entries
			out = scan(w, seg, pre, o.IndexIntervalBytes)
			scanned = out.ioErr != nil || out.badPos != int64(e.pos)
		}
		if !scanned {
			// The index does not match the batches: it is stale. Rebuild.
			indexOK = false
		}
	}
	if !scanned {
		out = scan(w, seg, st, o.IndexIntervalBytes)
	}
	if out.ioErr != nil {
		return fmt.Errorf("spool log: read %s: %w", seg.path, out.ioErr)
	}
	// The terms of what the scan accepted, good prefix or all.
	for _, r := range out.runs {
		p.terms = addRun(p.terms, r.first, r.term)
	}
	p.lastTerm = out.lastTerm
	seg.nextIndex = out.nextIndex
	// goodPrefix leaves seg holding what precedes the damage (in memory
	// only: the file is left as found), for a quarantined open.
	goodPrefix := func(ce *CorruptionError) error {
		seg.size, seg.next, seg.maxTs = out.pos, out.next, out.maxTs
		seg.entries = out.entries
		if seg.entries == nil {
			seg.entries = []indexEntry{}
		}
		return ce
	}
	if out.badPos >= 0 {
		if !last || out.misplaced {
			return goodPrefix(&CorruptionError{File: seg.path, Position: out.badPos, Offset: out.next, Reason: out.reason})
		}
		if v := findValidAfter(w, out.badPos+1, out.next); v >= 0 {
			return goodPrefix(&CorruptionError{File: seg.path, Position: out.badPos, Offset: out.next,
				Reason: fmt.Sprintf("%s; an intact batch follows at byte %d", out.reason, v)})
		}
		dropped := seg.size - out.pos
		if err := seg.log.Truncate(out.pos); err != nil {
			return fmt.Errorf("spool log: truncate torn tail of %s: %w", seg.path, err)
		}
		o.Logger.Warn("spool log: truncated torn tail", "file", seg.path, "position", out.pos,
			"bytes_dropped", dropped, "reason", out.reason)
		seg.size = out.pos
		indexOK = false
	}
	if !slices.Equal(out.entries, entries) {
		indexOK = false
	}
	seg.next, seg.maxTs, seg.sinceIdx = out.next, out.maxTs, out.sinceIdx
	seg.entries = out.entries
	if seg.entries == nil {
		seg.entries = []indexEntry{}
	}
	if !last && seg.next != nextBase {
		return goodPrefix(&CorruptionError{File: seg.path, Position: seg.size, Offset: seg.next,
			Reason: fmt.Sprintf("segment ends at offset %d but the next segment starts at %d", seg.next, nextBase)})
	}
	if !indexOK {
		if err := seg.writeIndexes(o.FS); err != nil {
			return fmt.Errorf("spool log: rebuild index of %s: %w", seg.path, err)
		}
	}
	if !last {
		seg.closed, seg.nIdx, seg.entries = true, len(seg.entries), nil
		return nil
	}
	// Active segment: make what we found durable before calling it durable.
	if err := seg.log.Sync(); err != nil {
		return ioError("fdatasync", seg.path, err)
	}
	seg.synced, seg.syncedNext, seg.syncedIdx = seg.size, seg.next, seg.nextIndex
	if seg.size > 0 {
		if hb, err := w.get(0, BatchHeaderSize); err == nil {
			if h, err := DecodeBatchHeader(hb); err == nil {
				seg.created = time.UnixMilli(h.FirstTimestamp)
			}
		}
	}
	return nil
}

func removeSegmentFiles(fsys FS, dir string, base int64) {
	for _, ext := range []string{".log", ".index", ".timeindex"} {
		fsys.Remove(filepath.Join(dir, segmentName(base, ext)))
	}
}

// logStart is the content of the log-start file: the first offset kept,
// and the raft index and term of the entry just before the first one kept.
type logStart struct {
	offset      int64
	index, term uint64
}

const logStartSize = 28 // offset i64, index u64, term u64, CRC32C u32

// readLogStart returns the persisted log start, or offset -1 if there is none.
func readLogStart(fsys FS, dir string) (logStart, error) {
	name := filepath.Join(dir, logStartFile)
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return logStart{offset: -1}, nil
	}
	if err != nil {
		return logStart{}, err
	}
	defer f.Close()
	var b [logStartSize]byte
	if n, _ := f.ReadAt(b[:], 0); n != len(b) {
		return logStart{}, &CorruptionError{File: name, Offset: -1, Reason: fmt.Sprintf("%d bytes, want %d", n, logStartSize)}
	}
	le := binary.LittleEndian
	if crc32.Checksum(b[:24], castagnoli) != le.Uint32(b[24:]) {
		return logStart{}, &CorruptionError{File: name, Offset: -1, Reason: "bad crc"}
	}
	return logStart{offset: int64(le.Uint64(b[:8])), index: le.Uint64(b[8:]), term: le.Uint64(b[16:])}, nil
}

// writeLogStart persists the log start atomically: tmp + fsync + rename + dir fsync.
func writeLogStart(fsys FS, dir string, ls logStart) error {
	name := filepath.Join(dir, logStartFile)
	var b [logStartSize]byte
	le := binary.LittleEndian
	le.PutUint64(b[:8], uint64(ls.offset))
	le.PutUint64(b[8:], ls.index)
	le.PutUint64(b[16:], ls.term)
	le.PutUint32(b[24:], crc32.Checksum(b[:24], castagnoli))
	err := WriteFileAtomic(fsys, name, b[:])
	if err != nil {
		return fmt.Errorf("spool log: persist log start %d: %w", ls.offset, err)
	}
	return nil
}
