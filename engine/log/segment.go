package log

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

const (
	indexEntrySize     = 12 // rel offset u32, position u32, rel raft index u32
	timeIndexEntrySize = 16 // prefix max timestamp i64, rel offset u32, position u32
	noTimestamp        = math.MinInt64
)

// indexEntry marks a batch boundary: the batch at pos has base offset
// seg.base+rel and raft index seg.firstIndex+irel, and every record before
// pos has a timestamp <= ts (the prefix maximum), so a time lookup may start
// at the last entry with ts < t.
type indexEntry struct {
	rel, pos, irel uint32
	ts             int64
}

// segment is one .log file with its sparse .index and .timeindex.
//
// Fields marked (view) are read by readers under Partition.mu.RLock and
// written under Partition.mu.Lock while also holding Store.roundMu. The
// others belong to whoever holds Store.roundMu.
type segment struct {
	base       int64
	path       string // .log path, without directory changes after creation
	log        File
	idx, tidx  File         // open index files (closed segments are searched through them)
	size       int64        // (view) bytes of whole batches in the file
	next       int64        // (view) offset after the last record
	firstIndex uint64       // (view) raft index of the first entry (of the next one if empty)
	nextIndex  uint64       // (view) raft index after the last entry
	maxTs      int64        // (view) largest record timestamp, noTimestamp if empty
	entries    []indexEntry // (view) in-memory index; nil once the segment is closed
	nIdx       int          // (view) entries in the index files of a closed segment
	closed     bool         // (view)
	synced     int64        // bytes known durable
	syncedNext int64        // next offset at the synced position
	syncedIdx  uint64       // next raft index at the synced position
	removed    bool         // deleted by TruncateAfter (its files are closed)
	sinceIdx   int          // bytes written since the last index entry
	created    time.Time    // when the first batch was written, for age rolls
	dirty      bool         // written in the current round and not yet synced
	behind     bool         // bytes past the last fdatasync are durable in the journal only
}

func segmentName(base int64, ext string) string { return fmt.Sprintf("%020d%s", base, ext) }

func (s *segment) idxPath() string  { return s.path[:len(s.path)-4] + ".index" }
func (s *segment) tidxPath() string { return s.path[:len(s.path)-4] + ".timeindex" }

func (s *segment) closeFiles() {
	for _, f := range []File{s.log, s.idx, s.tidx} {
		if f != nil {
			f.Close()
		}
	}
}

// lookup returns the position of the last indexed batch whose base offset is
// <= off (0 if none). Index read errors fall back to scanning from 0.
func (s *segment) lookup(off int64) int64 {
	rel := off - s.base
	if s.entries != nil || s.nIdx == 0 {
		i := sort.Search(len(s.entries), func(i int) bool { return int64(s.entries[i].rel) > rel })
		if i == 0 {
			return 0
		}
		return int64(s.entries[i-1].pos)
	}
	var b [indexEntrySize]byte
	var failed bool
	i := sort.Search(s.nIdx, func(i int) bool {
		if _, err := s.idx.ReadAt(b[:], int64(i)*indexEntrySize); err != nil {
			failed = true
			return true
		}
		return int64(binary.LittleEndian.Uint32(b[:])) > rel
	})
	if failed || i == 0 {
		return 0
	}
	if _, err := s.idx.ReadAt(b[:], int64(i-1)*indexEntrySize); err != nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint32(b[4:]))
}

// lookupIndex returns the position of the last indexed batch whose raft
// index is <= index (0 if none). Index read errors fall back to scanning from 0.
func (s *segment) lookupIndex(index uint64) int64 {
	if index < s.firstIndex {
		return 0
	}
	rel := index - s.firstIndex
	if s.entries != nil || s.nIdx == 0 {
		i := sort.Search(len(s.entries), func(i int) bool { return uint64(s.entries[i].irel) > rel })
		if i == 0 {
			return 0
		}
		return int64(s.entries[i-1].pos)
	}
	var b [indexEntrySize]byte
	var failed bool
	i := sort.Search(s.nIdx, func(i int) bool {
		if _, err := s.idx.ReadAt(b[:], int64(i)*indexEntrySize); err != nil {
			failed = true
			return true
		}
		return uint64(binary.LittleEndian.Uint32(b[8:])) > rel
	})
	if failed || i == 0 {
		return 0
	}
	if _, err := s.idx.ReadAt(b[:], int64(i-1)*indexEntrySize); err != nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint32(b[4:]))
}

// timeLookup returns the position of the last indexed batch before which
// every record is older than ts (0 if none).
func (s *segment) timeLookup(ts int64) int64 {
	if s.entries != nil || s.nIdx == 0 {
		i := sort.Search(len(s.entries), func(i int) bool { return s.entries[i].ts >= ts })
		if i == 0 {
			return 0
		}
		return int64(s.entries[i-1].pos)
	}
	var b [timeIndexEntrySize]byte
	var failed bool
	i := sort.Search(s.nIdx, func(i int) bool {
		if _, err := s.tidx.ReadAt(b[:], int64(i)*timeIndexEntrySize); err != nil {
			failed = true
			return true
		}
		return int64(binary.LittleEndian.Uint64(b[:])) >= ts
	})
	if failed || i == 0 {
		return 0
	}
	if _, err := s.tidx.ReadAt(b[:], int64(i-1)*timeIndexEntrySize); err != nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint32(b[12:]))
}

// writeIndexes writes the in-memory entries to the .index and .timeindex
// files and syncs them.
func (s *segment) writeIndexes(fsys FS) error {
	ib := make([]byte, 0, len(s.entries)*indexEntrySize)
	tb := make([]byte, 0, len(s.entries)*timeIndexEntrySize)
	for _, e := range s.entries {
		ib = binary.LittleEndian.AppendUint32(ib, e.rel)
		ib = binary.LittleEndian.AppendUint32(ib, e.pos)
		ib = binary.LittleEndian.AppendUint32(ib, e.irel)
		tb = binary.LittleEndian.AppendUint64(tb, uint64(e.ts))
		tb = binary.LittleEndian.AppendUint32(tb, e.rel)
		tb = binary.LittleEndian.AppendUint32(tb, e.pos)
	}
	for _, w := range []struct {
		f File
		b []byte
	}{{s.idx, ib}, {s.tidx, tb}} {
		if _, err := w.f.WriteAt(w.b, 0); err != nil {
			return err
		}
		if err := w.f.Truncate(int64(len(w.b))); err != nil {
			return err
		}
		if err := w.f.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// readIndexes loads the index files and returns the prefix of entries that is
// well formed: rel and pos non-decreasing / increasing, pos inside the log,
// and the two files agreeing. ok is false when anything had to be dropped.
func readIndexes(s *segment) (entries []indexEntry, ok bool) {
	ib, err1 := readAll(s.idx)
	tb, err2 := readAll(s.tidx)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	ok = len(ib)%indexEntrySize == 0 && len(tb)%timeIndexEntrySize == 0 &&
		len(ib)/indexEntrySize == len(tb)/timeIndexEntrySize
	n := min(len(ib)/indexEntrySize, len(tb)/timeIndexEntrySize)
	le := binary.LittleEndian
	for i := 0; i < n; i++ {
		ib := ib[i*indexEntrySize:]
		e := indexEntry{rel: le.Uint32(ib), pos: le.Uint32(ib[4:]), irel: le.Uint32(ib[8:]), ts: int64(le.Uint64(tb[i*16:]))}
		bad := le.Uint32(tb[i*16+8:]) != e.rel || le.Uint32(tb[i*16+12:]) != e.pos ||
			int64(e.pos) >= s.size || e.pos == 0
		if i > 0 {
			p := entries[i-1]
			bad = bad || e.rel < p.rel || e.pos <= p.pos || e.irel <= p.irel || e.ts < p.ts
		}
		if bad {
			return entries, false
		}
		entries = append(entries, e)
	}
	return entries, ok
}

func readAll(f File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > MaxSegmentBytes {
		return nil, fmt.Errorf("index too large: %d bytes", fi.Size())
	}
	b := make([]byte, fi.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && !(err == io.EOF && n == len(b)) {
		return nil, err
	}
	return b, nil
}

// openSegment opens (creating if create) the three files of the segment with
// the given base offset in dir.
func openSegment(fsys FS, dir string, base int64, create bool) (*segment, error) {
	s := &segment{base: base, path: filepath.Join(dir, segmentName(base, ".log")), maxTs: noTimestamp, next: base, syncedNext: base}
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_TRUNC
	}
	var err error
	if s.log, err = fsys.OpenFile(s.path, flag, FileMode); err != nil {
		return nil, err
	}
	// Index files are derived data: always create them if missing.
	if s.idx, err = fsys.OpenFile(s.idxPath(), os.O_RDWR|os.O_CREATE, FileMode); err != nil {
		s.closeFiles()
		return nil, err
	}
	if s.tidx, err = fsys.OpenFile(s.tidxPath(), os.O_RDWR|os.O_CREATE, FileMode); err != nil {
		s.closeFiles()
		return nil, err
	}
	if create {
		if err := s.idx.Truncate(0); err != nil {
			s.closeFiles()
			return nil, err
		}
		if err := s.tidx.Truncate(0); err != nil {
			s.closeFiles()
			return nil, err
		}
	}
	return s, nil
}
