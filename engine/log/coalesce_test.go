package log

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// writeCounter counts the writes to each segment file of a MemFS and can
// fail the n-th one.
type writeCounter struct {
	mu     sync.Mutex
	writes map[string]int // segment file → writes
	total  int
	failAt int // fail the total-th write when it equals failAt (0: never)
}

func countWrites(fsys *MemFS) *writeCounter {
	c := &writeCounter{writes: map[string]int{}}
	fsys.SetFault(func(op, name string) error {
		if op != "write" || !strings.HasSuffix(name, ".log") {
			return nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.writes[name]++
		c.total++
		if c.total == c.failAt {
			return syscall.EIO
		}
		return nil
	})
	return c
}

func (c *writeCounter) get() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.writes))
	for k, v := range c.writes {
		out[k] = v
	}
	return out, c.total
}

func (c *writeCounter) reset(failAt int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.writes)
	c.total, c.failAt = 0, failAt
}

// appendResult is what an AppendAsync reported.
type appendResult struct {
	base int64
	err  error
}

// queueAppends queues one AppendAsync per batch of recs on p (the store's
// appender must not be running: they all land in its next round) and
// returns where their results arrive, in append order.
func queueAppends(p *Partition, batches [][]Record) chan appendResult {
	res := make(chan appendResult, len(batches))
	for _, recs := range batches {
		p.AppendAsync(recs, func(base int64, err error) { res <- appendResult{base, err} })
	}
	return res
}

// oneRound runs one append round of s, as Run does, with everything queued.
func oneRound(s *Store) {
	s.roundMu.Lock()
	s.unlockRound(s.round())
}

// TestRoundWritesAPartitionOnce: a round holding many requests for each of
// two partitions writes each partition's segment with one call, in append
// order, and reports every request durable at its offset. It took one write
// per request: under a keyed load of 10-message publishes over 8 partitions,
// 0.8 pwrites per message.
func TestRoundWritesAPartitionOnce(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncAlways, FsyncInterval} {
		t.Run(mode.String(), func(t *testing.T) {
			fsys := NewMemFS()
			s, err := OpenStore("/data", Options{FS: fsys, Fsync: mode, FsyncInterval: time.Hour, IndexIntervalBytes: 100, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			a, _ := s.Partition("a")
			b, _ := s.Partition("b")
			c := countWrites(fsys)
			const n = 16
			var want [2][]Record
			var res [2][]chan appendResult
			var bases [2][]int64
			for i := range n {
				recs := genRecords(i, 1+i%3, 50)
				k := i % 2
				res[k] = append(res[k], queueAppends([]*Partition{a, b}[k], [][]Record{recs}))
				bases[k] = append(bases[k], int64(len(want[k])))
				want[k] = append(want[k], recs...)
			}
			oneRound(s)
			for k := range 2 {
				for i, ch := range res[k] {
					if r := <-ch; r.err != nil || r.base != bases[k][i] {
						t.Fatalf("partition %d, request %d: base %d, %v; want %d", k, i, r.base, r.err, bases[k][i])
					}
				}
			}
			wantA, wantB := want[0], want[1]
			writes, total := c.get()
			if total != 2 {
				t.Errorf("%d requests to two partitions in one round took %d writes (%v), want one per partition", n, total, writes)
			}
			checkContents(t, a, wantA)
			checkContents(t, b, wantB)
			if mode == FsyncAlways && (a.DurableOffset() != int64(len(wantA)) || b.DurableOffset() != int64(len(wantB))) {
				t.Fatalf("durable %d, %d; want %d, %d", a.DurableOffset(), b.DurableOffset(), len(wantA), len(wantB))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			fsys.Crash()
			s, err = OpenStore("/data", Options{FS: fsys, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			a, _ = s.Partition("a")
			b, _ = s.Partition("b")
			checkContents(t, a, wantA)
			checkContents(t, b, wantB)
		})
	}
}

// TestRoundFailedRunFailsEveryRequest: when the one write of a partition's
// requests in a round fails — an I/O error, or a full disk that took part
// of it — every one of them fails and the log is as it was before the
// round: in memory, in reads, after a reopen and after a crash; the next
// appends land where the failed ones would have.
func TestRoundFailedRunFailsEveryRequest(t *testing.T) {
	for _, fault := range []string{"eio", "full"} {
		t.Run(fault, func(t *testing.T) {
			forEachOption(t, func(t *testing.T, o Options) { testRoundFailedRun(t, o, fault) })
		})
	}
}

func testRoundFailedRun(t *testing.T, o Options, fault string) {
	fsys := NewMemFS()
	o.FS = fsys
	h := openHarness(t, "/data", o)
	p := h.part("p")
	want := appendSome(t, p, 0, 6, 100)
	lastIdx := p.LastIndex()
	if err := p.Roll(); err != nil { // the round's requests fit in the new segment: one run
		t.Fatal(err)
	}
	h.stop()
	var batches [][]Record
	for i := range 6 {
		batches = append(batches, genRecords(100+i, 2, 20))
	}
	c := countWrites(fsys)
	wantErr := syscall.EIO
	if fault == "eio" {
		c.reset(1)
	} else {
		wantErr = syscall.ENOSPC
		fsys.SetCapacity(fsys.Used() + 300) // two or three of the six
	}
	res := queueAppends(p, batches)
	oneRound(h.s)
	for i := range batches {
		if r := <-res; !errors.Is(r.err, wantErr) || r.base != -1 {
			t.Fatalf("request %d of the failed write: base %d, %v; want %v", i, r.base, r.err, wantErr)
		}
	}
	if _, total := c.get(); total != 1 {
		t.Fatalf("%d writes, want the one that failed", total)
	}
	fsys.SetFault(nil)
	fsys.SetCapacity(0)
	if p.LastIndex() != lastIdx || p.NextOffset() != int64(len(want)) || p.DurableOffset() > int64(len(want)) {
		t.Fatalf("after the failed round: last %d next %d durable %d; want %d, %d", p.LastIndex(), p.NextOffset(), p.DurableOffset(), lastIdx, len(want))
	}
	if fi, err := p.active().log.Stat(); err != nil || fi.Size() != 0 || p.active().size != 0 {
		t.Fatalf("the active segment holds %d bytes (file: %v, %v) after the failed write, want 0", p.active().size, fi, err)
	}
	checkContents(t, p, want)
	h.reopen()
	p = h.part("p")
	checkContents(t, p, want)
	// The next round writes where the failed one would have.
	h.stop()
	res = queueAppends(p, batches[:3])
	oneRound(h.s)
	for i := range 3 {
		r := <-res
		if r.err != nil || r.base != int64(len(want)) {
			t.Fatalf("append %d after the failure: base %d, %v; want %d", i, r.base, r.err, len(want))
		}
		want = append(want, batches[i]...)
	}
	checkContents(t, p, want)
	if o.Fsync == FsyncAlways {
		fsys.Crash()
		h.s = nil
		h.start()
		checkContents(t, h.part("p"), want)
	}
}

// queueEntries queues AppendEntries(ents) on p and returns where its
// result arrives.
func queueEntries(p *Partition, ents []Entry) chan error {
	res := make(chan error, 1)
	p.AppendEntries(ents, func(err error) { res <- err })
	return res
}

// queueTruncate queues TruncateAfter(index) on p behind the n requests
// already queued and returns where its result arrives.
func queueTruncate(t *testing.T, p *Partition, index uint64, n int) chan error {
	res := make(chan error, 1)
	go func() { res <- p.TruncateAfter(index) }()
	waitQueued(t, p.s, n+1)
	return res
}

// TestTruncateInRoundSplitsRun: a truncation between appends of a
// partition in one round ends their run: the appends before it are
// written first (and those it removes fail with ErrTruncated), the ones
// after it go where it cut, with a second write.
func TestTruncateInRoundSplitsRun(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncAlways, FsyncInterval} {
		t.Run(mode.String(), func(t *testing.T) {
			fsys := NewMemFS()
			h := openHarness(t, "/data", Options{FS: fsys, Fsync: mode, FsyncInterval: time.Hour, IndexIntervalBytes: 100, Logger: quietLogger()})
			p := h.part("p")
			h.stop()
			c := countWrites(fsys)
			ents := raftEntries(1, 6, 1, 0)
			newer := raftEntries(5, 3, ents[5].Term+1, 1)
			r1 := queueEntries(p, ents[:3])
			r2 := queueEntries(p, ents[3:])
			rt := queueTruncate(t, p, 4, 2)
			r3 := queueEntries(p, newer)
			oneRound(h.s)
			if err := <-r1; err != nil {
				t.Fatalf("entries 1-3: %v", err)
			}
			if err := <-r2; !errors.Is(err, ErrTruncated) {
				t.Fatalf("entries 4-6, truncated after 4 in their round: %v, want ErrTruncated", err)
			}
			if err := <-rt; err != nil {
				t.Fatalf("TruncateAfter(4): %v", err)
			}
			if err := <-r3; err != nil {
				t.Fatalf("entries 5-7 after the truncation: %v", err)
			}
			if _, total := c.get(); total != 2 {
				t.Errorf("%d writes, want 2: one before the truncation, one after", total)
			}
			want := append(append([]Entry{}, ents[:4]...), newer...)
			check := func(p *Partition) {
				t.Helper()
				if p.LastIndex() != 7 || !sameEntries(readEntries(t, p), want) {
					t.Fatalf("last %d; want entries 1-4 then the new 5-7", p.LastIndex())
				}
				checkContents(t, p, recordsOf(want))
			}
			check(p)
			if mode == FsyncAlways && p.DurableIndex() != 7 {
				t.Fatalf("durable index %d, want 7", p.DurableIndex())
			}
			fsys.SetFault(nil)
			h.resume()
			h.reopen()
			p = h.part("p")
			check(p)
			if mode == FsyncAlways {
				h.stop()
				fsys.Crash()
				h.s = nil
				h.start()
				check(h.part("p"))
			}
		})
	}
}

// TestRoundRunCutByRoll: appends of one partition in a round that fill the
// active segment are written with one call per segment; when the write
// after the roll fails, the append cut by the roll fails whole (its entries
// in the old segment are taken back) with every later one, while those
// written wholly before the roll succeed.
func TestRoundRunCutByRoll(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncAlways, FsyncInterval} {
		t.Run(mode.String(), func(t *testing.T) {
			fsys := NewMemFS()
			h := openHarness(t, "/data", Options{FS: fsys, Fsync: mode, FsyncInterval: time.Hour, SegmentBytes: 2 << 10, IndexIntervalBytes: 100, Logger: quietLogger()})
			p := h.part("p")
			h.stop()
			ents := raftEntries(1, 40, 1, 0)
			g := requestCutByRoll(t, ents, 2<<10) // entries per request
			var res []chan error
			for i := 0; i < len(ents); i += g {
				res = append(res, queueEntries(p, ents[i:min(i+g, len(ents))]))
			}
			// First, how the requests fall into segments when all goes well.
			c := countWrites(fsys)
			oneRound(h.s)
			for i, ch := range res {
				if err := <-ch; err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			writes, total := c.get()
			if len(p.segs) < 3 || total != len(writes) {
				t.Fatalf("%d writes to %d files over %d segments, want one per segment, three or more", total, len(writes), len(p.segs))
			}
			k := int(p.segs[0].nextIndex - p.segs[0].firstIndex) // entries in the first segment
			if k%g == 0 {
				t.Fatalf("the first segment holds %d entries: no request of %d was cut by the roll", k, g)
			}
			// Now again from an empty log, failing the second write.
			rt := queueTruncate(t, p, 0, 0)
			oneRound(h.s)
			if err := <-rt; err != nil || p.LastIndex() != 0 {
				t.Fatalf("TruncateAfter(0): %v, last %d", err, p.LastIndex())
			}
			res = res[:0]
			for i := 0; i < len(ents); i += g {
				res = append(res, queueEntries(p, ents[i:min(i+g, len(ents))]))
			}
			c.reset(2)
			oneRound(h.s)
			var ok int
			for i, ch := range res {
				err := <-ch
				switch {
				case err == nil && ok == i:
					ok++
				case err == nil:
					t.Fatalf("request %d succeeded after a failed one", i)
				case ok == i && !errors.Is(err, syscall.EIO):
					t.Fatalf("request %d: %v, want EIO", i, err)
				}
			}
			fsys.SetFault(nil)
			last := uint64(ok * g)
			if ok != k/g || p.LastIndex() != last || !sameEntries(readEntries(t, p), ents[:last]) {
				t.Fatalf("%d of %d requests written, last %d: want the %d wholly before the roll", ok, len(res), p.LastIndex(), k/g)
			}
			checkContents(t, p, recordsOf(ents[:last]))
			h.resume()
			if err := appendEntriesSync(t, p, ents[last:]); err != nil {
				t.Fatalf("appending the failed entries again: %v", err)
			}
			if mode == FsyncAlways {
				h.stop()
				fsys.Crash()
				h.s = nil
			} else {
				h.close()
			}
			h.start()
			p = h.part("p")
			if !sameEntries(readEntries(t, p), ents) {
				t.Fatal("after a reopen, the entries differ from those appended")
			}
		})
	}
}

// requestCutByRoll returns a number of entries per request such that the
// first segment of segBytes ends inside a request.
func requestCutByRoll(t *testing.T, ents []Entry, segBytes uint64) int {
	var size uint64
	k := 0 // entries in the first segment
	for ; k < len(ents) && (size == 0 || size+frameSize(ents[k]) <= segBytes); k++ {
		size += frameSize(ents[k])
	}
	for g := 3; g < k; g++ {
		if k%g != 0 {
			return g
		}
	}
	t.Fatalf("no request size cuts %d entries", k)
	return 0
}

// TestOSWriteAtv: the OS file's vectored write lays the buffers back to
// back at the offset, empty ones included, in calls of at most IOV_MAX
// buffers.
func TestOSWriteAtv(t *testing.T) {
	f, err := OSFS{}.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{1, 2, 7, maxIovecs, 2*maxIovecs + 3} {
		var bufs [][]byte
		var want []byte
		for i := range n {
			b := bytes.Repeat([]byte{byte(i)}, (i+1)%5) // every fifth one empty
			bufs = append(bufs, b)
			want = append(want, b...)
		}
		const off = 100
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if m, err := f.WriteAtv(bufs, off); err != nil || m != len(want) {
			t.Fatalf("%d buffers: wrote %d bytes, %v; want %d", n, m, err, len(want))
		}
		got := make([]byte, off+len(want))
		if m, err := f.ReadAt(got, 0); m != len(got) || (err != nil && err != io.EOF) {
			t.Fatalf("%d buffers: read back %d bytes, %v", n, m, err)
		}
		if !bytes.Equal(got[off:], want) || !bytes.Equal(got[:off], make([]byte, off)) {
			t.Fatalf("%d buffers: the file differs from the buffers back to back at %d", n, off)
		}
	}
}

// TestRunHoldsAtMostIOVMax: a round with more requests for a partition
// than one pwritev takes buffers writes them in as many calls as needed.
func TestRunHoldsAtMostIOVMax(t *testing.T) {
	fsys := NewMemFS()
	s, err := OpenStore("/data", Options{FS: fsys, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, _ := s.Partition("p")
	c := countWrites(fsys)
	var batches [][]Record
	var want []Record
	for i := range maxRunBufs + 10 {
		recs := []Record{{Timestamp: 1_700_000_000_000, Value: []byte{byte(i)}}}
		batches = append(batches, recs)
		want = append(want, recs...)
	}
	res := queueAppends(p, batches)
	oneRound(s)
	for i := range batches {
		if r := <-res; r.err != nil || r.base != int64(i) {
			t.Fatalf("request %d: base %d, %v", i, r.base, r.err)
		}
	}
	if _, total := c.get(); total != 2 {
		t.Fatalf("%d requests took %d writes, want 2", len(batches), total)
	}
	checkContents(t, p, want)
}

// TestRollSyncFailureFailsTheAppendsItCutBack: when the fdatasync a roll
// makes of the full segment fails, the appends of the round already written
// to that segment are cut back with its unsynced tail, so each of them must
// fail, with the fdatasync's error. Reporting them appended would
// acknowledge records the log no longer holds, at offsets the round's later
// appends then take.
func TestRollSyncFailureFailsTheAppendsItCutBack(t *testing.T) {
	fsys := NewMemFS()
	h := openHarness(t, "/data", Options{FS: fsys, Fsync: FsyncAlways, SegmentBytes: 2 << 10, IndexIntervalBytes: 100, Logger: quietLogger()})
	p := h.part("p")
	h.stop()
	var batches [][]Record
	for i := range 8 {
		batches = append(batches, genRecords(i, 1, 600)) // the third rolls the segment
	}
	res := queueAppends(p, batches)
	failFirstLogSync(fsys) // the roll's fdatasync of the full segment; the round's own succeed
	oneRound(h.s)
	fsys.SetFault(nil)
	failed := 0
	var want []Record
	for i := range batches {
		r := <-res
		switch {
		case r.err != nil:
			failed++
			if !errors.Is(r.err, syscall.EIO) {
				t.Errorf("append %d: %v, want the fdatasync's error (EIO)", i, r.err)
			}
		case r.base != int64(len(want)):
			t.Errorf("append %d reported at offset %d, want %d: an acknowledged append was cut back", i, r.base, len(want))
		default:
			want = append(want, batches[i]...)
		}
	}
	if failed == 0 {
		t.Fatal("no append failed: the round did not roll, or the sync fault did not fire")
	}
	checkContents(t, p, want)
	h.resume()
}

// TestFailedTruncationFailsTheAppendsItRemoved: a TruncateAfter whose
// fdatasync fails has already removed the entries after its index, from
// the view and the file, and fails the partition. The appends of its round
// whose entries it removed must fail with ErrTruncated, as when it
// succeeds: with fsync always they failed with an error that said nothing
// ("batch not durable after sync", marked unreachable), with fsync interval
// they were reported appended. The partition refuses later appends with
// the truncation's error until reopened, which recovers the truncated log.
func TestFailedTruncationFailsTheAppendsItRemoved(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncAlways, FsyncInterval} {
		t.Run(mode.String(), func(t *testing.T) {
			fsys := NewMemFS()
			h := openHarness(t, "/data", Options{FS: fsys, Fsync: mode, FsyncInterval: time.Hour, IndexIntervalBytes: 100, Logger: quietLogger()})
			p := h.part("p")
			ents := raftEntries(1, 6, 1, 0)
			if err := <-queueEntries(p, ents[:3]); err != nil {
				t.Fatalf("entries 1-3: %v", err)
			}
			h.stop()
			r1 := queueEntries(p, ents[3:])
			rt := queueTruncate(t, p, 4, 1)
			failFirstLogSync(fsys) // the truncation's fdatasync
			oneRound(h.s)
			fsys.SetFault(nil)
			terr := <-rt
			if !errors.Is(terr, syscall.EIO) {
				t.Fatalf("TruncateAfter(4) with its fdatasync failing: %v, want EIO", terr)
			}
			if err := <-r1; !errors.Is(err, ErrTruncated) {
				t.Errorf("entries 4-6, removed by the failed truncation after 4 in their round: %v, want ErrTruncated", err)
			}
			h.resume()
			if err := <-queueEntries(p, raftEntries(5, 1, 2, 1)); !errors.Is(err, terr) {
				t.Errorf("entry 5 after the failed truncation: %v, want the truncation's error", err)
			}
			if p.LastIndex() != 4 || !sameEntries(readEntries(t, p), ents[:4]) {
				t.Fatalf("last %d; want entries 1-4", p.LastIndex())
			}
			h.reopen()
			p = h.part("p")
			if p.LastIndex() != 4 || !sameEntries(readEntries(t, p), ents[:4]) {
				t.Fatalf("reopened: last %d; want entries 1-4", p.LastIndex())
			}
			if err := <-queueEntries(p, raftEntries(5, 1, 2, 1)); err != nil {
				t.Fatalf("entry 5 after the reopen: %v", err)
			}
		})
	}
}

// TestFailedTruncationSyncVouchesForNothing: after a TruncateAfter's
// fdatasync fails, the kernel may have dropped the pages written before it
// (syncFailed), among them those of the round's appends below its index.
// The round's closing fdatasync of the same file may then succeed, but it
// does not make them durable: they must fail, and the durable index must
// not move, on the failed partition.
func TestFailedTruncationSyncVouchesForNothing(t *testing.T) {
	fsys := NewMemFS()
	h := openHarness(t, "/data", Options{FS: fsys, Fsync: FsyncAlways, IndexIntervalBytes: 100, Logger: quietLogger()})
	p := h.part("p")
	ents := raftEntries(1, 6, 1, 0)
	if err := <-queueEntries(p, ents[:3]); err != nil {
		t.Fatalf("entries 1-3: %v", err)
	}
	h.stop()
	kept := queueEntries(p, ents[3:5]) // below the truncation's index: kept
	removed := queueEntries(p, ents[5:])
	rt := queueTruncate(t, p, 5, 2)
	failFirstLogSync(fsys) // the truncation's fdatasync
	oneRound(h.s)
	fsys.SetFault(nil)
	if err := <-rt; !errors.Is(err, syscall.EIO) {
		t.Fatalf("TruncateAfter(5) with its fdatasync failing: %v, want EIO", err)
	}
	if err := <-removed; !errors.Is(err, ErrTruncated) {
		t.Errorf("entry 6, removed by the truncation: %v, want ErrTruncated", err)
	}
	if err := <-kept; !errors.Is(err, syscall.EIO) {
		t.Errorf("entries 4-5, written before the failed fdatasync: %v, want the failed sync's error (EIO): the round's later sync cannot vouch for pages the kernel may have dropped", err)
	}
	if d := p.DurableIndex(); d != 3 {
		t.Errorf("durable index %d after the failed truncation sync, want 3", d)
	}
	h.resume()
}

// TestCloseReportsAFailedFinalSync: with fsync interval, Close fdatasyncs
// what was written since the last sync. When that fails, the store drops
// the unsynced tail (syncFailed) — appends already acknowledged — and
// Close must say so rather than return nil.
func TestCloseReportsAFailedFinalSync(t *testing.T) {
	fsys := NewMemFS()
	s, err := OpenStore("/data", Options{FS: fsys, Fsync: FsyncInterval, FsyncInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Partition("p")
	if err != nil {
		t.Fatal(err)
	}
	res := queueAppends(p, [][]Record{{{Timestamp: 1_700_000_000_000, Value: []byte("acknowledged, not synced")}}})
	oneRound(s)
	if r := <-res; r.err != nil {
		t.Fatalf("append: %v", r.err)
	}
	fsys.SetFault(func(op, name string) error {
		if op == "sync" && strings.HasSuffix(name, ".log") {
			return syscall.EIO
		}
		return nil
	})
	if err := s.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close with its fdatasync failing: %v, want an error wrapping EIO", err)
	}
}

// failFirstLogSync makes the next fdatasync of a segment file (.log) fail
// with EIO, and those after it succeed.
func failFirstLogSync(fsys *MemFS) {
	syncs := 0
	fsys.SetFault(func(op, name string) error {
		if op == "sync" && strings.HasSuffix(name, ".log") {
			if syncs++; syncs == 1 {
				return syscall.EIO
			}
		}
		return nil
	})
}
