package log

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// offsetBefore is the data offset the records of entry i start at, in a
// log holding ents from index 1.
func offsetBefore(ents []Entry, i uint64) int64 {
	return int64(len(recordsOf(ents[:i-1])))
}

// checkFrom checks that p holds ents from index from on, and their records
// from offset off on, with the same offsets, and refuses reads below off.
func checkFrom(t *testing.T, p *Partition, ents []Entry, from uint64, off int64) {
	t.Helper()
	last := uint64(len(ents))
	if p.LastIndex() != last {
		t.Fatalf("last index %d, want %d", p.LastIndex(), last)
	}
	if p.FirstIndex() > from {
		t.Fatalf("first index %d, past %d", p.FirstIndex(), from)
	}
	if from <= last {
		got, err := p.Entries(from, last+1, 1<<20)
		if err != nil {
			t.Fatalf("Entries(%d, %d): %v", from, last+1, err)
		}
		for len(got) < int(last+1-from) {
			more, err := p.Entries(from+uint64(len(got)), last+1, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, more...)
		}
		if !sameEntries(got, ents[from-1:]) {
			t.Fatalf("entries from %d differ from those appended", from)
		}
	}
	if p.StartOffset() != off {
		t.Fatalf("start offset %d, want %d", p.StartOffset(), off)
	}
	want := recordsOf(ents)[off:]
	for i, next := 0, off; next < p.NextOffset(); {
		recs, err := p.Read(next, 1<<20, p.NextOffset(), nil)
		if err != nil {
			t.Fatalf("Read(%d): %v", next, err)
		}
		for _, r := range recs {
			if r.Offset != next || string(r.Value) != string(want[i].Value) {
				t.Fatalf("record at %d (%q), want offset %d (%q)", r.Offset, r.Value, next, want[i].Value)
			}
			i++
			next++
		}
	}
	if off > 0 {
		var oor *OffsetOutOfRangeError
		if _, err := p.Read(off-1, 1<<20, p.NextOffset(), nil); !errors.As(err, &oor) {
			t.Fatalf("Read(%d) below the start: %v, want *OffsetOutOfRangeError", off-1, err)
		}
	}
}

// TestCompactTo over every option: whole segments before the point go,
// the entries and records from it stay with the same offsets, reads below
// it are refused, and all of this survives a reopen; appends go on.
func TestCompactTo(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		h := openHarness(t, t.TempDir(), o)
		p := h.part("p")
		ents := raftEntries(1, 60, 1, 0)
		for i := 0; i < len(ents); i += 6 {
			if err := appendEntriesSync(t, p, ents[i:i+6]); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []uint64{1, 20, 20, 37, 61} {
			off, err := p.OffsetOfIndex(f)
			if err != nil || off != offsetBefore(append(ents, Entry{}), f) {
				t.Fatalf("OffsetOfIndex(%d) = %d, %v; want %d", f, off, err, offsetBefore(append(ents, Entry{}), f))
			}
			if err := p.CompactTo(f, off); err != nil {
				t.Fatalf("CompactTo(%d, %d): %v", f, off, err)
			}
			checkFrom(t, p, ents, f, off)
			if t, err := p.Term(p.FirstIndex() - 1); err != nil || (p.FirstIndex() > 1 && t != ents[p.FirstIndex()-2].Term) {
				panic(fmt.Sprintf("Term of the log start: %d, %v", t, err))
			}
			h.reopen()
			p = h.part("p")
			checkFrom(t, p, ents, f, off)
		}
		if o.SegmentBytes < 4<<10 && p.FirstIndex() < 40 {
			t.Fatalf("first index %d after compacting to 61 with small segments: nothing deleted", p.FirstIndex())
		}
		// Wrong points are refused, older ones are no-ops.
		if err := p.CompactTo(61, p.NextOffset()+1); !errors.Is(err, ErrNotCompactable) {
			t.Fatalf("CompactTo with a wrong offset: %v", err)
		}
		if err := p.CompactTo(70, p.NextOffset()); !errors.Is(err, ErrNotCompactable) {
			t.Fatalf("CompactTo past the end: %v", err)
		}
		if err := p.CompactTo(1, 0); err != nil {
			t.Fatalf("CompactTo an older point: %v", err)
		}
		more := raftEntries(61, 5, ents[59].Term, 1)
		if err := appendEntriesSync(t, p, more); err != nil {
			t.Fatal(err)
		}
		all := append(append([]Entry{}, ents...), more...)
		checkFrom(t, p, all, 61, offsetBefore(ents, 60)+int64(len(recordsOf(ents[59:]))))
	})
}

// TestCompactToKeepsSegmentNeededByIndex: two replicas roll at different
// entries among entries without records, so a segment can start at the
// compaction offset and yet after the compaction index; the segment before
// it holds entries still needed and must survive a reopen (recover's
// leftover rule goes by the raft index, not only the offset).
func TestCompactToKeepsSegmentNeededByIndex(t *testing.T) {
	h := openHarness(t, t.TempDir(), Options{SegmentBytes: 64 << 20, Logger: quietLogger()})
	p := h.part("p")
	data := raftEntries(1, 10, 1, 1) // seed 1: no empty entry in 1..10 but index 8
	var ents []Entry
	for _, e := range data {
		e.Type, e.Term = EntryData, 1
		if e.Data == nil {
			e.Data = EncodeRecords(nil, BatchHeader{}, genRecords(int(e.Index), 1, 10), 0)
		}
		ents = append(ents, e)
	}
	ents = append(ents, Entry{Index: 11, Term: 2, Type: EntryNormal}, Entry{Index: 12, Term: 2, Type: EntryNormal})
	if err := appendEntriesSync(t, p, ents); err != nil {
		t.Fatal(err)
	}
	if err := p.Roll(); err != nil { // the next segment starts at entry 13, at the offset after entry 10
		t.Fatal(err)
	}
	tail := raftEntries(13, 5, 2, 1)
	if err := appendEntriesSync(t, p, tail); err != nil {
		t.Fatal(err)
	}
	ents = append(ents, tail...)
	off := offsetBefore(ents, 11)
	if err := p.CompactTo(11, off); err != nil {
		t.Fatal(err)
	}
	checkFrom(t, p, ents, 11, off)
	h.reopen()
	p = h.part("p")
	checkFrom(t, p, ents, 11, off)
	if tm, err := p.Term(11); err != nil || tm != 2 {
		t.Fatalf("Term(11) after reopen: %d, %v", tm, err)
	}
}

// TestRetentionPoint: the point is the start of a closed segment, by size
// and by age, never past below or keepIndex, never at or before the start.
func TestRetentionPoint(t *testing.T) {
	clock := newFakeClock()
	h := openHarness(t, t.TempDir(), Options{SegmentBytes: 2 << 10, IndexIntervalBytes: 200, Now: clock.Now, Logger: quietLogger()})
	p := h.part("p")
	ents := raftEntries(1, 60, 1, 0)
	if err := appendEntriesSync(t, p, ents); err != nil {
		t.Fatal(err)
	}
	end := p.NextOffset()
	if _, _, ok := p.RetentionPoint(0, 0, clock.Now(), end, 61); ok {
		t.Fatal("a point with no retention")
	}
	off, idx, ok := p.RetentionPoint(0, 4<<10, clock.Now(), end, 61)
	if !ok || idx <= 1 || off != offsetBefore(ents, idx) {
		t.Fatalf("by size: %d, %d, %v", off, idx, ok)
	}
	if got, err := p.OffsetOfIndex(idx); err != nil || got != off {
		t.Fatalf("OffsetOfIndex(%d) = %d, %v, want %d", idx, got, err, off)
	}
	if o2, i2, ok := p.RetentionPoint(0, 4<<10, clock.Now(), end, idx-1); ok && (i2 > idx-1 || o2 >= off) {
		t.Fatalf("keepIndex %d: point %d, %d", idx-1, o2, i2)
	}
	if o2, _, ok := p.RetentionPoint(0, 4<<10, clock.Now(), off-1, 61); ok && o2 > off-1 {
		t.Fatalf("below %d: point %d", off-1, o2)
	}
	// By age: the records are a few seconds old at most; a day later every
	// closed segment is past an age of an hour.
	if _, _, ok := p.RetentionPoint(time.Hour, 0, clock.Now(), end, 61); ok {
		t.Fatal("by age: a point while every record is younger than the age")
	}
	clock.Advance(24 * time.Hour)
	off, idx, ok = p.RetentionPoint(time.Hour, 0, clock.Now(), end, 61)
	if !ok || idx < 40 {
		t.Fatalf("by age: %d, %d, %v", off, idx, ok)
	}
	if err := p.CompactTo(idx, off); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := p.RetentionPoint(time.Hour, 0, clock.Now(), end, 61); ok {
		t.Fatal("a point at or before the start after compacting to it")
	}
}

// TestResetTo: the log is replaced by an empty one after (index, term) at
// offset, which takes the entries after it and survives a reopen.
func TestResetTo(t *testing.T) {
	forEachOption(t, func(t *testing.T, o Options) {
		h := openHarness(t, t.TempDir(), o)
		p := h.part("p")
		if err := appendEntriesSync(t, p, raftEntries(1, 30, 1, 0)); err != nil {
			t.Fatal(err)
		}
		check := func() {
			t.Helper()
			if p.LastIndex() != 100 || p.FirstIndex() != 101 || p.NextOffset() != 5000 || p.StartOffset() != 5000 || p.DurableOffset() != 5000 {
				t.Fatalf("after ResetTo: last %d first %d next %d start %d durable %d", p.LastIndex(), p.FirstIndex(), p.NextOffset(), p.StartOffset(), p.DurableOffset())
			}
			if tm, err := p.Term(100); err != nil || tm != 7 {
				t.Fatalf("Term(100) = %d, %v", tm, err)
			}
			if _, err := p.Term(99); !errors.Is(err, ErrCompacted) {
				t.Fatalf("Term(99): %v", err)
			}
		}
		if err := p.ResetTo(100, 7, 5000); err != nil {
			t.Fatal(err)
		}
		check()
		h.reopen()
		p = h.part("p")
		check()
		next := raftEntries(101, 10, 7, 2)
		if err := appendEntriesSync(t, p, next); err != nil {
			t.Fatal(err)
		}
		h.reopen()
		p = h.part("p")
		recs := recordsOf(next)
		got, err := p.Read(5000, 1<<20, p.NextOffset(), nil)
		if err != nil || len(got) == 0 || got[0].Offset != 5000 || string(got[0].Value) != string(recs[0].Value) {
			t.Fatalf("Read(5000) after the reset: %v, %d records", err, len(got))
		}
		if p.NextOffset() != 5000+int64(len(recs)) {
			t.Fatalf("next offset %d, want %d", p.NextOffset(), 5000+int64(len(recs)))
		}
		if err := p.ResetTo(3, 0, 1); err == nil {
			t.Fatal("ResetTo an index without a term")
		}
	})
}

// crashFS arms fsys to fail the k-th file-system change (and lose power
// with it); it reports whether it fired.
func crashFS(fsys *MemFS, k int) *atomic.Bool {
	var ops atomic.Int64
	var fired atomic.Bool
	fsys.SetFault(func(op, name string) error {
		switch op {
		case "write", "sync", "truncate", "remove", "rename", "syncdir", "create":
			if ops.Add(1)-1 == int64(k) {
				fired.Store(true)
			}
			if fired.Load() {
				return syscall.EIO // a dead disk: everything after fails too
			}
		}
		return nil
	})
	return &fired
}

// TestCompactToCrashAtEveryStep: power lost at every file-system change of
// a compaction leaves the log either as it was or compacted, always
// holding every entry from the point on with the same records and offsets
// (the start offset one or the other), and a second CompactTo completes it.
func TestCompactToCrashAtEveryStep(t *testing.T) {
	for k := 0; ; k++ {
		fsys := NewMemFS()
		o := Options{FS: fsys, SegmentBytes: 2 << 10, IndexIntervalBytes: 200, Logger: quietLogger()}
		h := openHarness(t, "/data", o)
		p := h.part("p")
		ents := raftEntries(1, 50, 1, 0)
		if err := appendEntriesSync(t, p, ents); err != nil {
			t.Fatal(err)
		}
		if err := p.CompactTo(10, offsetBefore(ents, 10)); err != nil {
			t.Fatal(err)
		}
		f := uint64(37)
		off := offsetBefore(ents, f)
		fired := crashFS(fsys, k)
		_ = p.CompactTo(f, off)
		h.stop()
		fsys.SetFault(nil)
		fsys.Crash()
		h.s = nil
		h.start()
		p = h.part("p")
		if s := p.StartOffset(); s != off {
			checkFrom(t, p, ents, 10, offsetBefore(ents, 10))
		} else {
			checkFrom(t, p, ents, f, off)
		}
		if err := p.CompactTo(f, off); err != nil {
			t.Fatalf("crash at change %d: CompactTo again: %v", k, err)
		}
		checkFrom(t, p, ents, f, off)
		h.close()
		if !fired.Load() {
			if k < 2 {
				t.Fatalf("only %d changes: the test does not reach the compaction", k)
			}
			return
		}
	}
}

// TestResetToCrashAtEveryStep: power lost at every file-system change of
// a reset leaves a prefix of the old log (from its first entry) or the
// empty log after (index, term) at offset; a second ResetTo completes it.
func TestResetToCrashAtEveryStep(t *testing.T) {
	for k := 0; ; k++ {
		fsys := NewMemFS()
		o := Options{FS: fsys, SegmentBytes: 2 << 10, IndexIntervalBytes: 200, Logger: quietLogger()}
		h := openHarness(t, "/data", o)
		p := h.part("p")
		ents := raftEntries(1, 50, 1, 0)
		if err := appendEntriesSync(t, p, ents); err != nil {
			t.Fatal(err)
		}
		if err := p.CompactTo(10, offsetBefore(ents, 10)); err != nil {
			t.Fatal(err)
		}
		fired := crashFS(fsys, k)
		_ = p.ResetTo(80, 9, 4000)
		h.stop()
		fsys.SetFault(nil)
		fsys.Crash()
		h.s = nil
		h.start()
		p = h.part("p")
		reset := p.LastIndex() == 80 && p.FirstIndex() == 81 && p.NextOffset() == 4000
		if !reset {
			got := readEntries(t, p)
			if len(got) > 0 && !sameEntries(got, ents[got[0].Index-1:got[len(got)-1].Index]) {
				t.Fatalf("crash at change %d: the log is neither the reset one nor a part of the old one", k)
			}
			if p.LastIndex() > 0 && p.FirstIndex() > 10 {
				t.Fatalf("crash at change %d: first index %d, the old log started at or before 10", k, p.FirstIndex())
			}
		} else if tm, err := p.Term(80); err != nil || tm != 9 {
			t.Fatalf("crash at change %d: Term(80) = %d, %v", k, tm, err)
		}
		if err := p.ResetTo(80, 9, 4000); err != nil {
			t.Fatalf("crash at change %d: ResetTo again: %v", k, err)
		}
		if err := appendEntriesSync(t, p, raftEntries(81, 3, 9, 0)); err != nil {
			t.Fatalf("crash at change %d: append after the reset: %v", k, err)
		}
		h.close()
		if !fired.Load() {
			if k < 3 {
				t.Fatalf("only %d changes: the test does not reach the reset", k)
			}
			return
		}
	}
}
