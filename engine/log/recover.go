package log

import (
	"errors"
	"fmt"
	"io"
	"math"
)

// windowReader serves byte ranges of a file through one reusable window, so a
// sequential scan costs one pread per window rather than two per batch.
type windowReader struct {
	f    File
	size int64
	buf  []byte
	off  int64
	n    int
}

const scanWindow = 1 << 20

func newWindowReader(f File, size int64) *windowReader {
	return &windowReader{f: f, size: size, buf: make([]byte, min(int64(scanWindow), max(size, BatchHeaderSize)))}
}

// get returns n bytes at pos; the slice is valid until the next call.
func (w *windowReader) get(pos int64, n int) ([]byte, error) {
	if pos >= w.off && pos+int64(n) <= w.off+int64(w.n) {
		return w.buf[pos-w.off : pos-w.off+int64(n)], nil
	}
	if n > len(w.buf) {
		w.buf = make([]byte, n)
	}
	want := min(int64(len(w.buf)), w.size-pos)
	if want < int64(n) {
		return nil, io.ErrUnexpectedEOF
	}
	got, err := w.f.ReadAt(w.buf[:want], pos)
	w.off, w.n = pos, got
	if got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return w.buf[:n], nil
}

// termRun says that the entries from raft index first on have term term
// (up to the next run's first).
type termRun struct {
	first, term uint64
}

// addRun appends (index, term) to runs if term differs from the last run's.
func addRun(runs []termRun, index, term uint64) []termRun {
	if n := len(runs); n > 0 && runs[n-1].term == term {
		return runs
	}
	return append(runs, termRun{first: index, term: term})
}

// scanState is where a scan of one segment stands.
type scanState struct {
	pos       int64  // end of the last good batch
	next      int64  // offset after the last good batch
	nextIndex uint64 // raft index expected next
	lastTerm  uint64 // term of the last good batch (of the entry before the segment at its start)
	maxTs     int64
	firstTs   int64 // timestamp of the first batch of the segment, if scanned from 0
	sinceIdx  int
	entries   []indexEntry
	runs      []termRun
	badPos    int64 // -1 if the scan reached the end of the file cleanly
	reason    string
	// misplaced is true when the batch at badPos is intact (both CRCs and
	// its records check) but does not continue the log: a gap or a decrease
	// of offset, raft index or term. That is never a torn write.
	misplaced bool
	ioErr     error // a read error (not corruption)
}

// scan verifies every batch of seg from st.pos to the end of the file:
// header sanity, both CRCs, record structure, contiguous base offsets and
// raft indexes, and non-decreasing terms. It adds an index entry every
// interval bytes. seg.firstIndex must be set.
func scan(w *windowReader, seg *segment, st scanState, interval int) scanState {
	st.badPos = -1
	for st.pos < w.size {
		bad := func(format string, args ...any) scanState {
			st.badPos, st.reason = st.pos, fmt.Sprintf(format, args...)
			return st
		}
		if w.size-st.pos < BatchHeaderSize {
			return bad("%d bytes left, less than a batch header", w.size-st.pos)
		}
		hb, err := w.get(st.pos, BatchHeaderSize)
		if err != nil {
			st.ioErr = err
			return st
		}
		h, err := DecodeBatchHeader(hb)
		if err != nil {
			return bad("%v", err)
		}
		if int64(h.Length) > w.size-st.pos {
			return bad("batch of %d bytes runs past the end of the file (%d bytes left)", h.Length, w.size-st.pos)
		}
		b, err := w.get(st.pos, int(h.Length))
		if err != nil {
			st.ioErr = err
			return st
		}
		if _, err := checkBatch(b); err != nil {
			return bad("%v", err)
		}
		if _, err := decodeRecords(b[BatchHeaderSize:], h, nil, 0, 0); err != nil {
			return bad("%v", err)
		}
		if reason := placementError(h, st.next, st.nextIndex, st.lastTerm); reason != "" {
			st.misplaced = true
			return bad("%s", reason)
		}
		if st.next+h.Offsets()-seg.base > math.MaxUint32 || h.RaftIndex-seg.firstIndex >= math.MaxUint32 {
			st.misplaced = true
			return bad("more than 2^32 offsets or entries in one segment")
		}
		if st.pos > 0 && st.sinceIdx >= interval {
			st.entries = append(st.entries, indexEntry{rel: uint32(st.next - seg.base), pos: uint32(st.pos), irel: uint32(st.nextIndex - seg.firstIndex), ts: st.maxTs})
			st.sinceIdx = 0
		}
		if st.pos == 0 {
			st.firstTs = h.FirstTimestamp
		}
		st.sinceIdx += int(h.Length)
		if h.Type == EntryData && h.MaxTimestamp > st.maxTs {
			st.maxTs = h.MaxTimestamp
		}
		st.runs = addRun(st.runs, h.RaftIndex, h.RaftTerm)
		st.next += h.Offsets()
		st.nextIndex++
		st.lastTerm = h.RaftTerm
		st.pos += int64(h.Length)
	}
	return st
}

// placementError says why a batch with header h does not continue a log
// whose next offset is next, next raft index nextIndex and last term
// lastTerm, or "" if it does.
func placementError(h BatchHeader, next int64, nextIndex, lastTerm uint64) string {
	switch {
	case h.BaseOffset != next:
		return fmt.Sprintf("base offset %d, want %d", h.BaseOffset, next)
	case h.RaftIndex != nextIndex:
		return fmt.Sprintf("raft index %d, want %d", h.RaftIndex, nextIndex)
	case h.RaftTerm < max(lastTerm, 1):
		return fmt.Sprintf("raft term %d after term %d", h.RaftTerm, lastTerm)
	}
	return ""
}

// walkHeaders follows the batch headers of seg from st.pos to to, checking
// each header CRC and placement (not the bodies): FastOpen's way to learn
// the terms before the last index entry. ok is false if anything is off;
// the caller then scans from 0.
func walkHeaders(seg *segment, st scanState, to int64) (scanState, bool) {
	var hb [BatchHeaderSize]byte
	for st.pos < to {
		if _, err := seg.log.ReadAt(hb[:], st.pos); err != nil {
			return st, false
		}
		h, err := DecodeBatchHeader(hb[:])
		if err != nil || !headerCRCOK(hb[:]) || int64(h.Length) > to-st.pos ||
			placementError(h, st.next, st.nextIndex, st.lastTerm) != "" {
			return st, false
		}
		st.runs = addRun(st.runs, h.RaftIndex, h.RaftTerm)
		st.next += h.Offsets()
		st.nextIndex++
		st.lastTerm = h.RaftTerm
		st.pos += int64(h.Length)
	}
	return st, st.pos == to
}

// findValidAfter looks for any intact batch starting at or after from whose
// base offset is at least minBase. It tells a torn tail (nothing valid
// follows) from corruption before the tail. It returns -1 if none is found.
func findValidAfter(w *windowReader, from, minBase int64) int64 {
	for p := from; p+BatchHeaderSize <= w.size; p++ {
		hb, err := w.get(p, BatchHeaderSize)
		if err != nil {
			return -1
		}
		if hb[offMagic] != batchMagic {
			continue
		}
		h, err := DecodeBatchHeader(hb)
		if err != nil || int64(h.Length) > w.size-p || h.BaseOffset < minBase {
			continue
		}
		b, err := w.get(p, int(h.Length))
		if err != nil {
			continue
		}
		if _, err := checkBatch(b); err == nil {
			return p
		}
	}
	return -1
}
