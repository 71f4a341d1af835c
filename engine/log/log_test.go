package log

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// appendSome appends nb batches of 1..5 records and returns them in offset order.
func appendSome(t *testing.T, p *Partition, b0, nb, vsize int) []Record {
	t.Helper()
	ctx := testCtx(t)
	var all []Record
	for b := b0; b < b0+nb; b++ {
		recs := genRecords(b, 1+b%5, vsize)
		base, err := p.Append(ctx, recs)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		if want := p.NextOffset() - int64(len(recs)); base != want {
			t.Fatalf("base %d, want %d", base, want)
		}
		all = append(all, recs...)
	}
	return all
}

func checkContents(t *testing.T, p *Partition, want []Record) {
	t.Helper()
	if p.NextOffset() != int64(len(want)) {
		t.Fatalf("NextOffset %d, want %d", p.NextOffset(), len(want))
	}
	for _, maxBytes := range []int{1, 300, 1 << 20} {
		got := readAllRecords(t, p, p.StartOffset(), p.NextOffset(), maxBytes)
		for i, r := range got {
			if !sameRecord(r, want[p.StartOffset()+int64(i)]) {
				t.Fatalf("maxBytes %d: record %d differs: %+v vs %+v", maxBytes, r.Offset, r, want[r.Offset])
			}
		}
	}
}

func TestAppendReadReopen(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		h := openHarness(t, t.TempDir(), o)
		p := h.part("orders-3")
		want := appendSome(t, p, 0, 60, 100)
		if o.Fsync == FsyncAlways && p.DurableOffset() != p.NextOffset() {
			t.Fatalf("durable %d, next %d", p.DurableOffset(), p.NextOffset())
		}
		checkContents(t, p, want)
		h.reopen()
		p = h.part("orders-3")
		checkContents(t, p, want)
		if p.DurableOffset() != p.NextOffset() {
			t.Fatalf("after reopen durable %d, next %d", p.DurableOffset(), p.NextOffset())
		}
		want = append(want, appendSome(t, p, 60, 10, 100)...)
		checkContents(t, p, want)
		if got := h.s.Partitions(); len(got) != 1 || got[0] != "orders-3" {
			t.Fatalf("Partitions() = %v", got)
		}
	})
}

func TestLock(t *testing.T) {
	dir := t.TempDir()
	h := openHarness(t, dir, Options{})
	_, err := OpenStore(dir, Options{})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second OpenStore: %v, want ErrLocked naming %s", err, dir)
	}
	h.close()
	s, err := OpenStore(dir, Options{})
	if err != nil {
		t.Fatalf("OpenStore after Close: %v", err)
	}
	s.Close()
}

func TestOutOfRange(t *testing.T) {
	h := openHarness(t, t.TempDir(), Options{})
	p := h.part("p")
	appendSome(t, p, 0, 3, 10)
	for _, off := range []int64{-1, p.NextOffset() + 1, 1 << 62} {
		_, err := p.Read(off, 100, 1<<62, nil)
		var oor *OffsetOutOfRangeError
		if !errors.As(err, &oor) || oor.Offset != off || oor.Start != 0 || oor.End != p.NextOffset() {
			t.Fatalf("Read(%d): %v", off, err)
		}
	}
	recs, err := p.Read(p.NextOffset(), 100, 1<<62, nil)
	if err != nil || len(recs) != 0 {
		t.Fatalf("Read(next): %v %v", recs, err)
	}
	recs, err = p.Read(0, 100, 0, nil)
	if err != nil || len(recs) != 0 {
		t.Fatalf("Read(upTo=0): %v %v", recs, err)
	}
}

func TestBadInput(t *testing.T) {
	h := openHarness(t, t.TempDir(), Options{MaxBatchBytes: 1 << 10})
	p := h.part("p")
	ctx := testCtx(t)
	if _, err := p.Append(ctx, nil); !errors.Is(err, ErrEmptyBatch) {
		t.Fatalf("empty: %v", err)
	}
	if _, err := p.Append(ctx, []Record{{Value: make([]byte, 2<<10)}}); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	for _, name := range []string{"", ".", "..", "a/b", strings.Repeat("x", 250), "ü"} {
		if _, err := h.s.Partition(name); err == nil {
			t.Fatalf("Partition(%q) accepted", name)
		}
	}
	if _, err := OpenStore(t.TempDir(), Options{SegmentBytes: 10}); err == nil {
		t.Fatal("tiny SegmentBytes accepted")
	}
}

func TestTornTail(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		dir := t.TempDir()
		h := openHarness(t, dir, o)
		p := h.part("p")
		want := appendSome(t, p, 0, 20, 50)
		h.close()
		segs, _ := filepath.Glob(filepath.Join(dir, "p", "*.log"))
		last := segs[len(segs)-1]
		fi, _ := os.Stat(last)
		// A torn write: half a batch header of garbage, then a cut batch.
		f, _ := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
		enc := EncodeBatch(nil, BatchHeader{BaseOffset: int64(len(want))}, genRecords(99, 3, 50))
		f.Write(enc[:len(enc)/2])
		f.Close()
		h.start()
		p = h.part("p")
		checkContents(t, p, want)
		if fi2, _ := os.Stat(last); fi2.Size() != fi.Size() {
			t.Fatalf("tail not truncated: %d, want %d", fi2.Size(), fi.Size())
		}
		// Bad CRC in the very last batch is a torn tail too.
		h.close()
		flipByte(t, last, fi.Size()-1)
		h.start()
		p = h.part("p")
		if p.NextOffset() >= int64(len(want)) {
			t.Fatalf("last batch with a bad CRC kept: next %d", p.NextOffset())
		}
		checkContents(t, p, want[:p.NextOffset()])
	})
}

func flipByte(t *testing.T, name string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	f.ReadAt(b[:], pos)
	b[0] ^= 0x40
	f.WriteAt(b[:], pos)
}

func TestCorruptionBeforeTail(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		dir := t.TempDir()
		h := openHarness(t, dir, o)
		p := h.part("p")
		appendSome(t, p, 0, 40, 50)
		h.close()
		segs, _ := filepath.Glob(filepath.Join(dir, "p", "*.log"))
		// Middle of the last segment, with intact batches after it.
		last := segs[len(segs)-1]
		fi, _ := os.Stat(last)
		if fi.Size() > 600 {
			flipByte(t, last, 100)
			expectCorruption(t, h, last)
			flipByte(t, last, 100)
		}
		if len(segs) > 1 {
			// Any bad batch in a closed segment, even its last one.
			first := segs[0]
			fi, _ := os.Stat(first)
			flipByte(t, first, fi.Size()-1)
			expectCorruption(t, h, first)
			flipByte(t, first, fi.Size()-1)
			flipByte(t, first, BatchHeaderSize+1)
			expectCorruption(t, h, first)
		}
	})
}

func expectCorruption(t *testing.T, h *harness, file string) {
	t.Helper()
	h.start()
	defer h.close()
	_, err := h.s.Partition("p")
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != file {
		t.Fatalf("Partition: %v, want *CorruptionError in %s", err, file)
	}
	if !strings.Contains(err.Error(), file) {
		t.Fatalf("error does not name the file: %v", err)
	}
}

func TestMissingAndStaleIndex(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		dir := t.TempDir()
		h := openHarness(t, dir, o)
		p := h.part("p")
		want := appendSome(t, p, 0, 60, 40)
		h.close()
		idx, _ := filepath.Glob(filepath.Join(dir, "p", "*index"))
		for i, f := range idx {
			switch i % 3 {
			case 0:
				os.Remove(f)
			case 1: // entries far beyond the file
				os.WriteFile(f, []byte{1, 0, 0, 0, 0, 0, 0, 0x7f, 2, 0, 0, 0, 0, 0, 0, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0}, 0o644)
			case 2: // entries that do not point at batches
				os.WriteFile(f, []byte{3, 0, 0, 0, 5, 0, 0, 0}, 0o644)
			}
		}
		h.start()
		p = h.part("p")
		checkContents(t, p, want)
		for _, f := range idx {
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("index %s not rebuilt: %v", f, err)
			}
		}
		off, err := p.OffsetForTime(1_700_000_000_000 + 30)
		if err != nil || want[off].Timestamp != 1_700_000_000_000+30 || want[off-1].Timestamp >= 1_700_000_000_000+30 {
			t.Fatalf("OffsetForTime: %d %v", off, err)
		}
	})
}

func TestRetentionPersisted(t *testing.T) {
	clock := newFakeClock()
	o := Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 128, RetentionBytes: 8 << 10, Now: clock.Now, Logger: quietLogger()}
	dir := t.TempDir()
	h := openHarness(t, dir, o)
	p := h.part("p")
	want := appendSome(t, p, 0, 100, 100)
	if err := h.s.Maintain(); err != nil {
		t.Fatal(err)
	}
	start := p.StartOffset()
	if start == 0 {
		t.Fatal("size retention deleted nothing")
	}
	var oor *OffsetOutOfRangeError
	if _, err := p.Read(start-1, 100, 1<<62, nil); !errors.As(err, &oor) {
		t.Fatalf("read below start: %v", err)
	}
	got := readAllRecords(t, p, start, p.NextOffset(), 1<<20)
	for _, r := range got {
		if !sameRecord(r, want[r.Offset]) {
			t.Fatalf("record %d differs", r.Offset)
		}
	}
	h.reopen()
	p = h.part("p")
	if p.StartOffset() != start {
		t.Fatalf("start after reopen %d, want %d", p.StartOffset(), start)
	}
	// Age retention: everything closed is old now; the active segment stays.
	h.close()
	o.RetentionBytes, o.RetentionAge = 0, time.Hour
	h.o = o
	h.start()
	p = h.part("p")
	clock.Advance(2 * time.Hour)
	if err := h.s.Maintain(); err != nil {
		t.Fatal(err)
	}
	if p.StartOffset() <= start || p.NextOffset() != int64(len(want)) {
		t.Fatalf("age retention: start %d next %d", p.StartOffset(), p.NextOffset())
	}
	if off, _ := p.OffsetForTime(0); off != p.StartOffset() {
		t.Fatalf("OffsetForTime(0) = %d, want start %d", off, p.StartOffset())
	}
}

func TestAgeRoll(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	h := openHarness(t, dir, Options{SegmentAge: time.Hour, Now: clock.Now})
	p := h.part("p")
	appendSome(t, p, 0, 3, 10)
	clock.Advance(2 * time.Hour)
	if err := h.s.Maintain(); err != nil {
		t.Fatal(err)
	}
	appendSome(t, p, 3, 1, 10)
	if segs, _ := filepath.Glob(filepath.Join(dir, "p", "*.log")); len(segs) != 2 {
		t.Fatalf("segments %v, want 2", segs)
	}
}

// countingFS counts fdatasyncs.
type countingFS struct {
	OSFS
	syncs atomic.Int64
}

type countingFile struct {
	File
	n *atomic.Int64
}

func (f countingFile) Sync() error { f.n.Add(1); return f.File.Sync() }

func (c *countingFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := c.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return countingFile{File: f, n: &c.syncs}, nil
}

func TestGroupCommit(t *testing.T) {
	fsys := &countingFS{}
	h := openHarness(t, t.TempDir(), Options{FS: fsys})
	parts := []*Partition{h.part("a"), h.part("b"), h.part("c")}
	ctx := testCtx(t)
	const writers, each = 48, 20
	var wg sync.WaitGroup
	before := fsys.syncs.Load()
	for w := range writers {
		wg.Go(func() {
			p := parts[w%len(parts)]
			for i := range each {
				if _, err := p.Append(ctx, genRecords(i, 1, 100)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	syncs := fsys.syncs.Load() - before
	t.Logf("%d appends, %d fdatasyncs", writers*each, syncs)
	if syncs >= writers*each {
		t.Fatalf("no group commit: %d syncs for %d appends", syncs, writers*each)
	}
	for _, p := range parts {
		if p.DurableOffset() != p.NextOffset() || p.NextOffset() != writers/3*each {
			t.Fatalf("%s: durable %d next %d", p.name, p.DurableOffset(), p.NextOffset())
		}
	}
}

func TestAppendAsyncAndCloseFlushes(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Partition("p")
	var got []int64
	for i := range 10 {
		p.AppendAsync(genRecords(i, 2, 10), func(base int64, err error) {
			if err != nil {
				t.Error(err)
			}
			got = append(got, base) // appender goroutine (here: Close) only
		})
	}
	if err := s.Close(); err != nil { // Run never started: Close writes the queue
		t.Fatal(err)
	}
	if len(got) != 10 || got[9] != 18 {
		t.Fatalf("callbacks %v", got)
	}
	p.AppendAsync(genRecords(0, 1, 1), func(_ int64, err error) {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("append after close: %v", err)
		}
	})
	h := openHarness(t, dir, Options{})
	if n := h.part("p").NextOffset(); n != 20 {
		t.Fatalf("next after reopen %d", n)
	}
}

func TestBackpressure(t *testing.T) {
	s, err := OpenStore(t.TempDir(), Options{MaxBatchBytes: 4 << 10, MaxPendingBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Partition("p")
	var first atomic.Int64
	first.Store(-2)
	p.AppendAsync(genRecords(0, 1, 3000), func(b int64, err error) { first.Store(b) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Append(ctx, genRecords(1, 1, 3000)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append on a full queue: %v", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(runCtx) }()
	if _, err := p.Append(testCtx(t), genRecords(2, 1, 3000)); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
	s.Close()
	if first.Load() != 0 {
		t.Fatalf("first append: %d", first.Load())
	}
}

// A partition's own retention (a topic's) replaces the Store's: one
// partition keeps everything while its neighbour is trimmed by size, then by age.
func TestPartitionRetentionOverridesStore(t *testing.T) {
	clock := newFakeClock()
	o := Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 128, Now: clock.Now, Logger: quietLogger()}
	h := openHarness(t, t.TempDir(), o)
	keep, trim := h.part("keep"), h.part("trim")
	if err := trim.SetRetention(0, 8<<10); err != nil {
		t.Fatal(err)
	}
	if err := trim.SetRetention(-time.Second, 0); err == nil {
		t.Fatal("negative retention accepted")
	}
	appendSome(t, keep, 0, 100, 100)
	appendSome(t, trim, 0, 100, 100)
	if err := h.s.Maintain(); err != nil {
		t.Fatal(err)
	}
	if keep.StartOffset() != 0 {
		t.Fatalf("partition without retention trimmed to %d", keep.StartOffset())
	}
	sizeStart := trim.StartOffset()
	if sizeStart == 0 {
		t.Fatal("size retention of the partition deleted nothing")
	}
	if err := trim.SetRetention(time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	if err := h.s.Maintain(); err != nil {
		t.Fatal(err)
	}
	if trim.StartOffset() <= sizeStart || keep.StartOffset() != 0 {
		t.Fatalf("age retention: trim start %d (was %d), keep start %d", trim.StartOffset(), sizeStart, keep.StartOffset())
	}
}

// The producer fields of a record payload read back as EncodeRecords wrote
// them; anything else is not a record payload.
func TestRecordsProducer(t *testing.T) {
	data := EncodeRecords(nil, BatchHeader{ProducerID: -7, ProducerEpoch: 3, BaseSequence: 1 << 30}, []Record{{Value: []byte("v")}}, 1)
	id, epoch, seq, ok := RecordsProducer(data)
	if !ok || id != -7 || epoch != 3 || seq != 1<<30 {
		t.Fatalf("RecordsProducer = %d, %d, %d, %v; want -7, 3, %d, true", id, epoch, seq, ok, 1<<30)
	}
	if err := CheckRecords(data, DefaultMaxBatchBytes); err != nil {
		t.Fatalf("the payload with producer fields: %v", err)
	}
	if _, _, _, ok := RecordsProducer([]byte("short")); ok {
		t.Fatal("a short payload read as records")
	}
}
