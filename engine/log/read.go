package log

import (
	"fmt"
	"io"
	"sort"
)

// Read returns records with offsets in [offset, upTo), decoded from whole
// batches totalling about maxBytes (at least one record if any exist, even if
// it is bigger). Records come from one segment per call; call again from the
// next offset for more. Returned values alias a buffer allocated for this call
// and owned by the returned slice only. dst is reused.
//
// An offset below StartOffset or above NextOffset is an *OffsetOutOfRangeError;
// offset == NextOffset (or >= upTo) returns no records and no error.
func (p *Partition) Read(offset int64, maxBytes int, upTo int64, dst []Record) ([]Record, error) {
	dst = dst[:0]
	maxBytes = min(max(maxBytes, 1), p.s.opts.MaxReadBytes)
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return dst, ErrClosed
	}
	end := p.active().next
	if offset < p.start || offset > end {
		return dst, &OffsetOutOfRangeError{Offset: offset, Start: p.start, End: end}
	}
	end = min(end, upTo)
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].base > offset }) - 1
	for ; i >= 0 && i < len(p.segs) && offset < end && maxBytes > 0; i++ {
		var err error
		var used int
		had := len(dst)
		dst, used, err = p.readSegment(p.segs[i], offset, end, maxBytes, had == 0, dst)
		if err != nil {
			return dst, err
		}
		maxBytes -= used
		if len(dst) > had {
			offset = dst[len(dst)-1].Offset + 1
		}
		if offset < p.segs[i].next {
			break // stopped inside this segment: the rest is for the next call
		}
	}
	if offset < end && len(dst) == 0 {
		return dst, &CorruptionError{File: p.dir, Position: -1, Offset: offset, Reason: "no batch holds this offset"}
	}
	return dst, nil
}

// readSegment appends records from seg, reading whole batches of at most
// maxBytes in total (but at least one batch if atLeastOne), and returns the
// bytes used.
func (p *Partition) readSegment(seg *segment, offset, end int64, maxBytes int, atLeastOne bool, dst []Record) ([]Record, int, error) {
	corrupt := func(pos, off int64, err error) error {
		return &CorruptionError{File: seg.path, Position: pos, Offset: off, Reason: err.Error()}
	}
	hint, pos, first, buf := p.readHinted(seg, offset, maxBytes)
	if hint == nil {
		var err error
		pos, first, err = seg.findBatch(offset)
		if err != nil || first.Length == 0 {
			return dst, 0, err
		}
	}
	if !atLeastOne && int(first.Length) > maxBytes {
		return dst, 0, nil
	}
	if n := min(max(int64(maxBytes), int64(first.Length)), seg.size-pos); int64(len(buf)) < n {
		// Read what the hinted read did not (the first batch was larger
		// than maxBytes), or everything (no hint).
		have := len(buf)
		buf = append(buf, make([]byte, int(n)-have)...)
		got, err := seg.log.ReadAt(buf[have:], pos+int64(have))
		if int64(have+got) < n && err != nil && err != io.EOF {
			return dst, 0, fmt.Errorf("spool log: read %s at %d: %w", seg.path, pos, err)
		}
		buf = buf[:have+got]
	}
	// next is the offset expected at pos: where the good data ends if the
	// batch at pos turns out damaged (CorruptionError.Offset).
	next := min(offset, first.BaseOffset)
	used := 0
	for len(buf) >= BatchHeaderSize {
		h, err := DecodeBatchHeader(buf)
		if err != nil {
			return dst, 0, corrupt(pos, next, err)
		}
		if int(h.Length) > len(buf) {
			if len(dst) == 0 {
				return dst, 0, corrupt(pos, next, fmt.Errorf("short batch: %d of %d bytes", len(buf), h.Length))
			}
			break // the rest is for the next call
		}
		if h.BaseOffset >= end {
			break
		}
		before := len(dst)
		lo, hi := offset, end
		if h.Type != EntryData {
			lo, hi = 0, 0 // validate, return nothing: raft-internal entries take no offset
		}
		if _, dst, err = decodeBatchInto(buf, dst, lo, hi); err != nil {
			return dst[:before], 0, corrupt(pos, max(min(next, h.BaseOffset), seg.base), err)
		}
		if before == 0 && len(dst) > 0 && dst[0].Offset != offset {
			return dst[:0], 0, corrupt(pos, next, fmt.Errorf("first record has offset %d", dst[0].Offset))
		}
		next = h.BaseOffset + h.Offsets()
		pos += int64(h.Length)
		used += int(h.Length)
		buf = buf[h.Length:]
	}
	if used > 0 {
		p.setReadHint(hint, seg, next, pos)
	}
	return dst, used, nil
}

// readHint says where a read ended: the data batch holding offset starts
// at pos of seg (or will, once written there). A reader that goes on from
// there — delivery following a partition's tail — finds its batch without
// the index and without reading batch headers one by one: its read is one
// pread instead of two to four. Hints are dropped whenever batches are
// taken back or segments rewritten (clearReadHints, under mu), so one is
// never stale; and it is only a shortcut: a hinted read whose first batch
// is not a data batch holding offset is made again the long way.
type readHint struct {
	seg    *segment
	offset int64
	pos    int64
}

// readHints is how many readers of a partition (consumer groups, the admin
// tail) keep their place at once.
const readHints = 4

// readHinted makes the read at a hint for (seg, offset), if there is one:
// at most maxBytes (at least a batch header) from the hinted position. It
// returns the hint used (nil: none, or the read must be made the long way),
// the position and header of the first batch, and the bytes read.
// Caller holds p.mu.RLock.
func (p *Partition) readHinted(seg *segment, offset int64, maxBytes int) (*readHint, int64, BatchHeader, []byte) {
	var hint *readHint
	for i := range p.hints {
		if h := p.hints[i].Load(); h != nil && h.seg == seg && h.offset == offset {
			hint = h
			break
		}
	}
	if hint == nil || hint.pos+BatchHeaderSize > seg.size {
		return nil, 0, BatchHeader{}, nil
	}
	n := min(max(int64(maxBytes), BatchHeaderSize), seg.size-hint.pos)
	buf := make([]byte, n)
	if got, _ := seg.log.ReadAt(buf, hint.pos); int64(got) < n {
		return nil, 0, BatchHeader{}, nil
	}
	h, err := DecodeBatchHeader(buf)
	if err != nil || h.Type != EntryData || h.BaseOffset > offset || h.BaseOffset+int64(h.Count) <= offset ||
		int64(h.Length) > seg.size-hint.pos {
		return nil, 0, BatchHeader{}, nil
	}
	return hint, hint.pos, h, buf
}

// setReadHint records that a read of seg ended at pos, where the batch
// holding next starts, in place of the hint the read used (or of the
// oldest). Caller holds p.mu.RLock.
func (p *Partition) setReadHint(used *readHint, seg *segment, next, pos int64) {
	h := &readHint{seg: seg, offset: next, pos: pos}
	if used != nil {
		for i := range p.hints {
			if p.hints[i].CompareAndSwap(used, h) {
				return
			}
		}
	}
	p.hints[p.hintTurn.Add(1)%readHints].Store(h)
}

// clearReadHints drops every hint: batches were taken back or segments
// replaced. Caller holds p.mu (write).
func (p *Partition) clearReadHints() {
	for i := range p.hints {
		p.hints[i].Store(nil)
	}
}

// findBatch returns the position and header of the data batch of seg that
// holds offset, reading headers only (from the closest index entry). A zero
// header and no error means seg has no such batch (offset is past its end).
func (seg *segment) findBatch(offset int64) (int64, BatchHeader, error) {
	pos := seg.lookup(offset)
	// good is where the good data ends if the batch at pos is damaged: the
	// end of the batch before it when known, else the offset asked for.
	good := offset
	if pos == 0 {
		good = seg.base
	}
	corrupt := func(pos int64, err error) error {
		return &CorruptionError{File: seg.path, Position: pos, Offset: good, Reason: err.Error()}
	}
	var hb [BatchHeaderSize]byte
	for pos < seg.size {
		if _, err := seg.log.ReadAt(hb[:], pos); err != nil {
			return 0, BatchHeader{}, fmt.Errorf("spool log: read %s at %d: %w", seg.path, pos, err)
		}
		h, err := DecodeBatchHeader(hb[:])
		if err != nil {
			return 0, BatchHeader{}, corrupt(pos, err)
		}
		if int64(h.Length) > seg.size-pos {
			return 0, BatchHeader{}, corrupt(pos, fmt.Errorf("batch of %d bytes runs past the segment end", h.Length))
		}
		if h.Type == EntryData && h.BaseOffset > offset {
			// The index or the segment list led past the offset: never skip records.
			return 0, BatchHeader{}, corrupt(pos, fmt.Errorf("batch at this position starts at offset %d", h.BaseOffset))
		}
		if h.Type == EntryData && h.BaseOffset+int64(h.Count) > offset {
			return pos, h, nil
		}
		good = min(h.BaseOffset+h.Offsets(), offset)
		pos += int64(h.Length)
	}
	return 0, BatchHeader{}, nil
}

// BatchTime returns the append time (Unix ms, the batch's first timestamp)
// of the batch holding offset: the records of one append share it. It reads
// batch headers only, under the read lock for a few small preads, and checks
// no CRC (Read does, before any record is served); lag gauges use it.
func (p *Partition) BatchTime(offset int64) (int64, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return 0, ErrClosed
	}
	end := p.active().next
	if offset < p.start || offset >= end {
		return 0, &OffsetOutOfRangeError{Offset: offset, Start: p.start, End: end}
	}
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].base > offset }) - 1
	if i < 0 {
		return 0, &OffsetOutOfRangeError{Offset: offset, Start: p.start, End: end}
	}
	_, h, err := p.segs[i].findBatch(offset)
	if err == nil && h.Length == 0 {
		err = &CorruptionError{File: p.segs[i].path, Position: -1, Offset: offset, Reason: "no batch holds this offset"}
	}
	return h.FirstTimestamp, err
}

// OffsetForTime returns the first offset whose record timestamp is >= ts, or
// NextOffset if there is none. Timestamps need not be monotonic.
func (p *Partition) OffsetForTime(ts int64) (int64, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return 0, ErrClosed
	}
	for _, seg := range p.segs {
		if seg.maxTs < ts || seg.next <= p.start {
			continue
		}
		off, found, err := p.searchTime(seg, ts)
		if err != nil || found {
			return max(off, p.start), err
		}
	}
	return p.active().next, nil
}

func (p *Partition) searchTime(seg *segment, ts int64) (int64, bool, error) {
	pos := seg.timeLookup(ts)
	var hb [BatchHeaderSize]byte
	for pos < seg.size {
		if _, err := seg.log.ReadAt(hb[:], pos); err != nil {
			return 0, false, fmt.Errorf("spool log: read %s at %d: %w", seg.path, pos, err)
		}
		h, err := DecodeBatchHeader(hb[:])
		if err != nil || int64(h.Length) > seg.size-pos {
			return 0, false, &CorruptionError{File: seg.path, Position: pos, Offset: -1, Reason: fmt.Sprint("bad batch header: ", err)}
		}
		if h.Type == EntryData && h.MaxTimestamp >= ts && h.BaseOffset+int64(h.Count) > p.start {
			buf := make([]byte, h.Length)
			if _, err := seg.log.ReadAt(buf, pos); err != nil {
				return 0, false, fmt.Errorf("spool log: read %s at %d: %w", seg.path, pos, err)
			}
			_, recs, err := decodeBatchInto(buf, nil, p.start, 1<<62)
			if err != nil {
				return 0, false, &CorruptionError{File: seg.path, Position: pos, Offset: h.BaseOffset, Reason: err.Error()}
			}
			for _, r := range recs {
				if r.Timestamp >= ts {
					return r.Offset, true, nil
				}
			}
		}
		pos += int64(h.Length)
	}
	return 0, false, nil
}
