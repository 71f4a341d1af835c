package log

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func seedBatches() [][]byte {
	recs := []Record{
		{Timestamp: 1_700_000_000_000, ID: []byte("id-1"), Key: []byte("k"), Value: []byte("hello")},
		{Timestamp: 1_699_999_999_000, Value: []byte{}, Headers: []Header{{Key: "traceparent", Value: []byte("00-ab")}, {Key: "", Value: nil}}},
		{Timestamp: 1_700_000_005_000, Key: []byte("k2"), Value: make([]byte, 300)},
	}
	full := EncodeBatch(nil, BatchHeader{Type: EntryData, BaseOffset: 42, RaftIndex: 7, RaftTerm: 2, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 100}, recs)
	return [][]byte{
		full,
		full[:len(full)-1],
		full[:BatchHeaderSize],
		EncodeBatch(nil, BatchHeader{BaseOffset: 0}, recs[:1]),
		sealed(encodeOpaque(nil, BatchHeader{Type: EntryNormal, BaseOffset: 5, RaftIndex: 8, RaftTerm: 3}, nil)),
		EncodeBatch(nil, BatchHeader{Type: EntryNormal, BaseOffset: 5, RaftIndex: 9, RaftTerm: 3}, recs[1:2]), // invalid: records in a record-less entry
		{},
		sealed(encodeOpaque(nil, BatchHeader{Type: EntryConfChange, BaseOffset: 5, RaftIndex: 10, RaftTerm: 4}, []byte("\x08\x01\x10\x02"))),
	}
}

func sealed(b []byte) []byte { sealHeader(b); return b }

// frameOf returns the frame AppendEntries writes for the Data of an
// EntryData entry, with the given placement.
func frameOf(data []byte, index, term uint64, base int64) []byte {
	f := make([]byte, PlacementSize, PlacementSize+len(data))
	f = append(f, data...)
	binary.LittleEndian.PutUint32(f[offLength:], uint32(len(f)))
	f[offMagic], f[offType] = batchMagic, byte(EntryData)
	setPlacement(f, index, term, base)
	return f
}

func FuzzDecodeBatch(f *testing.F) {
	for _, b := range seedBatches() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		// Mutations nearly always break the CRC; also try with a fixed-up CRC
		// so the record parser sees hostile bytes too.
		if len(data) >= BatchHeaderSize {
			fixed := slices.Clone(data)
			end := min(int(binary.LittleEndian.Uint32(fixed[offLength:])), len(fixed))
			if end >= offBody {
				binary.LittleEndian.PutUint32(fixed[offBodyCRC:], crc32.Checksum(fixed[offBody:end], castagnoli))
			}
			sealHeader(fixed)
			checkDecode(t, fixed)
		}
	})
}

func checkDecode(t *testing.T, data []byte) {
	{
		h, recs, n, err := DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, ErrBadBatch) {
				t.Fatalf("error does not wrap ErrBadBatch: %v", err)
			}
			return
		}
		if n != int(h.Length) || n > len(data) || n < BatchHeaderSize || len(recs) != int(h.Count) {
			t.Fatalf("n %d, length %d, buffer %d, %d records for count %d", n, h.Length, len(data), len(recs), h.Count)
		}
		// What decodes must survive a round trip unchanged.
		enc := EncodeBatch(nil, h, recs)
		if h.Type != EntryData {
			enc = sealed(encodeOpaque(nil, h, data[BatchHeaderSize:n]))
		}
		h2, recs2, _, err := DecodeBatch(enc)
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		h.Length, h.CRC, h2.Length, h2.CRC, h.BodyCRC, h2.BodyCRC = 0, 0, 0, 0, 0, 0
		if len(recs) > 0 {
			h.FirstTimestamp, h2.FirstTimestamp = 0, 0
		}
		if h != h2 || len(recs2) != len(recs) {
			t.Fatalf("header %+v became %+v", h, h2)
		}
		for i := range recs {
			if !sameRecord(recs[i], recs2[i]) || recs[i].Offset != recs2[i].Offset {
				t.Fatalf("record %d: %+v became %+v", i, recs[i], recs2[i])
			}
		}
	}
}

// buildPartition writes nb deterministic batches to partition "p" on a
// MemFS, without Run: Close writes the queue. It returns the records.
func buildPartition(t *testing.T, fsys *MemFS, o Options, nb int) []Record {
	recs, _ := buildPartitionEntries(t, fsys, o, nb)
	return recs
}

// buildPartitionEntries is buildPartition, also returning the last raft
// index: the batches are raft entries of rising terms (AppendEntries, some
// followed by an empty entry without records) mixed with single-node
// appends (AppendAsync).
func buildPartitionEntries(t *testing.T, fsys *MemFS, o Options, nb int) ([]Record, uint64) {
	s, err := OpenStore("/data", o)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Partition("p")
	if err != nil {
		t.Fatal(err)
	}
	var all []Record
	index, term := uint64(0), uint64(1)
	done := func(err error) {
		if err != nil {
			t.Error(err)
		}
	}
	for b := range nb {
		recs := genRecords(b, 1+b%4, 20+b*7%60)
		all = append(all, recs...)
		if b%3 == 0 { // the single-node path, mixed with raft entries
			index++
			p.AppendAsync(recs, func(_ int64, err error) { done(err) })
			continue
		}
		ents := []Entry{{Index: index + 1, Term: term, Type: EntryData, Data: EncodeRecords(nil, BatchHeader{}, recs, 0)}}
		if b%7 == 0 { // a new leader's empty entry, taking no offset
			term++
			ents = append(ents, Entry{Index: index + 2, Term: term, Type: EntryNormal})
		}
		index += uint64(len(ents))
		p.AppendEntries(ents, done)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return all, index
}

func FuzzRecover(f *testing.F) {
	f.Add(uint8(20), uint8(0), uint8(0), uint32(10), uint8(1), false)
	f.Add(uint8(30), uint8(1), uint8(1), uint32(100), uint8(3), false)
	f.Add(uint8(30), uint8(2), uint8(1), uint32(7), uint8(0), true)
	f.Add(uint8(8), uint8(3), uint8(0), uint32(1000), uint8(7), false)
	f.Add(uint8(40), uint8(5), uint8(1), uint32(5), uint8(5), false)
	f.Fuzz(func(t *testing.T, nb, fileIdx, action uint8, pos uint32, bit uint8, fastOpen bool) {
		fsys := NewMemFS()
		o := Options{FS: fsys, SegmentBytes: 1 << 10, IndexIntervalBytes: 128, Logger: quietLogger(), FastOpen: fastOpen}
		want, lastIndex := buildPartitionEntries(t, fsys, o, 1+int(nb%48))
		ents, _ := fsys.ReadDir("/data/p")
		var files []string
		for _, e := range ents {
			files = append(files, e.Name())
		}
		name := files[int(fileIdx)%len(files)]
		path := filepath.Join("/data/p", name)
		isLog := strings.HasSuffix(name, ".log")
		lastLog := isLog && name == lastLogName(files)
		size := int64(0)
		flipped := false
		fsys.Corrupt(path, func(b []byte) []byte {
			size = int64(len(b))
			if len(b) == 0 {
				return b
			}
			if action%2 == 0 {
				return b[:int64(pos)%(size+1)]
			}
			b[int64(pos)%size] ^= 1 << (bit % 8)
			flipped = true
			return b
		})
		s, err := OpenStore("/data", o)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		p, err := s.Partition("p")
		if err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("open failed without a CorruptionError: %v", err)
			}
			if strings.Contains(name, "index") || (lastLog && !flipped) {
				t.Fatalf("damage to %s (flip %v) failed the open: %v", name, flipped, err)
			}
			s.Close()
			checkQuarantineAndRepair(t, fsys, o, want)
			return
		}
		if p.NextOffset() > int64(len(want)) {
			t.Fatalf("next %d beyond the %d records written", p.NextOffset(), len(want))
		}
		readErr := false
		for off := p.StartOffset(); off < p.NextOffset(); {
			recs, err := p.Read(off, 1+int(pos%2000), p.NextOffset(), nil)
			if err != nil {
				var ce *CorruptionError
				if !errors.As(err, &ce) {
					t.Fatalf("Read(%d): %v", off, err)
				}
				readErr = true
				break
			}
			if len(recs) == 0 {
				t.Fatalf("Read(%d) below next %d returned nothing", off, p.NextOffset())
			}
			for _, r := range recs {
				if r.Offset != off || !sameRecord(r, want[off]) {
					t.Fatalf("wrong record at %d: %+v, want %+v", off, r, want[off])
				}
				off++
			}
		}
		if readErr && !fastOpen {
			t.Fatalf("open verified everything, yet a read failed (damage to %s)", name)
		}
		if p.LastIndex() > lastIndex {
			t.Fatalf("last index %d beyond the %d entries written", p.LastIndex(), lastIndex)
		}
		checkEntriesReadable(t, p)
		if isLog && flipped && !readErr && p.NextOffset() == int64(len(want)) && p.LastIndex() == lastIndex {
			t.Fatalf("bit flip in %s went unnoticed", name)
		}
		if !isLog && !readErr && (p.NextOffset() != int64(len(want)) || p.LastIndex() != lastIndex) && name != logStartFile {
			t.Fatalf("damage to %s lost records: next %d of %d", name, p.NextOffset(), len(want))
		}
	})
}

// checkQuarantineAndRepair: a partition that failed to open with a
// CorruptionError opens quarantined with QuarantineCorrupt, serves only
// correct records, refuses appends and leaves its files as they were;
// Repair then cuts it at its end durably (it survives a crash) and it opens
// healthy.
func checkQuarantineAndRepair(t *testing.T, fsys *MemFS, o Options, want []Record) {
	t.Helper()
	before := snapshotDir(fsys, "/data/p")
	qo := o
	qo.QuarantineCorrupt = true
	s, err := OpenStore("/data", qo)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Partition("p")
	if err != nil {
		t.Fatalf("quarantined open failed: %v", err)
	}
	if p.Quarantined() == nil {
		t.Fatal("the open failed without QuarantineCorrupt, yet the partition is not quarantined with it")
	}
	end := p.NextOffset()
	for off := p.StartOffset(); off < end; {
		recs, err := p.Read(off, 1<<20, end, nil)
		if err != nil || len(recs) == 0 {
			t.Fatalf("quarantined Read(%d) below its end %d: %d records, %v", off, end, len(recs), err)
		}
		for _, r := range recs {
			if r.Offset != off || !sameRecord(r, want[off]) {
				t.Fatalf("quarantined partition serves a wrong record at %d", off)
			}
			off++
		}
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	_, err = p.Append(ctx, []Record{{Value: []byte("x")}})
	cancel()
	<-ran
	if !errors.Is(err, ErrQuarantined) {
		t.Fatalf("append to a quarantined partition: %v", err)
	}
	s.Close()
	if after := snapshotDir(fsys, "/data/p"); !maps.Equal(before, after) {
		t.Fatal("opening quarantined changed the partition's files")
	}
	s, err = OpenStore("/data", o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Repair("p")
	if err != nil || !res.Repaired || res.End != end {
		t.Fatalf("Repair: %+v, %v; want the partition cut at %d", res, err, end)
	}
	s.Close()
	fsys.Crash()
	s, err = OpenStore("/data", o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err = s.Partition("p")
	if err != nil || p.NextOffset() != end {
		t.Fatalf("after repair and a crash: next %v, %v; want a healthy partition ending at %d", p, err, end)
	}
}

// snapshotDir returns the content of every file of dir.
func snapshotDir(fsys *MemFS, dir string) map[string]string {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	out := map[string]string{}
	for name, n := range fsys.files {
		if filepath.Dir(name) == dir && !strings.HasSuffix(name, "index") {
			out[name] = string(n.data)
		}
	}
	return out
}

func lastLogName(files []string) string {
	last := ""
	for _, f := range files {
		if strings.HasSuffix(f, ".log") {
			last = f
		}
	}
	return last
}

// fuzzSeedFiles returns the seed corpus committed under testdata/fuzz, by
// path: the FuzzDecodeBatch seeds encode seedBatches (so a change to the
// batch format shows up as a stale corpus), the FuzzRecover seeds are
// damage scenarios. Files found there by the fuzzer itself (named by their
// hash) are not listed and not checked.
func fuzzSeedFiles() map[string]string {
	files := map[string]string{}
	for i, b := range seedBatches() {
		files[filepath.Join("testdata", "fuzz", "FuzzDecodeBatch", fmt.Sprintf("seed-%d", i))] =
			fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
	}
	for i, d := range seedEntryData() {
		files[filepath.Join("testdata", "fuzz", "FuzzAppendEntryData", fmt.Sprintf("seed-%d", i))] =
			fmt.Sprintf("go test fuzz v1\n[]byte(%s)\nbool(false)\n", strconv.Quote(string(d)))
	}
	damage := []string{
		"uint8(25)\nuint8(4)\nuint8(0)\nuint32(333)\nuint8(2)\nbool(false)",
		"uint8(25)\nuint8(4)\nuint8(1)\nuint32(333)\nuint8(2)\nbool(false)",
		"uint8(47)\nuint8(0)\nuint8(1)\nuint32(71)\nuint8(6)\nbool(true)",
		"uint8(47)\nuint8(2)\nuint8(1)\nuint32(9)\nuint8(6)\nbool(false)",
		"uint8(12)\nuint8(200)\nuint8(0)\nuint32(0)\nuint8(0)\nbool(false)",
	}
	for i, s := range damage {
		files[filepath.Join("testdata", "fuzz", "FuzzRecover", fmt.Sprintf("seed-%d", i))] = "go test fuzz v1\n" + s + "\n"
	}
	return files
}

// seedEntryData is the FuzzAppendEntryData seed corpus: record payloads as
// a leader proposes them (EncodeRecords), cut or not.
func seedEntryData() [][]byte {
	recs := seedRecords()
	d := EncodeRecords(nil, BatchHeader{ProducerID: 9, ProducerEpoch: 1, BaseSequence: 100}, recs, 1_700_000_000_000)
	return [][]byte{d, d[:len(d)-1], d[:BatchHeaderSize-PlacementSize], EncodeRecords(nil, BatchHeader{}, recs[:1], 0), {}}
}

func seedRecords() []Record {
	return []Record{
		{Timestamp: 1_700_000_000_000, ID: []byte("id-1"), Key: []byte("k"), Value: []byte("hello")},
		{Timestamp: 0, Value: []byte{}, Headers: []Header{{Key: "traceparent", Value: []byte("00-ab")}}},
	}
}

// FuzzAppendEntryData feeds hostile Data of an EntryData entry (bytes
// from the network, on a follower) to AppendEntries' check: it never
// panics, refuses with ErrBadEntry, and what it accepts is stored and read
// back by Entries byte for byte, its records by Read. CheckRecords (what a
// leader runs before proposing) accepts exactly what AppendEntries accepts.
func FuzzAppendEntryData(f *testing.F) {
	for _, d := range seedEntryData() {
		f.Add(d, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC && len(data) >= BatchHeaderSize-PlacementSize {
			data = slices.Clone(data)
			binary.LittleEndian.PutUint32(data, crc32.Checksum(data[offBody-PlacementSize:], castagnoli))
		}
		fsys := NewMemFS()
		s, err := OpenStore("/data", Options{FS: fsys, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		p, err := s.Partition("p")
		if err != nil {
			t.Fatal(err)
		}
		var got error
		checked := CheckRecords(data, s.opts.MaxBatchBytes)
		p.AppendEntries([]Entry{{Index: 1, Term: 1, Type: EntryData, Data: data}}, func(err error) { got = err })
		s.Close() // writes the queue
		if (checked == nil) != (got == nil) {
			t.Fatalf("CheckRecords says %v, AppendEntries %v: they must agree", checked, got)
		}
		if got != nil {
			if !errors.Is(got, ErrBadEntry) && !errors.Is(got, ErrClosed) {
				t.Fatalf("refused without ErrBadEntry: %v", got)
			}
			return
		}
		s, err = OpenStore("/data", Options{FS: fsys, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		p, err = s.Partition("p")
		if err != nil {
			t.Fatalf("accepted data does not reopen: %v", err)
		}
		ents, err := p.Entries(1, 2, 1<<30)
		if err != nil || len(ents) != 1 || !bytes.Equal(ents[0].Data, data) {
			t.Fatalf("Entries: %v, %d entries; want the data as appended", err, len(ents))
		}
		if _, err := p.Read(0, 1<<20, p.NextOffset(), nil); err != nil {
			t.Fatalf("Read: %v", err)
		}
	})
}

// TestWriteFuzzSeeds checks that every committed seed file holds exactly
// what fuzzSeedFiles generates (so a FuzzDecodeBatch seed is the batch it
// claims to be, in today's format), and that the full seed batch decodes.
// With SPOOL_WRITE_FUZZ_SEEDS=1 it rewrites them instead.
func TestWriteFuzzSeeds(t *testing.T) {
	files := fuzzSeedFiles()
	if os.Getenv("SPOOL_WRITE_FUZZ_SEEDS") == "1" {
		for path, body := range files {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for path, want := range files {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("seed %s: %v (regenerate with SPOOL_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./engine/log/)", path, err)
			continue
		}
		if string(got) != want {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("seed %s differs from what seedBatches and the damage seeds generate, from byte %d: got %.60q, want %.60q (regenerate with SPOOL_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./engine/log/)", path, i, got[i:], want[i:])
		}
	}
	// The first seed is a whole, valid batch: the fuzzer starts from
	// something the decoder accepts, not only from damage.
	h, recs, n, err := DecodeBatch(seedBatches()[0])
	if err != nil || n != len(seedBatches()[0]) || len(recs) != 3 || h.BaseOffset != 42 {
		t.Fatalf("seed 0 does not decode as the 3-record batch at offset 42: header %+v, %d records, n %d, err %v", h, len(recs), n, err)
	}
}

// checkEntriesReadable reads every entry of p by raft index and checks
// indexes, terms (against Term) and the data entries' records against Read.
func checkEntriesReadable(t *testing.T, p *Partition) {
	t.Helper()
	next := p.StartOffset()
	for i := p.FirstIndex(); i <= p.LastIndex(); {
		ents, err := p.Entries(i, p.LastIndex()+1, 1<<10)
		if err != nil {
			var ce *CorruptionError
			if errors.As(err, &ce) {
				return // damage found by a read: FuzzRecover's reads judge it
			}
			t.Fatalf("Entries(%d): %v", i, err)
		}
		for _, e := range ents {
			term, err := p.Term(e.Index)
			if e.Index != i || err != nil || term != e.Term {
				t.Fatalf("entry %d (want %d): term %d, Term() %d, %v", e.Index, i, e.Term, term, err)
			}
			if e.Type == EntryData {
				f := frameOf(e.Data, e.Index, e.Term, next)
				_, recs, _, err := DecodeBatch(f)
				if err != nil {
					t.Fatalf("entry %d: its Data does not decode: %v", e.Index, err)
				}
				next += int64(len(recs))
			}
			i++
		}
	}
	if next != p.NextOffset() {
		t.Fatalf("the data entries hold records up to offset %d, the log ends at %d", next, p.NextOffset())
	}
}
