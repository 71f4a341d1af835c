package log

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// raftEntries makes n entries from index from on: data entries (some
// terms apart) with an empty leader entry now and then.
func raftEntries(from uint64, n int, term uint64, seed int) []Entry {
	ents := make([]Entry, n)
	for k := range ents {
		i := from + uint64(k)
		if (int(i)+seed)%9 == 0 {
			term++
			ents[k] = Entry{Index: i, Term: term, Type: EntryNormal}
			continue
		}
		recs := genRecords(int(i)*7+seed, 1+int(i)%3, 40+int(i)%50)
		ents[k] = Entry{Index: i, Term: term, Type: EntryData, Data: EncodeRecords(nil, BatchHeader{}, recs, 0)}
	}
	return ents
}

func appendEntriesSync(t testing.TB, p *Partition, ents []Entry) error {
	t.Helper()
	errc := make(chan error, 1)
	p.AppendEntries(ents, func(err error) { errc <- err })
	select {
	case err := <-errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("AppendEntries: no answer in 30 s")
		return nil
	}
}

// readEntries reads every entry of p by raft index.
func readEntries(t testing.TB, p *Partition) []Entry {
	t.Helper()
	var out []Entry
	for i := p.FirstIndex(); i <= p.LastIndex(); {
		ents, err := p.Entries(i, p.LastIndex()+1, 1<<12)
		if err != nil {
			t.Fatalf("Entries(%d, %d): %v", i, p.LastIndex()+1, err)
		}
		for _, e := range ents {
			e.Data = bytes.Clone(e.Data)
			out = append(out, e)
		}
		i += uint64(len(ents))
	}
	return out
}

func sameEntries(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k].Index != b[k].Index || a[k].Term != b[k].Term || a[k].Type != b[k].Type || !bytes.Equal(a[k].Data, b[k].Data) {
			return false
		}
	}
	return true
}

// TestTruncateAfterCrashAtEveryStep replaces the suffix of a log that
// spans several segments (TruncateAfter, then AppendEntries of entries of a
// higher term, as a follower does on a conflict) and crashes the machine
// before the k-th file-system change, for every k: the change fails, and
// power is lost with it. After the crash the log must be a prefix of the
// old log that holds every entry up to the cut, or the cut log followed by
// a prefix of the new entries: never old and new entries mixed, never an
// entry up to the cut lost, and the partition opens healthy and takes
// appends after it.
func TestTruncateAfterCrashAtEveryStep(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncAlways, FsyncInterval} {
		for _, cutAt := range []uint64{0, 5, 17, 30, 44} {
			t.Run(fmt.Sprintf("fsync=%s/after=%d", mode, cutAt), func(t *testing.T) {
				for k := 0; ; k++ {
					if !truncateCrashAt(t, mode, cutAt, k) {
						if k < 3 {
							t.Fatalf("only %d file-system changes: the test does not reach the truncation", k)
						}
						return
					}
				}
			})
		}
	}
}

// truncateCrashAt runs one crash point; it reports whether the fault fired.
func truncateCrashAt(t *testing.T, mode FsyncMode, cutAt uint64, k int) bool {
	fsys := NewMemFS()
	o := Options{FS: fsys, Fsync: mode, FsyncInterval: time.Hour, SegmentBytes: 2 << 10, IndexIntervalBytes: 200, Logger: quietLogger()}
	h := openHarness(t, "/data", o)
	p := h.part("p")
	old := raftEntries(1, 45, 1, 0)
	for i := 0; i < len(old); i += 5 {
		if err := appendEntriesSync(t, p, old[i:i+5]); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Roll(); err != nil { // everything old is durable, in either mode
		t.Fatal(err)
	}
	if segs, _ := fsys.ReadDir("/data/p"); len(segs) < 9 {
		t.Fatalf("%d files: want a log of several segments", len(segs))
	}
	newer := raftEntries(cutAt+1, 6, old[len(old)-1].Term+1, 3)
	var ops atomic.Int64
	var fired atomic.Bool
	fsys.SetFault(func(op, name string) error {
		switch op {
		case "write", "sync", "truncate", "remove", "rename", "syncdir":
			if ops.Add(1)-1 == int64(k) {
				fired.Store(true)
				return syscall.EIO
			}
		}
		return nil
	})
	if err := p.TruncateAfter(cutAt); err == nil {
		appendEntriesSync(t, p, newer) // may fail: the fault
	}
	h.stop()
	fsys.SetFault(nil)
	fsys.Crash()
	h.s = nil
	h.start()
	p = h.part("p")
	got := readEntries(t, p)
	last := uint64(len(got))
	switch {
	case last < cutAt:
		t.Fatalf("crash before change %d: the log ends at %d, below the cut %d", k, last, cutAt)
	case last <= uint64(len(old)) && sameEntries(got, old[:last]):
	case last > cutAt && sameEntries(got, append(append([]Entry{}, old[:cutAt]...), newer[:last-cutAt]...)):
	default:
		t.Fatalf("crash before change %d: the log (%d entries) is neither a prefix of the old one nor the cut one with new entries", k, last)
	}
	if mode == FsyncAlways && !fired.Load() && last != cutAt+uint64(len(newer)) {
		t.Fatalf("no fault, yet the log ends at %d, want %d", last, cutAt+uint64(len(newer)))
	}
	// It takes appends after what survived.
	term := uint64(1)
	if len(got) > 0 {
		term = got[len(got)-1].Term + 1
	}
	more := raftEntries(last+1, 3, term, 5)
	if err := appendEntriesSync(t, p, more); err != nil {
		t.Fatalf("crash before change %d: append after recovery: %v", k, err)
	}
	h.close()
	return fired.Load()
}

// TestTruncateAfter covers the API over every option: the floor, the
// compacted boundary, a no-op past the end, what Entries, Term, Read and
// the offsets say afterwards, and that an append queued before a
// truncation in the same round fails with ErrTruncated rather than
// claiming durability.
func TestTruncateAfter(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		h := openHarness(t, t.TempDir(), o)
		p := h.part("p")
		ents := raftEntries(1, 40, 1, 0)
		if err := appendEntriesSync(t, p, ents); err != nil {
			t.Fatal(err)
		}
		offsetAt := func(i uint64) int64 { // records in entries before i
			var n int64
			for _, e := range ents[:i-1] {
				if e.Type == EntryData {
					_, recs, _, _ := DecodeBatch(frameOf(e.Data, e.Index, e.Term, 0))
					n += int64(len(recs))
				}
			}
			return n
		}
		if p.NextOffset() != offsetAt(41) {
			t.Fatalf("next offset %d, want %d", p.NextOffset(), offsetAt(41))
		}
		p.SetTruncateFloor(10)
		if err := p.TruncateAfter(9); !errors.Is(err, ErrBelowTruncateFloor) {
			t.Fatalf("TruncateAfter below the floor: %v", err)
		}
		if err := p.TruncateAfter(50); err != nil || p.LastIndex() != 40 {
			t.Fatalf("TruncateAfter past the end: %v, last %d", err, p.LastIndex())
		}
		if err := p.TruncateAfter(25); err != nil {
			t.Fatal(err)
		}
		if p.LastIndex() != 25 || p.NextOffset() != offsetAt(26) || p.DurableIndex() > 25 || p.DurableOffset() > offsetAt(26) {
			t.Fatalf("after TruncateAfter(25): last %d, next offset %d (want %d), durable %d/%d",
				p.LastIndex(), p.NextOffset(), offsetAt(26), p.DurableIndex(), p.DurableOffset())
		}
		if _, err := p.Term(26); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Term(26) after the cut: %v", err)
		}
		if _, err := p.Entries(20, 27, 1<<20); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Entries past the cut: %v", err)
		}
		if got := readEntries(t, p); !sameEntries(got, ents[:25]) {
			t.Fatal("entries after the cut differ from the first 25 appended")
		}
		checkContents(t, p, recordsOf(ents[:25]))
		// An append and a truncation that removes it, queued in one round:
		// the append must not be reported durable.
		h.stop()
		errc := make(chan error, 1)
		p.AppendEntries(raftEntries(26, 3, ents[24].Term, 0), func(err error) { errc <- err })
		truncated := make(chan error, 1)
		go func() { truncated <- p.TruncateAfter(25) }()
		waitQueued(t, h.s, 2)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.s.Run(ctx) }()
		if err := <-errc; !errors.Is(err, ErrTruncated) {
			t.Fatalf("append removed in its round: %v, want ErrTruncated", err)
		}
		if err := <-truncated; err != nil || p.LastIndex() != 25 {
			t.Fatalf("TruncateAfter(25): %v, last %d", err, p.LastIndex())
		}
		cancel()
		<-done
		h.reopen()
		p = h.part("p")
		if got := readEntries(t, p); !sameEntries(got, ents[:25]) {
			t.Fatal("after a reopen, the entries differ from the first 25 appended")
		}
		// Everything, down to the log start.
		if err := p.TruncateAfter(0); err != nil || p.LastIndex() != 0 || p.NextOffset() != 0 {
			t.Fatalf("TruncateAfter(0): %v, last %d, next %d", err, p.LastIndex(), p.NextOffset())
		}
		if err := appendEntriesSync(t, p, raftEntries(1, 3, 7, 1)); err != nil {
			t.Fatal(err)
		}
	})
}

func recordsOf(ents []Entry) []Record {
	var out []Record
	for _, e := range ents {
		if e.Type == EntryData {
			_, recs, _, _ := DecodeBatch(frameOf(e.Data, e.Index, e.Term, 0))
			out = append(out, recs...)
		}
	}
	return out
}

// waitQueued waits until n requests wait for the appender.
func waitQueued(t interface {
	Helper()
	Fatalf(string, ...any)
}, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		q := len(s.pending)
		s.mu.Unlock()
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond) // sleep-ok: polling a queue length no channel reports
	}
}

// TestAppendEntriesRefusesBadData: entries a follower could not read back
// are refused before anything is written, with ErrBadEntry.
func TestAppendEntriesRefusesBadData(t *testing.T) {
	h := openHarness(t, t.TempDir(), Options{Logger: quietLogger()})
	p := h.part("p")
	good := EncodeRecords(nil, BatchHeader{}, genRecords(1, 2, 10), 0)
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	for name, e := range map[string]Entry{
		"short":        {Index: 1, Term: 1, Type: EntryData, Data: good[:10]},
		"body crc":     {Index: 1, Term: 1, Type: EntryData, Data: flipped},
		"no records":   {Index: 1, Term: 1, Type: EntryData},
		"unknown type": {Index: 1, Term: 1, Type: 9},
	} {
		if err := appendEntriesSync(t, p, []Entry{e}); !errors.Is(err, ErrBadEntry) {
			t.Errorf("%s: %v, want ErrBadEntry", name, err)
		}
	}
	if err := appendEntriesSync(t, p, []Entry{{Index: 1, Term: 0, Type: EntryNormal}}); !errors.Is(err, ErrTermDecrease) {
		t.Errorf("term 0: %v", err)
	}
	if err := appendEntriesSync(t, p, []Entry{{Index: 1, Term: 1, Type: EntryNormal}, {Index: 3, Term: 1, Type: EntryNormal}}); !errors.Is(err, ErrNotContiguous) {
		t.Errorf("gap: %v", err)
	}
	if p.LastIndex() != 0 {
		t.Fatalf("refused entries were written: last %d", p.LastIndex())
	}
	if err := appendEntriesSync(t, p, []Entry{{Index: 1, Term: 1, Type: EntryData, Data: good}}); err != nil {
		t.Fatal(err)
	}
}

// TestRecordlessSegmentNotRolled: segments are named by base offset, so a
// segment holding only entries without records is not rolled (the next
// one would get its name); it grows past SegmentBytes instead and the log
// reopens intact.
func TestRecordlessSegmentNotRolled(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		h := openHarness(t, t.TempDir(), o)
		p := h.part("p")
		var ents []Entry
		for i := uint64(1); i <= 80; i++ {
			ents = append(ents, Entry{Index: i, Term: i, Type: EntryConfChange, Data: []byte(strings.Repeat("c", 30))})
		}
		if err := appendEntriesSync(t, p, ents); err != nil {
			t.Fatal(err)
		}
		if err := p.Roll(); err != nil {
			t.Fatal(err)
		}
		more := raftEntries(81, 30, 80, 0)
		if err := appendEntriesSync(t, p, more); err != nil {
			t.Fatal(err)
		}
		h.reopen()
		p = h.part("p")
		if got := readEntries(t, p); !sameEntries(got, append(ents, more...)) {
			t.Fatalf("after reopen: %d entries, want %d", len(got), len(ents)+len(more))
		}
	})
}

// TestRetentionKeepsLogStartTerm: after retention deletes segments, the
// index and term of the entry before the first one survive a reopen (raft
// asks Term(FirstIndex()-1)), and below it is ErrCompacted.
func TestRetentionKeepsLogStartTerm(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		o.RetentionBytes = 3 << 10
		h := openHarness(t, t.TempDir(), o)
		p := h.part("p")
		ents := raftEntries(1, 60, 1, 0)
		if err := appendEntriesSync(t, p, ents); err != nil {
			t.Fatal(err)
		}
		p.Roll()
		if err := h.s.Maintain(); err != nil {
			t.Fatal(err)
		}
		first := p.FirstIndex()
		if first <= 1 {
			t.Fatalf("retention deleted nothing: first index %d", first)
		}
		h.reopen()
		p = h.part("p")
		if p.FirstIndex() != first {
			t.Fatalf("first index %d after reopen, was %d", p.FirstIndex(), first)
		}
		if term, err := p.Term(first - 1); err != nil || term != ents[first-2].Term {
			t.Fatalf("Term(%d) = %d, %v; want %d", first-1, term, err, ents[first-2].Term)
		}
		if _, err := p.Term(first - 2); !errors.Is(err, ErrCompacted) {
			t.Fatalf("Term below the log start: %v", err)
		}
		if _, err := p.Entries(first-1, first+1, 1<<20); !errors.Is(err, ErrCompacted) {
			t.Fatalf("Entries below the log start: %v", err)
		}
		if got := readEntries(t, p); !sameEntries(got, ents[first-1:]) {
			t.Fatal("entries after retention differ")
		}
	})
}

// TestOldFormatRefused: a data dir of format 1 (partitions, no FORMAT file)
// or of an unknown format is refused with an error that says what to do.
func TestOldFormatRefused(t *testing.T) {
	fsys := NewMemFS()
	fsys.MkdirAll("/v1/orders-0", 0o755)
	f, _ := fsys.OpenFile("/v1/orders-0/00000000000000000000.log", 0o2|0o100, 0o644)
	f.Close()
	_, err := OpenStore("/v1", Options{FS: fsys})
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "format 1") || !strings.Contains(err.Error(), "move the data dir aside") {
		t.Fatalf("format 1 data dir: %v", err)
	}
	s, err := OpenStore("/v2", Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	fsys.Crash() // FORMAT is durable
	if s, err = OpenStore("/v2", Options{FS: fsys}); err != nil {
		t.Fatalf("reopen after a crash: %v", err)
	}
	s.Close()
	fsys.Corrupt("/v2/FORMAT", func([]byte) []byte { return []byte("spool-log 4\n") })
	if _, err := OpenStore("/v2", Options{FS: fsys}); !errors.Is(err, ErrFormat) {
		t.Fatalf("format 4: %v", err)
	}
}

// TestAppendEntriesFailingHalfWay: a request of entries spanning several
// segments whose write fails in a later segment leaves nothing of itself
// in the log (before and after a crash), and the log takes appends again.
func TestAppendEntriesFailingHalfWay(t *testing.T) {
	for _, mode := range []FsyncMode{FsyncAlways, FsyncInterval} {
		t.Run(mode.String(), func(t *testing.T) {
			fsys := NewMemFS()
			o := Options{FS: fsys, Fsync: mode, FsyncInterval: time.Hour, SegmentBytes: 2 << 10, IndexIntervalBytes: 200, Logger: quietLogger()}
			h := openHarness(t, "/data", o)
			p := h.part("p")
			first := raftEntries(1, 10, 1, 0)
			if err := appendEntriesSync(t, p, first); err != nil {
				t.Fatal(err)
			}
			p.Roll()
			var writes atomic.Int64
			fsys.SetFault(func(op, name string) error {
				if op == "write" && strings.HasSuffix(name, ".log") && writes.Add(1) == 3 {
					return syscall.EIO
				}
				return nil
			})
			big := raftEntries(11, 40, 2, 0)
			if err := appendEntriesSync(t, p, big); !errors.Is(err, syscall.EIO) {
				t.Fatalf("append over a failing write: %v", err)
			}
			fsys.SetFault(nil)
			if writes.Load() < 3 {
				t.Fatal("the request did not span three writes")
			}
			if p.LastIndex() != 10 || !sameEntries(readEntries(t, p), first) {
				t.Fatalf("after the failed append: last %d, want the first 10 entries only", p.LastIndex())
			}
			if err := appendEntriesSync(t, p, big); err != nil {
				t.Fatalf("append after the failure: %v", err)
			}
			h.stop()
			fsys.Crash()
			h.s = nil
			h.start()
			p = h.part("p")
			got := readEntries(t, p)
			if mode == FsyncAlways && !sameEntries(got, append(append([]Entry{}, first...), big...)) {
				t.Fatalf("after a crash: %d entries, want 50", len(got))
			}
			if !sameEntries(got, append(append([]Entry{}, first...), big...)[:len(got)]) || len(got) < 10 {
				t.Fatalf("after a crash: %d entries, not a prefix of what was appended", len(got))
			}
		})
	}
}

// TestRecoveryChecksRaftIndexes: an intact frame (both CRCs good) whose
// raft index skips or repeats, or whose term goes down, is corruption
// wherever it is, the last frame included (a torn write never makes an
// intact frame); with QuarantineCorrupt the partition opens quarantined,
// serving the entries before it.
func TestRecoveryChecksRaftIndexes(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame int // which frame of the segment (-1: the last)
		edit  func(h BatchHeader) (uint64, uint64)
	}{
		{"gap in the middle", 5, func(h BatchHeader) (uint64, uint64) { return h.RaftIndex + 1, h.RaftTerm }},
		{"repeat in the middle", 5, func(h BatchHeader) (uint64, uint64) { return h.RaftIndex - 1, h.RaftTerm }},
		{"gap at the tail", -1, func(h BatchHeader) (uint64, uint64) { return h.RaftIndex + 3, h.RaftTerm }},
		{"term decrease at the tail", -1, func(h BatchHeader) (uint64, uint64) { return h.RaftIndex, 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsys := NewMemFS()
			o := Options{FS: fsys, Logger: quietLogger()}
			_, last := buildPartitionEntries(t, fsys, o, 20)
			var at uint64
			fsys.Corrupt("/data/p/"+segmentName(0, ".log"), func(b []byte) []byte {
				var frames []int
				for pos := 0; pos < len(b); pos += frameLen(b[pos:]) {
					frames = append(frames, pos)
				}
				pos := frames[len(frames)-1]
				if c.frame >= 0 {
					pos = frames[c.frame]
				}
				h, _ := DecodeBatchHeader(b[pos:])
				idx, term := c.edit(h)
				at = h.RaftIndex
				l := frameLen(b[pos:])
				setPlacement(b[pos:pos+l], idx, term, h.BaseOffset)
				return b
			})
			s, err := OpenStore("/data", o)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Partition("p")
			var ce *CorruptionError
			if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "raft") {
				t.Fatalf("open: %v, want a CorruptionError about the raft index or term", err)
			}
			s.Close()
			o.QuarantineCorrupt = true
			s, err = OpenStore("/data", o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p, err := s.Partition("p")
			if err != nil || p.Quarantined() == nil || p.LastIndex() != at-1 {
				t.Fatalf("quarantined open: %v, quarantined %v, last index %d; want the %d entries before the damage (of %d)", err, p.Quarantined(), p.LastIndex(), at-1, last)
			}
			checkEntriesReadable(t, p)
		})
	}
}

// TestEntriesNoLimit: raft asks for entries with a maxBytes of
// math.MaxUint64 ("no limit"); Entries then returns entries up to
// MaxReadBytes, across segments, not one.
func TestEntriesNoLimit(t *testing.T) {
	h := openHarness(t, t.TempDir(), Options{SegmentBytes: 4 << 10, Logger: quietLogger()})
	p := h.part("p")
	ents := raftEntries(1, 60, 1, 0)
	if err := appendEntriesSync(t, p, ents); err != nil {
		t.Fatal(err)
	}
	got, err := p.Entries(1, 61, ^uint64(0))
	if err != nil || !sameEntries(got, ents) {
		t.Fatalf("Entries(1, 61, no limit): %d entries, %v; want all 60", len(got), err)
	}
}

// TestPayloadType: a record payload is told from other normal entries
// without a CRC: empty entries and commands with a zero count field are
// EntryNormal.
func TestPayloadType(t *testing.T) {
	for name, c := range map[string]struct {
		data []byte
		want EntryType
	}{
		"records":        {EncodeRecords(nil, BatchHeader{}, genRecords(1, 1, 0), 0), EntryData},
		"empty":          {nil, EntryNormal},
		"short":          {[]byte("set-log-start 42"), EntryNormal},
		"zero count":     {make([]byte, 64), EntryNormal},
		"one record min": {EncodeRecords(nil, BatchHeader{}, []Record{{}}, 0), EntryData},
	} {
		if got := PayloadType(c.data); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}
