package log

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"
)

// A read that meets damage reports, as CorruptionError.Offset, the base
// offset of the damaged batch (where good data ends), for damage anywhere
// in a closed segment: the engine serves exactly up to there.
func TestReadDamageReportsWhereGoodDataEnds(t *testing.T) {
	for _, damageAt := range []int64{0, 9, BatchHeaderSize, 500, 1500, 2500} {
		fsys := NewMemFS()
		o := Options{FS: fsys, SegmentBytes: 4 << 10, IndexIntervalBytes: 256, Logger: quietLogger()}
		want := buildPartition(t, fsys, o, 30)
		s, err := OpenStore("/data", o)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Partition("p")
		if err != nil {
			t.Fatal(err)
		}
		seg := filepath.Join("/data/p", segmentName(0, ".log"))
		// The batch holding the damaged byte, from the intact file.
		var base int64 = -1
		fsys.Corrupt(seg, func(b []byte) []byte {
			for pos := int64(0); pos < int64(len(b)); {
				h, _ := DecodeBatchHeader(b[pos:])
				if damageAt < pos+int64(h.Length) {
					base = h.BaseOffset
					break
				}
				pos += int64(binary.LittleEndian.Uint32(b[pos:]))
			}
			b[damageAt] ^= 0x55
			return b
		})
		var ce *CorruptionError
		for off := p.StartOffset(); off < p.NextOffset(); {
			recs, err := p.Read(off, 1<<10, p.NextOffset(), nil)
			for _, r := range recs {
				if r.Offset != off || !sameRecord(r, want[off]) {
					t.Fatalf("damage at byte %d: wrong record at %d", damageAt, off)
				}
				off++
			}
			if errors.As(err, &ce) {
				break
			}
			if err != nil || len(recs) == 0 {
				t.Fatalf("damage at byte %d: Read(%d): %d records, %v", damageAt, off, len(recs), err)
			}
		}
		if ce == nil || ce.Offset != base || ce.File != seg {
			t.Fatalf("damage at byte %d (batch at offset %d): reads ended with %v", damageAt, base, ce)
		}
		s.Close()
	}
}
