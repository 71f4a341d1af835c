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

// scanState is where a scan of one segment stands.
type scanState struct {
	pos      int64 // end of the last good batch
	next     int64 // offset after the last good batch
	maxTs    int64
	firstTs  int64 // timestamp of the first batch of the segment, if scanned from 0
	sinceIdx int
	entries  []indexEntry
	badPos   int64 // -1 if the scan reached the end of the file cleanly
	reason   string
	ioErr    error // a read error (not corruption)
}

// scan verifies every batch of seg from st.pos to the end of the file:
// header sanity, CRC, record structure and contiguous base offsets. It adds
// an index entry every interval bytes.
func scan(w *windowReader, base int64, st scanState, interval int) scanState {
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
		if h.BaseOffset != st.next {
			return bad("base offset %d, want %d", h.BaseOffset, st.next)
		}
		if st.next+h.Offsets()-base > math.MaxUint32 {
			return bad("more than 2^32 offsets in one segment")
		}
		if st.pos > 0 && st.sinceIdx >= interval {
			st.entries = append(st.entries, indexEntry{rel: uint32(st.next - base), pos: uint32(st.pos), ts: st.maxTs})
			st.sinceIdx = 0
		}
		if st.pos == 0 {
			st.firstTs = h.FirstTimestamp
		}
		st.sinceIdx += int(h.Length)
		if h.Type == BatchData && h.MaxTimestamp > st.maxTs {
			st.maxTs = h.MaxTimestamp
		}
		st.next += h.Offsets()
		st.pos += int64(h.Length)
	}
	return st
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
		if hb[offMagic] != BatchMagic {
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
