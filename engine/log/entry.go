package log

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"slices"
	"sort"
)

// Entry is one raft entry as the partition log stores it: every frame of
// the log is one entry, with consecutive raft indexes.
//
// For EntryData, Data is the entry payload EncodeRecords produced (what the
// leader proposed): the frame without its 36-byte placement prefix. Its
// records take the data offsets from the partition's end at append, the
// same on every replica. For the other types Data is opaque (a conf change,
// or nothing for a new leader's empty entry) and takes no offset.
type Entry struct {
	Index, Term uint64
	Type        EntryType
	Data        []byte
}

// PayloadType tells, for the Data of a raft normal entry, whether it is a
// record payload (EncodeRecords: EntryData) or anything else (EntryNormal),
// without checking its CRC: a record payload is at least 38 bytes long and
// its record count (bytes 4 to 8, little-endian) is not 0. Spool's other
// normal commands must therefore be shorter than 38 bytes or have bytes 4
// to 8 zero; the empty entry of a new leader is EntryNormal. AppendEntries
// still checks a payload it is given as EntryData in full.
func PayloadType(data []byte) EntryType {
	if len(data) >= BatchHeaderSize-PlacementSize && binary.LittleEndian.Uint32(data[offCount-PlacementSize:]) != 0 {
		return EntryData
	}
	return EntryNormal
}

// Errors of the raft view of the log. They are wrapped with details;
// compare with errors.Is.
var (
	// ErrCompacted: the index is below the log start (FirstIndex()-1 is the
	// lowest index whose Term is still known).
	ErrCompacted = errors.New("spool log: raft index compacted")
	// ErrUnavailable: the index is past the end of the log (LastIndex()).
	ErrUnavailable = errors.New("spool log: raft index unavailable")
	// ErrNotContiguous: AppendEntries whose first index is not LastIndex()+1
	// at the time they are written, or entries that are not consecutive.
	ErrNotContiguous = errors.New("spool log: raft entries not contiguous")
	// ErrTermDecrease: an entry whose term is lower than the entry before it.
	ErrTermDecrease = errors.New("spool log: raft term decreases")
	// ErrBelowTruncateFloor: TruncateAfter below the floor SetTruncateFloor set.
	ErrBelowTruncateFloor = errors.New("spool log: truncation below the truncate floor")
	// ErrTruncated: an append whose entries a TruncateAfter queued after it
	// removed in the same group commit, before they were durable.
	ErrTruncated = errors.New("spool log: entries truncated before they were durable")
	// ErrBadEntry: an Entry given to AppendEntries that cannot be stored
	// (unknown type, malformed or damaged record payload).
	ErrBadEntry = errors.New("spool log: bad raft entry")
)

// FirstIndex returns the raft index of the first entry in the log (the one
// after the log start: LastIndex()+1 when the log is empty).
func (p *Partition) FirstIndex() uint64 { return p.firstIdx.Load() }

// LastIndex returns the raft index of the last entry written (durable or
// not; DurableIndex says how far it is durable). 0 for a new log.
func (p *Partition) LastIndex() uint64 { return p.lastIdx.Load() }

// DurableIndex returns the raft index up to which every entry is fsynced.
func (p *Partition) DurableIndex() uint64 { return p.durIdx.Load() }

// SetTruncateFloor sets the index below which TruncateAfter refuses to
// truncate (ErrBelowTruncateFloor): raft's commit index, since only
// uncommitted entries may be replaced. The floor only rises; it is not
// persisted (set it again after opening, from the HardState's commit).
func (p *Partition) SetTruncateFloor(index uint64) {
	for {
		old := p.floor.Load()
		if index <= old || p.floor.CompareAndSwap(old, index) {
			return
		}
	}
}

// TruncateFloor returns the floor SetTruncateFloor set (0 by default).
func (p *Partition) TruncateFloor() uint64 { return p.floor.Load() }

// Term returns the term of the entry at index i, for i in
// [FirstIndex()-1, LastIndex()]: ErrCompacted below, ErrUnavailable above.
// It costs no I/O: the terms of the whole log are kept in memory as runs
// (one per term change), and the last run is checked first.
func (p *Partition) Term(i uint64) (uint64, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return 0, ErrClosed
	}
	return p.termLocked(i)
}

func (p *Partition) termLocked(i uint64) (uint64, error) {
	switch last := p.active().nextIndex - 1; {
	case i < p.prevIndex:
		return 0, fmt.Errorf("%w: %s: index %d, the log starts after %d", ErrCompacted, p.name, i, p.prevIndex)
	case i == p.prevIndex:
		return p.prevTerm, nil
	case i > last:
		return 0, fmt.Errorf("%w: %s: index %d, the log ends at %d", ErrUnavailable, p.name, i, last)
	}
	return p.termAt(i), nil
}

// termAt returns the term of entry i, which must be in the log (or the
// log start's). Caller holds mu or roundMu.
func (p *Partition) termAt(i uint64) uint64 {
	runs := p.terms
	if i == p.prevIndex || len(runs) == 0 || i < runs[0].first {
		return p.prevTerm
	}
	if n := len(runs); runs[n-1].first <= i {
		return runs[n-1].term
	}
	k := sort.Search(len(runs), func(k int) bool { return runs[k].first > i })
	return runs[k-1].term
}

// trimTerms drops the terms of entries from next on and resets lastTerm.
// Caller holds mu and roundMu.
func (p *Partition) trimTerms(next uint64) {
	k := sort.Search(len(p.terms), func(k int) bool { return p.terms[k].first >= next })
	p.terms = p.terms[:k]
	p.lastTerm = p.prevTerm
	if k > 0 {
		p.lastTerm = p.terms[k-1].term
	}
}

// Entries returns the entries with indexes in [lo, hi), starting at lo, in
// order, whose frames total at most maxBytes (but at least one entry). It
// may return fewer than asked (call again from the next index). lo below
// FirstIndex() is ErrCompacted, hi past LastIndex()+1 ErrUnavailable. The
// Data of the entries alias one buffer allocated for this call. Every frame
// returned has passed both its CRCs; damage is a *CorruptionError.
//
// A frame is Data plus 36 bytes (records) or 74 bytes (other types), a few
// bytes more than the entry's protobuf size, so a maxBytes from raft is
// never exceeded. maxBytes is capped at Options.MaxReadBytes (raft's "no
// limit" included), which bounds the memory of one call.
func (p *Partition) Entries(lo, hi, maxBytes uint64) ([]Entry, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, ErrClosed
	}
	last := p.active().nextIndex - 1
	switch {
	case lo <= p.prevIndex:
		return nil, fmt.Errorf("%w: %s: entries from %d, the log starts at %d", ErrCompacted, p.name, lo, p.prevIndex+1)
	case hi > last+1:
		return nil, fmt.Errorf("%w: %s: entries up to %d, the log ends at %d", ErrUnavailable, p.name, hi-1, last)
	case lo >= hi:
		return nil, nil
	}
	maxBytes = min(maxBytes, uint64(p.s.opts.MaxReadBytes)) // raft's "no limit" is MaxUint64
	var out []Entry
	var used uint64
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].firstIndex > lo }) - 1
	for ; i >= 0 && i < len(p.segs) && lo < hi; i++ {
		seg := p.segs[i]
		if lo >= seg.nextIndex {
			continue
		}
		var err error
		had := len(out)
		out, used, err = seg.readEntries(lo, hi, maxBytes, used, out)
		if err != nil {
			return out, err
		}
		lo += uint64(len(out) - had)
		if lo < seg.nextIndex && lo < hi {
			break // the budget ran out inside this segment
		}
	}
	if len(out) == 0 {
		return nil, &CorruptionError{File: p.dir, Position: -1, Offset: -1, Reason: fmt.Sprintf("no frame holds raft index %d", lo)}
	}
	return out, nil
}

// findIndex returns the position and header of the frame of seg holding
// raft index index, reading headers only from the closest index entry.
func (seg *segment) findIndex(index uint64) (int64, BatchHeader, error) {
	pos := seg.lookupIndex(index)
	var hb [BatchHeaderSize]byte
	for pos < seg.size {
		if _, err := seg.log.ReadAt(hb[:], pos); err != nil {
			return 0, BatchHeader{}, fmt.Errorf("spool log: read %s at %d: %w", seg.path, pos, err)
		}
		h, err := DecodeBatchHeader(hb[:])
		if err == nil && int64(h.Length) > seg.size-pos {
			err = fmt.Errorf("frame of %d bytes runs past the segment end", h.Length)
		}
		if err == nil && h.RaftIndex > index {
			err = fmt.Errorf("frame at this position has raft index %d, looking for %d", h.RaftIndex, index)
		}
		if err != nil {
			return 0, BatchHeader{}, &CorruptionError{File: seg.path, Position: pos, Offset: -1, Reason: err.Error()}
		}
		if h.RaftIndex == index {
			return pos, h, nil
		}
		pos += int64(h.Length)
	}
	return 0, BatchHeader{}, &CorruptionError{File: seg.path, Position: seg.size, Offset: -1,
		Reason: fmt.Sprintf("raft index %d not found before the segment end", index)}
}

// readEntries appends to out the entries of seg from lo (which it holds)
// below hi, while the frames fit in maxBytes (used so far: used; at least
// one entry in all).
func (seg *segment) readEntries(lo, hi, maxBytes, used uint64, out []Entry) ([]Entry, uint64, error) {
	pos, first, err := seg.findIndex(lo)
	if err != nil {
		return out, used, err
	}
	if len(out) > 0 && used+uint64(first.Length) > maxBytes {
		return out, used, nil
	}
	n := min(max(int64(maxBytes-min(used, maxBytes)), int64(first.Length)), seg.size-pos)
	buf := make([]byte, n)
	got, err := seg.log.ReadAt(buf, pos)
	if int64(got) < n && err != nil && err != io.EOF {
		return out, used, fmt.Errorf("spool log: read %s at %d: %w", seg.path, pos, err)
	}
	buf = buf[:got]
	for next := lo; next < hi && len(buf) >= BatchHeaderSize; next++ {
		h, err := DecodeBatchHeader(buf)
		if err == nil && int(h.Length) > len(buf) {
			break // beyond what was read: the budget is spent
		}
		if err == nil {
			_, err = checkBatch(buf)
		}
		if err == nil && h.RaftIndex != next {
			err = fmt.Errorf("raft index %d, want %d", h.RaftIndex, next)
		}
		if err != nil {
			return out, used, &CorruptionError{File: seg.path, Position: pos, Offset: h.BaseOffset, Reason: err.Error()}
		}
		if len(out) > 0 && used+uint64(h.Length) > maxBytes {
			break
		}
		e := Entry{Index: h.RaftIndex, Term: h.RaftTerm, Type: h.Type}
		if h.Type == EntryData {
			e.Data = buf[PlacementSize:h.Length:h.Length]
		} else if h.Length > BatchHeaderSize {
			e.Data = buf[BatchHeaderSize:h.Length:h.Length]
		}
		out = append(out, e)
		used += uint64(h.Length)
		pos += int64(h.Length)
		buf = buf[h.Length:]
	}
	return out, used, nil
}

// AppendEntries appends ents (consecutive indexes, non-decreasing terms)
// through the group commit and calls done once they are durable (per the
// Fsync mode), on the appender goroutine in append order, like
// AppendAsync's callback (it must not block). The first index must be
// LastIndex()+1 when the appender writes them, and the first term at least
// the last entry's (else ErrNotContiguous or ErrTermDecrease; to replace a
// suffix, TruncateAfter first: requests are carried out in the order they
// are made). Data of EntryData entries is written as given after a 36-byte
// placement prefix (raft index, term and base offset); it is checked (body
// CRC, record structure) on the caller's goroutine, so a follower never
// stores bytes it could not read back. The appender writes them in chunks,
// rolling segments between entries as needed. ents is not retained.
func (p *Partition) AppendEntries(ents []Entry, done func(error)) {
	if len(ents) == 0 {
		done(nil)
		return
	}
	bp := bufPool.Get().(*[]byte)
	b, err := p.encodeEntries((*bp)[:0], ents)
	*bp = b
	if err != nil {
		putBuf(bp)
		done(err)
		return
	}
	r := reqPool.Get().(*request)
	r.p, r.buf, r.kind, r.doneE = p, bp, reqEntries, done
	if err := p.s.enqueue(context.Background(), r); err != nil {
		putBuf(r.buf)
		r.free()
		done(err)
	}
}

// RecordsProducer returns the producer fields of a record payload
// (EncodeRecords): the producer id, epoch and base sequence a leader
// deduplicates retries by. ok is false when data is not a record payload.
// The fields are not checked against the body CRC here (CheckRecords does).
func RecordsProducer(data []byte) (id int64, epoch int16, seq int32, ok bool) {
	if PayloadType(data) != EntryData {
		return 0, 0, 0, false
	}
	le := binary.LittleEndian
	id = int64(le.Uint64(data[offProducerID-PlacementSize:]))
	epoch = int16(le.Uint16(data[offEpoch-PlacementSize:]))
	seq = int32(le.Uint32(data[offBaseSeq-PlacementSize:]))
	return id, epoch, seq, true
}

// CheckRecords checks a record payload (EncodeRecords) as AppendEntries
// will: its length against maxBatchBytes, its header, body CRC and every
// record. A raft leader calls it before proposing bytes it received from a
// peer: a payload the log refuses at append would stop the replica.
func CheckRecords(data []byte, maxBatchBytes int) error {
	_, err := payloadRecords(data, maxBatchBytes, nil, 0, 0)
	return err
}

// RecordsOf checks a record payload as CheckRecords does and appends its
// records to dst, their offsets counted from 0 (the payload has none yet)
// and their keys and values aliasing data. A node reads what a peer asks
// it to propose with it (a replicated state machine's commands).
func RecordsOf(data []byte, maxBatchBytes int, dst []Record) ([]Record, error) {
	return payloadRecords(data, maxBatchBytes, dst, math.MinInt64, math.MaxInt64)
}

func payloadRecords(data []byte, maxBatchBytes int, dst []Record, lo, hi int64) ([]Record, error) {
	if len(data) < BatchHeaderSize-PlacementSize || PlacementSize+len(data) > maxBatchBytes {
		return dst, fmt.Errorf("%w: %d bytes of records, want %d to %d (MaxBatchBytes)", ErrBadEntry, len(data), BatchHeaderSize-PlacementSize, maxBatchBytes-PlacementSize)
	}
	// The header is checked on a copy with its placement prefix; the body
	// (CRC and records) in place: no copy of the records.
	var hb [BatchHeaderSize]byte
	copy(hb[PlacementSize:], data)
	le := binary.LittleEndian
	le.PutUint32(hb[offLength:], uint32(PlacementSize+len(data)))
	hb[offMagic], hb[offType] = batchMagic, byte(EntryData)
	h, err := DecodeBatchHeader(hb[:])
	if err == nil {
		if c := crc32.Checksum(data[offBody-PlacementSize:], castagnoli); c != h.BodyCRC {
			err = badBatch("body crc %#08x, want %#08x", c, h.BodyCRC)
		}
	}
	if err == nil {
		dst, err = decodeRecords(data[BatchHeaderSize-PlacementSize:], h, dst, lo, hi)
	}
	if err != nil {
		return dst, fmt.Errorf("%w: %v", ErrBadEntry, err)
	}
	return dst, nil
}

// checkRecordsFrame checks a record frame whose placement prefix is not
// filled yet (it sets the length, magic and type): header, body CRC and
// records. The header CRC is set at write, with the placement.
func checkRecordsFrame(f []byte) error {
	le := binary.LittleEndian
	le.PutUint32(f[offLength:], uint32(len(f)))
	f[offMagic], f[offType] = batchMagic, byte(EntryData)
	h, err := DecodeBatchHeader(f)
	if err != nil {
		return err
	}
	if c := crc32.Checksum(f[offBody:], castagnoli); c != h.BodyCRC {
		return badBatch("body crc %#08x, want %#08x", c, h.BodyCRC)
	}
	_, err = decodeRecords(f[BatchHeaderSize:], h, nil, 0, 0)
	return err
}

// encodeEntries appends the frames of ents to dst, placement filled but
// for the base offset, and checks them.
func (p *Partition) encodeEntries(dst []byte, ents []Entry) ([]byte, error) {
	le := binary.LittleEndian
	for k, e := range ents {
		if k > 0 && e.Index != ents[k-1].Index+1 {
			return dst, fmt.Errorf("%w: %s: entry %d follows entry %d", ErrNotContiguous, p.name, e.Index, ents[k-1].Index)
		}
		if e.Term == 0 || (k > 0 && e.Term < ents[k-1].Term) {
			return dst, fmt.Errorf("%w: %s: entry %d has term %d", ErrTermDecrease, p.name, e.Index, e.Term)
		}
		if e.Index == 0 {
			return dst, fmt.Errorf("%w: %s: raft index 0", ErrBadEntry, p.name)
		}
		start := len(dst)
		switch {
		case e.Type == EntryData:
			if len(e.Data) < BatchHeaderSize-PlacementSize || PlacementSize+len(e.Data) > p.s.opts.MaxBatchBytes {
				return dst, fmt.Errorf("%w: %s: entry %d: %d bytes of records, want %d to %d (MaxBatchBytes)", ErrBadEntry, p.name,
					e.Index, len(e.Data), BatchHeaderSize-PlacementSize, p.s.opts.MaxBatchBytes-PlacementSize)
			}
			var prefix [PlacementSize]byte
			dst = append(dst, prefix[:]...)
			dst = append(dst, e.Data...)
			if err := checkRecordsFrame(dst[start:]); err != nil {
				return dst, fmt.Errorf("%w: %s: entry %d: %v", ErrBadEntry, p.name, e.Index, err)
			}
		case e.Type <= maxEntryType:
			if BatchHeaderSize+len(e.Data) > p.s.opts.MaxBatchBytes {
				return dst, fmt.Errorf("%w: %s: entry %d: %d bytes, limit %d (MaxBatchBytes)", ErrBadEntry, p.name, e.Index, len(e.Data), p.s.opts.MaxBatchBytes-BatchHeaderSize)
			}
			dst = encodeOpaque(dst, BatchHeader{Type: e.Type}, e.Data)
		default:
			return dst, fmt.Errorf("%w: %s: entry %d: unknown type %d", ErrBadEntry, p.name, e.Index, e.Type)
		}
		f := dst[start:]
		le.PutUint64(f[offRaftIndex:], e.Index)
		le.PutUint64(f[offRaftTerm:], e.Term)
	}
	return dst, nil
}

// TruncateAfter removes every entry after index, durably, and rewinds the
// end, the durable end and the indexes; LastIndex() is then index (a no-op
// if it already is, or less). It is carried out by the appender in the
// order of requests (after the appends made before it) and returns once
// done, so it must not be called from an append callback. index below the
// truncate floor is ErrBelowTruncateFloor; below FirstIndex()-1
// ErrCompacted. An append of this partition that a TruncateAfter removes in
// the same group commit fails with ErrTruncated. A TruncateAfter that fails
// once it has removed entries (a failed unlink, directory sync or
// fdatasync) fails the partition: every later change of it fails with the
// same error until the store is reopened.
//
// Crash safety: the segments after the one holding index are deleted from
// the last one back, each followed by a directory fsync; then that segment
// is cut (ftruncate + fdatasync) and its index files rewritten, all before
// anything new is written. After a crash the log is therefore the old one,
// the truncated one, or the old one cut at a segment boundary in between:
// always a prefix of the old log that holds every entry up to index.
func (p *Partition) TruncateAfter(index uint64) error {
	if f := p.floor.Load(); index < f {
		return fmt.Errorf("%w: %s: truncate after %d, the floor is %d", ErrBelowTruncateFloor, p.name, index, f)
	}
	r := reqPool.Get().(*request)
	r.p, r.kind, r.index = p, reqTruncate, index
	if err := p.s.enqueue(context.Background(), r); err != nil {
		r.free()
		return err
	}
	res := <-r.ch
	r.free()
	return res.err
}

// truncatedInRound fails the appends of p in batch (earlier in this round)
// whose entries a truncation after index removed.
func truncatedInRound(batch []*request, p *Partition, index uint64) {
	for _, q := range batch {
		if q.p == p && q.kind != reqTruncate && q.err == nil && q.endIdx > index {
			q.err = fmt.Errorf("%w: %s: entries up to %d, truncated after %d", ErrTruncated, p.name, q.endIdx, index)
			q.base = -1
		}
	}
}

// cutPoint is where a truncation cuts the segment it keeps last.
type cutPoint struct {
	seg     int          // index in p.segs of the last segment kept
	pos     int64        // its new size
	next    int64        // its new next offset
	entries []indexEntry // its index entries below pos
	maxTs   int64
	since   int
}

// truncateAfter carries out TruncateAfter (or, with floor false, takes
// back a partly written append, whatever the floor). Caller holds roundMu.
func (p *Partition) truncateAfter(index uint64, floor bool) error {
	if p.failed != nil {
		return p.failed
	}
	if ce := p.quarantine.Load(); ce != nil {
		return p.quarantineError(ce)
	}
	last := p.active().nextIndex - 1
	if index >= last {
		return nil
	}
	if f := p.floor.Load(); floor && index < f {
		return fmt.Errorf("%w: %s: truncate after %d, the floor is %d", ErrBelowTruncateFloor, p.name, index, f)
	}
	if index < p.prevIndex {
		return fmt.Errorf("%w: %s: truncate after %d, the log starts after %d", ErrCompacted, p.name, index, p.prevIndex)
	}
	// The journal must not span a cut: replayed, it would bring the cut
	// entries back.
	if err := p.s.checkpoint(); err != nil {
		return err
	}
	cut, err := p.findCut(index)
	if err != nil {
		return err
	}
	keep := p.segs[cut.seg]
	gone := slices.Clone(p.segs[cut.seg+1:])
	// The view first: readers hold mu.RLock for a whole read, so once this
	// is published none reads what is about to be cut or deleted.
	p.mu.Lock()
	p.clearReadHints()
	p.segs = p.segs[:cut.seg+1]
	keep.size, keep.next, keep.nextIndex = cut.pos, cut.next, index+1
	keep.entries, keep.maxTs, keep.sinceIdx = cut.entries, cut.maxTs, cut.since
	if keep.closed {
		keep.closed, keep.nIdx, keep.created = false, 0, p.s.opts.Now()
	}
	p.trimTerms(index + 1)
	p.mu.Unlock()
	p.next.Store(keep.next)
	p.lastIdx.Store(index)
	if p.durable.Load() > keep.next {
		p.durable.Store(keep.next)
	}
	if p.durIdx.Load() > index {
		p.durIdx.Store(index)
	}
	fail := func(op, file string, err error) error {
		err = ioError(op, file, err)
		p.failed = fmt.Errorf("spool log: partition %s: truncation after index %d failed half way; reopen the store, which recovers the log as it is on disk: %w", p.name, index, err)
		p.s.opts.Logger.Error("spool log: partition failed", "partition", p.name, "err", p.failed)
		return p.failed
	}
	fsys := p.s.opts.FS
	for k := len(gone) - 1; k >= 0; k-- {
		seg := gone[k]
		seg.removed, seg.dirty = true, false
		seg.closeFiles()
		// The .log first: it is what recovery goes by (index files are derived).
		if err := fsys.Remove(seg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail("remove", seg.path, err)
		}
		removeSegmentFiles(fsys, p.dir, seg.base)
		if err := fsys.SyncDir(p.dir); err != nil {
			return fail("directory sync", p.dir, err)
		}
	}
	if err := keep.log.Truncate(keep.size); err != nil {
		return fail("truncate", keep.path, err)
	}
	if err := keep.log.Sync(); err != nil {
		return fail("fdatasync", keep.path, err)
	}
	keep.dirty = false
	p.synced(keep) // everything up to index is durable now (FsyncInterval: perhaps newly)
	if err := keep.writeIndexes(fsys); err != nil {
		return fail("index write", keep.idxPath(), err)
	}
	return nil
}

// findCut locates the end of entry index: the segment holding it (the
// first one if index is the log start's) and the position after it, with
// that segment's index entries, time maximum and bytes since its last index
// entry at that position. It reads headers only.
func (p *Partition) findCut(index uint64) (cutPoint, error) {
	j := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].firstIndex > index }) - 1
	j = max(j, 0)
	seg := p.segs[j]
	cut := cutPoint{seg: j, pos: seg.size, next: seg.next}
	if index+1 < seg.nextIndex {
		pos, h, err := seg.findIndex(index + 1)
		if err != nil {
			return cut, err
		}
		cut.pos, cut.next = pos, h.BaseOffset
	}
	entries := seg.entries
	if entries == nil {
		entries, _ = readIndexes(seg) // the well-formed prefix will do: the index is sparse
	}
	k := sort.Search(len(entries), func(k int) bool { return int64(entries[k].pos) >= cut.pos })
	cut.entries = append([]indexEntry{}, entries[:k]...)
	from, ts := int64(0), int64(noTimestamp)
	if k > 0 {
		from, ts = int64(entries[k-1].pos), entries[k-1].ts
	}
	var hb [BatchHeaderSize]byte
	for pos := from; pos < cut.pos; {
		if _, err := seg.log.ReadAt(hb[:], pos); err != nil {
			return cut, fmt.Errorf("spool log: read %s at %d: %w", seg.path, pos, err)
		}
		h, err := DecodeBatchHeader(hb[:])
		if err != nil {
			return cut, &CorruptionError{File: seg.path, Position: pos, Offset: -1, Reason: err.Error()}
		}
		if h.Type == EntryData {
			ts = max(ts, h.MaxTimestamp)
		}
		pos += int64(h.Length)
	}
	cut.maxTs, cut.since = ts, int(cut.pos-from)
	return cut, nil
}
