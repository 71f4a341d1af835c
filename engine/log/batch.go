package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
)

// Batch framing (format 2). The layout is documented byte by byte in
// docs/storage-format.md; the constants below are the single source of truth
// for the code.
//
// A frame is a 36-byte placement prefix (length, header CRC, magic, type,
// flags, raft index, raft term, base offset) followed by the entry payload
// (body CRC, count, producer fields, timestamps, records or opaque bytes).
// The payload is fixed when a raft leader proposes it; the placement is
// filled where it is appended. The header CRC covers the placement and the
// body CRC, the body CRC covers the rest, so filling the placement costs a
// CRC of 32 bytes, never a pass over the records.
const (
	// BatchHeaderSize is the fixed size of a batch header in bytes.
	BatchHeaderSize = 74
	// batchMagic is the format version byte at offset 8 of every batch.
	batchMagic = 2
	// PlacementSize is the size of the placement prefix: an EntryData
	// entry's Data is its frame from this position on.
	PlacementSize = 36

	offLength     = 0
	offCRC        = 4 // header CRC: CRC32C of [8, 40)
	offMagic      = 8
	offType       = 9
	offFlags      = 10
	offRaftIndex  = 12
	offRaftTerm   = 20
	offBaseOffset = 28
	offBodyCRC    = 36 // body CRC: CRC32C of [40, Length)
	offCount      = 40
	offProducerID = 44
	offEpoch      = 52
	offBaseSeq    = 54
	offFirstTs    = 58
	offMaxTs      = 66
	offBody       = 40 // where the body CRC's coverage starts

	// minRecordSize is the smallest possible encoded record: length, timestamp
	// delta, offset delta, id, key, value and header count, one byte each.
	minRecordSize = 7
	// MaxBatchRecords bounds the record count of any batch the decoder accepts.
	MaxBatchRecords = 1 << 22
	// maxBatchLength bounds the Length field the decoder accepts (hostile input).
	maxBatchLength = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EntryType is the type byte of a frame: whether it carries data records
// (which take offsets) or a raft entry without records (which takes none,
// so data offsets stay contiguous).
type EntryType uint8

const (
	// EntryData holds records that are assigned offsets BaseOffset..BaseOffset+Count-1.
	EntryData EntryType = 0
	// EntryNormal is a raft normal entry without records: the empty entry a
	// new leader appends, or an opaque command. Its Data is opaque (may be empty).
	EntryNormal EntryType = 1
	// EntryConfChange is a raft configuration change; Data is opaque (raftpb.ConfChange).
	EntryConfChange EntryType = 2
	// EntryConfChangeV2 is a raft configuration change; Data is opaque (raftpb.ConfChangeV2).
	EntryConfChangeV2 EntryType = 3

	maxEntryType = EntryConfChangeV2
)

func (t EntryType) String() string {
	switch t {
	case EntryData:
		return "data"
	case EntryNormal:
		return "normal"
	case EntryConfChange:
		return "confchange"
	case EntryConfChangeV2:
		return "confchange-v2"
	}
	return fmt.Sprintf("EntryType(%d)", uint8(t))
}

// BatchHeader is the fixed-size header in front of every batch on disk.
type BatchHeader struct {
	Length         uint32 // total batch size in bytes, header included
	CRC            uint32 // header CRC: CRC32C (Castagnoli) of bytes [8, 40)
	Type           EntryType
	RaftIndex      uint64
	RaftTerm       uint64
	BaseOffset     int64
	BodyCRC        uint32 // CRC32C of bytes [40, Length)
	Count          uint32
	ProducerID     int64
	ProducerEpoch  int16
	BaseSequence   int32
	FirstTimestamp int64 // unix ms of the first record
	MaxTimestamp   int64 // largest record timestamp in the batch
}

// Offsets returns how many data offsets the batch takes.
func (h BatchHeader) Offsets() int64 {
	if h.Type != EntryData {
		return 0
	}
	return int64(h.Count)
}

// ErrBadBatch is wrapped by every decoding error.
var ErrBadBatch = errors.New("bad batch")

func badBatch(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadBatch, fmt.Sprintf(format, args...))
}

// EncodedBatchSize returns the exact size EncodeBatch will produce for recs.
func EncodedBatchSize(recs []Record) int { return encodedBatchSize(recs, 0) }

func encodedBatchSize(recs []Record, defTs int64) int {
	n := BatchHeaderSize
	var first int64
	if len(recs) > 0 {
		first = tsOrDefault(recs[0].Timestamp, defTs)
	}
	for i := range recs {
		b := recordBodySize(&recs[i], first, i, defTs)
		n += uvarintLen(uint64(b)) + b
	}
	return n
}

func tsOrDefault(ts, def int64) int64 {
	if ts == 0 {
		return def
	}
	return ts
}

// MaxRecordFraming bounds what a batch of one record adds to the record's
// id, key, value and header names and values: the batch header and every
// length, delta and count varint, for a record with at most headers headers.
func MaxRecordFraming(headers int) int {
	const v = binary.MaxVarintLen64
	// record length, timestamp delta, index, id/key/value lengths, header count
	return BatchHeaderSize + 7*v + headers*2*v
}

func recordBodySize(r *Record, first int64, i int, defTs int64) int {
	n := varintLen(tsOrDefault(r.Timestamp, defTs)-first) + uvarintLen(uint64(i))
	n += uvarintLen(uint64(len(r.ID))) + len(r.ID)
	n += uvarintLen(uint64(len(r.Key))) + len(r.Key)
	n += uvarintLen(uint64(len(r.Value))) + len(r.Value)
	n += uvarintLen(uint64(len(r.Headers)))
	for _, h := range r.Headers {
		n += uvarintLen(uint64(len(h.Key))) + len(h.Key)
		n += uvarintLen(uint64(len(h.Value))) + len(h.Value)
	}
	return n
}

// EncodeBatch appends the encoding of hdr and recs to dst and returns it.
// Length, both CRCs, Count, FirstTimestamp and MaxTimestamp are computed
// from recs; the other header fields are taken from hdr. Record.Offset is
// ignored: the record at index i gets offset hdr.BaseOffset+i.
func EncodeBatch(dst []byte, hdr BatchHeader, recs []Record) []byte {
	start := len(dst)
	dst = encodeBatch(dst, hdr, recs, 0)
	sealHeader(dst[start:])
	return dst
}

// EncodeRecords appends to dst the Data of an EntryData entry holding recs:
// what a raft leader proposes, and what AppendEntries writes after its
// placement prefix. Record timestamps of 0 become now (unix ms), so every
// replica stores the same bytes. Only the producer fields of hdr are used.
// recs must not be empty.
func EncodeRecords(dst []byte, hdr BatchHeader, recs []Record, now int64) []byte {
	start := len(dst)
	hdr.Type, hdr.RaftIndex, hdr.RaftTerm, hdr.BaseOffset = EntryData, 0, 0, 0
	dst = encodeBatch(dst, hdr, recs, now)
	return append(dst[:start], dst[start+PlacementSize:]...)
}

// encodeBatch is EncodeBatch where a record timestamp of 0 is replaced by
// defTs, and without the header CRC: the appender fills the placement (raft
// index, term, base offset) and then the header CRC (setPlacement). The body
// CRC is computed here, on the caller's goroutine.
func encodeBatch(dst []byte, hdr BatchHeader, recs []Record, defTs int64) []byte {
	start := len(dst)
	if len(recs) > 0 {
		hdr.FirstTimestamp = tsOrDefault(recs[0].Timestamp, defTs)
		hdr.MaxTimestamp = hdr.FirstTimestamp
		for i := range recs {
			if ts := tsOrDefault(recs[i].Timestamp, defTs); ts > hdr.MaxTimestamp {
				hdr.MaxTimestamp = ts
			}
		}
	}
	hdr.Count = uint32(len(recs))
	// Room for the whole frame at once: appending a large batch piece by
	// piece grew and copied the buffer a dozen times (a tenth of a cluster
	// node's CPU under publish load went to that).
	need := BatchHeaderSize
	for i := range recs {
		n := recordBodySize(&recs[i], hdr.FirstTimestamp, i, defTs)
		need += uvarintLen(uint64(n)) + n
	}
	dst = slices.Grow(dst, need)
	var h [BatchHeaderSize]byte
	dst = append(dst, h[:]...)
	for i := range recs {
		r := &recs[i]
		dst = binary.AppendUvarint(dst, uint64(recordBodySize(r, hdr.FirstTimestamp, i, defTs)))
		dst = binary.AppendVarint(dst, tsOrDefault(r.Timestamp, defTs)-hdr.FirstTimestamp)
		dst = binary.AppendUvarint(dst, uint64(i))
		dst = appendBytes(dst, r.ID)
		dst = appendBytes(dst, r.Key)
		dst = appendBytes(dst, r.Value)
		dst = binary.AppendUvarint(dst, uint64(len(r.Headers)))
		for _, hd := range r.Headers {
			dst = binary.AppendUvarint(dst, uint64(len(hd.Key)))
			dst = append(dst, hd.Key...)
			dst = appendBytes(dst, hd.Value)
		}
	}
	b := dst[start:]
	hdr.Length = uint32(len(b))
	putHeader(b, hdr)
	sealBody(b)
	return dst
}

// encodeOpaque appends a frame of a record-less type holding data, sealed.
func encodeOpaque(dst []byte, hdr BatchHeader, data []byte) []byte {
	start := len(dst)
	var h [BatchHeaderSize]byte
	dst = append(dst, h[:]...)
	dst = append(dst, data...)
	b := dst[start:]
	hdr.Length, hdr.Count, hdr.FirstTimestamp, hdr.MaxTimestamp = uint32(len(b)), 0, 0, 0
	hdr.ProducerID, hdr.ProducerEpoch, hdr.BaseSequence = 0, 0, 0
	putHeader(b, hdr)
	sealBody(b)
	sealHeader(b)
	return dst
}

// sealBody sets the body CRC of the frame b.
func sealBody(b []byte) {
	binary.LittleEndian.PutUint32(b[offBodyCRC:], crc32.Checksum(b[offBody:], castagnoli))
}

// sealHeader sets the header CRC of the frame b (after its body CRC).
func sealHeader(b []byte) {
	binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offMagic:offBody], castagnoli))
}

// setPlacement fills the placement of a frame and seals its header: a CRC
// of 32 bytes, whatever the size of the records.
func setPlacement(b []byte, index, term uint64, base int64) {
	le := binary.LittleEndian
	le.PutUint64(b[offRaftIndex:], index)
	le.PutUint64(b[offRaftTerm:], term)
	le.PutUint64(b[offBaseOffset:], uint64(base))
	sealHeader(b)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func putHeader(b []byte, h BatchHeader) {
	le := binary.LittleEndian
	le.PutUint32(b[offLength:], h.Length)
	le.PutUint32(b[offCRC:], h.CRC)
	b[offMagic] = batchMagic
	b[offType] = byte(h.Type)
	le.PutUint16(b[offFlags:], 0)
	le.PutUint64(b[offRaftIndex:], h.RaftIndex)
	le.PutUint64(b[offRaftTerm:], h.RaftTerm)
	le.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
	le.PutUint32(b[offBodyCRC:], h.BodyCRC)
	le.PutUint32(b[offCount:], h.Count)
	le.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	le.PutUint16(b[offEpoch:], uint16(h.ProducerEpoch))
	le.PutUint32(b[offBaseSeq:], uint32(h.BaseSequence))
	le.PutUint64(b[offFirstTs:], uint64(h.FirstTimestamp))
	le.PutUint64(b[offMaxTs:], uint64(h.MaxTimestamp))
}

// DecodeBatchHeader parses and sanity-checks the fixed header at the start of
// buf. It checks neither CRC nor that the whole batch is present.
func DecodeBatchHeader(buf []byte) (BatchHeader, error) {
	var h BatchHeader
	if len(buf) < BatchHeaderSize {
		return h, badBatch("short header: %d bytes", len(buf))
	}
	le := binary.LittleEndian
	h.Length = le.Uint32(buf[offLength:])
	h.CRC = le.Uint32(buf[offCRC:])
	if m := buf[offMagic]; m != batchMagic {
		if m == 1 {
			return h, badBatch("format 1 batch (written by an older Spool; this one reads format %d only)", batchMagic)
		}
		return h, badBatch("magic %d, want %d", m, batchMagic)
	}
	h.Type = EntryType(buf[offType])
	if h.Type > maxEntryType {
		return h, badBatch("unknown type %d", h.Type)
	}
	if f := le.Uint16(buf[offFlags:]); f != 0 {
		return h, badBatch("unknown flags %#x", f)
	}
	h.RaftIndex = le.Uint64(buf[offRaftIndex:])
	h.RaftTerm = le.Uint64(buf[offRaftTerm:])
	h.BaseOffset = int64(le.Uint64(buf[offBaseOffset:]))
	h.BodyCRC = le.Uint32(buf[offBodyCRC:])
	h.Count = le.Uint32(buf[offCount:])
	h.ProducerID = int64(le.Uint64(buf[offProducerID:]))
	h.ProducerEpoch = int16(le.Uint16(buf[offEpoch:]))
	h.BaseSequence = int32(le.Uint32(buf[offBaseSeq:]))
	h.FirstTimestamp = int64(le.Uint64(buf[offFirstTs:]))
	h.MaxTimestamp = int64(le.Uint64(buf[offMaxTs:]))
	if h.Length < BatchHeaderSize || h.Length > maxBatchLength {
		return h, badBatch("length %d out of range", h.Length)
	}
	if h.Count > MaxBatchRecords || uint64(h.Count)*minRecordSize > uint64(h.Length-BatchHeaderSize) {
		return h, badBatch("record count %d does not fit in %d bytes", h.Count, h.Length)
	}
	if h.Type == EntryData && h.Count == 0 {
		return h, badBatch("data batch without records")
	}
	if h.Type != EntryData && (h.Count != 0 || h.ProducerID != 0 || h.ProducerEpoch != 0 || h.BaseSequence != 0 ||
		h.FirstTimestamp != 0 || h.MaxTimestamp != 0) {
		return h, badBatch("%s entry with record fields set (count %d)", h.Type, h.Count)
	}
	if h.BaseOffset < 0 || h.BaseOffset > 1<<62 {
		return h, badBatch("base offset %d out of range", h.BaseOffset)
	}
	return h, nil
}

// headerCRCOK reports whether the header CRC of the header hb matches.
func headerCRCOK(hb []byte) bool {
	return crc32.Checksum(hb[offMagic:offBody], castagnoli) == binary.LittleEndian.Uint32(hb[offCRC:])
}

// DecodeBatch decodes the batch at the start of buf, checking both CRCs and
// every length against the buffer. Returned records alias buf (header keys
// are copied); a record-less entry returns none. n is the number of bytes
// the batch occupies.
func DecodeBatch(buf []byte) (BatchHeader, []Record, int, error) {
	h, recs, err := decodeBatchInto(buf, nil, 0, 1<<62)
	if err != nil {
		return h, nil, 0, err
	}
	return h, recs, int(h.Length), nil
}

// checkBatch validates header, both CRCs and the whole batch length at the
// start of buf.
func checkBatch(buf []byte) (BatchHeader, error) {
	h, err := DecodeBatchHeader(buf)
	if err != nil {
		return h, err
	}
	if uint64(h.Length) > uint64(len(buf)) {
		return h, badBatch("length %d beyond the %d bytes available", h.Length, len(buf))
	}
	if !headerCRCOK(buf) {
		return h, badBatch("header crc %#08x, want %#08x", crc32.Checksum(buf[offMagic:offBody], castagnoli), h.CRC)
	}
	if c := crc32.Checksum(buf[offBody:h.Length], castagnoli); c != h.BodyCRC {
		return h, badBatch("body crc %#08x, want %#08x", c, h.BodyCRC)
	}
	return h, nil
}

// decodeBatchInto checks the batch at the start of buf and appends to dst its
// records whose offsets lie in [lo, hi). All records are validated either way.
func decodeBatchInto(buf []byte, dst []Record, lo, hi int64) (BatchHeader, []Record, error) {
	h, err := checkBatch(buf)
	if err != nil {
		return h, dst, err
	}
	dst, err = decodeRecords(buf[BatchHeaderSize:h.Length], h, dst, lo, hi)
	return h, dst, err
}

// decodeRecords validates the records of a batch (b is its body) and
// appends those with offsets in [lo, hi) to dst. The body of a record-less
// entry is opaque: nothing to validate or return.
func decodeRecords(b []byte, h BatchHeader, dst []Record, lo, hi int64) ([]Record, error) {
	if h.Type != EntryData {
		return dst, nil
	}
	maxTs := h.FirstTimestamp
	for i := uint32(0); i < h.Count; i++ {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return dst, badBatch("record %d: bad length", i)
		}
		body := b[n : n+int(l)]
		b = b[n+int(l):]
		var r Record
		if err := decodeRecord(body, &r, h, i); err != nil {
			return dst, err
		}
		if r.Timestamp > maxTs {
			maxTs = r.Timestamp
		}
		if r.Offset < lo || r.Offset >= hi {
			continue
		}
		dst = append(dst, r)
	}
	if len(b) != 0 {
		return dst, badBatch("%d trailing bytes after %d records", len(b), h.Count)
	}
	if h.Count > 0 && maxTs != h.MaxTimestamp {
		return dst, badBatch("max timestamp %d, header says %d", maxTs, h.MaxTimestamp)
	}
	return dst, nil
}

func decodeRecord(b []byte, r *Record, h BatchHeader, i uint32) error {
	d, n := binary.Varint(b)
	if n <= 0 || (i == 0 && d != 0) {
		return badBatch("record %d: bad timestamp delta", i) // record 0 holds FirstTimestamp
	}
	b = b[n:]
	r.Timestamp = h.FirstTimestamp + d
	od, n := binary.Uvarint(b)
	if n <= 0 || od != uint64(i) {
		return badBatch("record %d: offset delta %d", i, od)
	}
	b = b[n:]
	r.Offset = h.BaseOffset + int64(i)
	var ok bool
	if r.ID, b, ok = takeBytes(b); !ok {
		return badBatch("record %d: bad id", i)
	}
	if r.Key, b, ok = takeBytes(b); !ok {
		return badBatch("record %d: bad key", i)
	}
	if r.Value, b, ok = takeBytes(b); !ok {
		return badBatch("record %d: bad value", i)
	}
	nh, n := binary.Uvarint(b)
	if n <= 0 || nh > uint64(len(b)-n)/2 {
		return badBatch("record %d: bad header count", i)
	}
	b = b[n:]
	if nh > 0 {
		r.Headers = make([]Header, nh)
		for j := range r.Headers {
			var k, v []byte
			if k, b, ok = takeBytes(b); !ok {
				return badBatch("record %d: bad header key", i)
			}
			if v, b, ok = takeBytes(b); !ok {
				return badBatch("record %d: bad header value", i)
			}
			r.Headers[j] = Header{Key: string(k), Value: v}
		}
	}
	if len(b) != 0 {
		return badBatch("record %d: %d trailing bytes", i, len(b))
	}
	return nil
}

// takeBytes reads a uvarint length and that many bytes. An empty field is nil.
func takeBytes(b []byte) (v, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return nil, b, false
	}
	if l == 0 {
		return nil, b[n:], true
	}
	end := n + int(l)
	return b[n:end:end], b[end:], true
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}
