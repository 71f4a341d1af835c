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

	// onDurable is told each new durable end (SetOnDurable); guarded by Store.roundMu.
	onDurable func(end int64)

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
		if err := fsys.MkdirAll(p.dir, 0o755); err != nil {
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
	logStart, err := readLogStart(fsys, p.dir)
	if ce := (*CorruptionError)(nil); errors.As(err, &ce) && o.QuarantineCorrupt {
		damaged, logStart, err = ce, -1, nil // serve from the first segment
	}
	if err != nil {
		return err
	}
	// Segments wholly below the log start are leftovers of an interrupted retention.
	for len(bases) > 1 && bases[1] <= logStart {
		removeSegmentFiles(fsys, p.dir, bases[0])
		bases = bases[1:]
	}
	if len(bases) == 0 {
		seg, err := openSegment(fsys, p.dir, max(logStart, 0), true)
		if err != nil {
			return fmt.Errorf("spool log: create segment: %w", err)
		}
		if err := fsys.SyncDir(p.dir); err != nil {
			seg.closeFiles()
			return fmt.Errorf("spool log: create segment: %w", err)
		}
		seg.entries = []indexEntry{}
		p.segs = []*segment{seg}
	}
	for i, base := range bases {
		seg, err := openSegment(fsys, p.dir, base, false)
		if err != nil {
			return fmt.Errorf("spool log: open segment: %w", err)
		}
		p.segs = append(p.segs, seg)
		var want int64 = -1
		if i+1 < len(bases) {
			want = bases[i+1]
		}
		if err := p.recoverSegment(seg, want); err != nil {
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
	p.start = max(logStart, first.base)
	if p.start > last.next {
		ce := &CorruptionError{File: filepath.Join(p.dir, logStartFile), Position: 0, Offset: last.next,
			Reason: fmt.Sprintf("log start %d is beyond the end of the log %d", logStart, last.next)}
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
	return nil
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
	st := scanState{next: seg.base, maxTs: noTimestamp}
	verifyAll := !o.FastOpen
	if len(entries) > 0 && !verifyAll {
		e := entries[len(entries)-1]
		st = scanState{pos: int64(e.pos), next: seg.base + int64(e.rel), maxTs: e.ts, entries: entries}
	}
	out := scan(w, seg.base, st, o.IndexIntervalBytes)
	if out.ioErr == nil && len(entries) > 0 && out.badPos == int64(entries[len(entries)-1].pos) {
		// The index points at something that is not a batch: it is stale. Rebuild.
		indexOK = false
		out = scan(w, seg.base, scanState{next: seg.base, maxTs: noTimestamp}, o.IndexIntervalBytes)
	}
	if out.ioErr != nil {
		return fmt.Errorf("spool log: read %s: %w", seg.path, out.ioErr)
	}
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
		if !last {
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
	seg.synced, seg.syncedNext = seg.size, seg.next
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

// readLogStart returns the persisted log start, or -1 if there is none.
func readLogStart(fsys FS, dir string) (int64, error) {
	name := filepath.Join(dir, logStartFile)
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var b [12]byte
	if n, _ := f.ReadAt(b[:], 0); n != len(b) {
		return 0, &CorruptionError{File: name, Offset: -1, Reason: fmt.Sprintf("%d bytes, want 12", n)}
	}
	if crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:]) {
		return 0, &CorruptionError{File: name, Offset: -1, Reason: "bad crc"}
	}
	return int64(binary.LittleEndian.Uint64(b[:8])), nil
}

// writeLogStart persists the log start atomically: tmp + fsync + rename + dir fsync.
func writeLogStart(fsys FS, dir string, off int64) error {
	name := filepath.Join(dir, logStartFile)
	tmp := name + ".tmp"
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(off))
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b[:8], castagnoli))
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b[:], 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, name)
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("spool log: persist log start %d: %w", off, err)
	}
	return nil
}
