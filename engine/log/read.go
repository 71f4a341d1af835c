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
	pos, first, err := seg.findBatch(offset)
	if err != nil || first.Length == 0 {
		return dst, 0, err
	}
	if !atLeastOne && int(first.Length) > maxBytes {
		return dst, 0, nil
	}
	n := min(max(int64(maxBytes), int64(first.Length)), seg.size-pos)
	buf := make([]byte, n)
	got, err := seg.log.ReadAt(buf, pos)
	if int64(got) < n && err != nil && err != io.EOF {
		return dst, 0, fmt.Errorf("spool log: read %s at %d: %w", seg.path, pos, err)
	}
	buf = buf[:got]
	used := 0
	// next is the offset expected at pos: where the good data ends if the
	// batch at pos turns out damaged (CorruptionError.Offset).
	next := min(offset, first.BaseOffset)
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
		if h.Type != BatchData {
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
	return dst, used, nil
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
		if h.Type == BatchData && h.BaseOffset > offset {
			// The index or the segment list led past the offset: never skip records.
			return 0, BatchHeader{}, corrupt(pos, fmt.Errorf("batch at this position starts at offset %d", h.BaseOffset))
		}
		if h.Type == BatchData && h.BaseOffset+int64(h.Count) > offset {
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
		if h.Type == BatchData && h.MaxTimestamp >= ts && h.BaseOffset+int64(h.Count) > p.start {
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
