package log

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// modelEntry is one raft entry of the model, with the records it holds.
type modelEntry struct {
	Entry
	recs []Record
}

// raftMachine checks the raft view of a Partition on MemFS (AppendEntries,
// single-node appends, TruncateAfter, Term, Entries, Read, rolls, crashes
// and reopens) against a plain slice of entries.
type raftMachine struct {
	fsys   *MemFS
	clock  *fakeClock
	o      Options
	s      *Store
	p      *Partition
	cancel context.CancelFunc
	done   chan error

	ents  []modelEntry // ents[k] has index k+1
	floor uint64
	// failed is the error of a TruncateAfter whose fdatasync failed: the
	// partition refuses every change with it until the store is reopened
	// (reads serve the truncated log). old is the log before that
	// truncation: after a crash the log is a prefix of it.
	failed error
	old    []modelEntry
}

// refused reports whether the partition has failed, and then checks that
// err, what an operation on it returned, is the partition's error.
func (m *raftMachine) refused(t *rapid.T, what string, err error) bool {
	if m.failed == nil {
		return false
	}
	if !errors.Is(err, m.failed) {
		t.Fatalf("%s on the failed partition: %v, want %v", what, err, m.failed)
	}
	return true
}

// checkLog compares the whole log with the model.
func (m *raftMachine) checkLog(t *rapid.T) {
	last := uint64(len(m.ents))
	if got := m.p.LastIndex(); got != last {
		t.Fatalf("LastIndex %d, model %d", got, last)
	}
	for lo := uint64(1); lo <= last; {
		got, err := m.p.Entries(lo, last+1, 1<<20)
		if err != nil || len(got) == 0 {
			t.Fatalf("Entries(%d, %d): %d entries, %v", lo, last+1, len(got), err)
		}
		for _, e := range got {
			if want := m.ents[lo-1]; !sameEntry(e, want) {
				t.Fatalf("entry %d = {%d %d %v %q}, want {%d %d %v %q}", lo, e.Index, e.Term, e.Type, e.Data, want.Index, want.Term, want.Type, want.Data)
			}
			lo++
		}
	}
}

func sameEntry(e Entry, want modelEntry) bool {
	return e.Index == want.Index && e.Term == want.Term && e.Type == want.Type && bytes.Equal(e.Data, want.Data)
}

func (m *raftMachine) open(t *rapid.T) {
	s, err := OpenStore("/data", m.o)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	p, err := s.Partition("orders-0")
	if err != nil {
		t.Fatalf("Partition: %v", err)
	}
	p.SetTruncateFloor(m.floor) // not persisted: the owner sets it again, as raft's adapter would
	m.s, m.p = s, p
	m.startRun()
}

func (m *raftMachine) startRun() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	m.cancel, m.done = cancel, done
	go func() { done <- m.s.Run(ctx) }()
}

func (m *raftMachine) stopRun() {
	m.cancel()
	<-m.done
}

func (m *raftMachine) lastTerm() uint64 {
	if len(m.ents) == 0 {
		return 0
	}
	return m.ents[len(m.ents)-1].Term
}

func (m *raftMachine) records() []Record {
	var out []Record
	for _, e := range m.ents {
		out = append(out, e.recs...)
	}
	return out
}

func (m *raftMachine) drawRecords(t *rapid.T) []Record {
	recs := make([]Record, rapid.IntRange(1, 4).Draw(t, "n"))
	now := m.clock.Now().UnixMilli()
	for i := range recs {
		recs[i] = Record{
			Timestamp: now + rapid.Int64Range(-1000, 1000).Draw(t, "dts"),
			Key:       rapid.SliceOfN(rapid.Byte(), 0, 6).Draw(t, "key"),
			Value:     rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(t, "value"),
		}
	}
	return recs
}

// AppendEntries appends 1 to 4 entries, sometimes replacing a suffix
// above the floor first (TruncateAfter, as a follower does on a conflict).
func (m *raftMachine) AppendEntries(t *rapid.T) {
	last := uint64(len(m.ents))
	from := last + 1
	if rapid.IntRange(0, 3).Draw(t, "conflict") == 0 && last > m.floor {
		from = rapid.Uint64Range(m.floor+1, last).Draw(t, "from")
		switch err := m.p.TruncateAfter(from - 1); {
		case m.refused(t, "TruncateAfter", err):
		case err != nil:
			t.Fatalf("TruncateAfter(%d): %v", from-1, err)
		default:
			m.ents = m.ents[:from-1]
		}
	}
	model := m.drawEntries(t, from, max(m.lastTerm(), 1))
	errc := make(chan error, 1)
	m.p.AppendEntries(entriesOf(model), func(err error) { errc <- err })
	if err := <-errc; m.refused(t, "AppendEntries", err) {
		return
	} else if err != nil {
		t.Fatalf("AppendEntries from %d: %v", from, err)
	}
	m.ents = append(m.ents, model...)
}

// drawEntries draws 1 to 4 entries from index from, of a term at least min.
func (m *raftMachine) drawEntries(t *rapid.T, from, min uint64) []modelEntry {
	term := min + rapid.Uint64Range(0, 2).Draw(t, "dterm")
	var model []modelEntry
	for k := range rapid.IntRange(1, 4).Draw(t, "entries") {
		e := modelEntry{Entry: Entry{Index: from + uint64(k), Term: term}}
		switch rapid.IntRange(0, 5).Draw(t, "type") {
		case 0:
			e.Type = EntryNormal
		case 1:
			e.Type, e.Data = EntryConfChange, rapid.SliceOfN(rapid.Byte(), 1, 20).Draw(t, "cc")
		default:
			e.Type, e.recs = EntryData, m.drawRecords(t)
			e.Data = EncodeRecords(nil, BatchHeader{}, e.recs, 0)
		}
		model = append(model, e)
	}
	return model
}

func entriesOf(model []modelEntry) []Entry {
	ents := make([]Entry, len(model))
	for k, e := range model {
		ents[k] = e.Entry
	}
	return ents
}

// roundOp is one request of a Round: entries to append (ents), records for
// a single-node append (recs), or a truncation (truncate, after index).
type roundOp struct {
	ents     []modelEntry
	recs     []Record
	truncate bool
	index    uint64
	err      chan error
	base     chan appendResult
}

// Round queues 2 to 8 requests for one round — entries continuing one
// another, single-node appends, truncations above the floor between them —
// and sometimes fails one of the round's writes or fdatasyncs (a roll's, a
// truncation's or, with fsync always, the round's). The model follows what
// the store promises, request by request in the order they were queued:
//
//   - With no failure every request succeeds, but an append that a later
//     truncation of the round removes fails with ErrTruncated.
//   - A failed write fails the appends of its run with EIO; the log holds
//     exactly what succeeded, in order.
//   - A failed fdatasync of a roll or of the round cuts the segment back to
//     what was synced (the DurableIndex the store reported when it failed)
//     and fails with EIO the appends of the round it cut. It cuts nothing
//     durable and no append the round reports as succeeded. With fsync
//     interval it may cut entries that earlier rounds acknowledged but did
//     not sync yet (docs/semantics.md): the model drops them. An
//     AppendEntries whose first entries went to the segment before a roll
//     that synced them fails, but keeps those entries in the log.
//   - A failed fdatasync of a truncation fails the partition: the
//     truncation was applied to the view and the file, but is not known
//     durable. It fails with that error, and so does every later request
//     until the store is reopened (see failed). The appends of the round it
//     removed fail with ErrTruncated, as when it succeeds. With fsync always
//     nothing of the round becomes durable after it (the kernel may have
//     dropped pages written before the failed fdatasync): the appends it
//     kept fail with the partition's error unless a roll synced them
//     before, their entries still in the view, and DurableIndex stays where
//     it was when the fdatasync failed.
//   - After a failure, entries planned on the log that was to be are refused
//     when they no longer continue the log (ErrNotContiguous,
//     ErrTermDecrease); single-node appends go where the log now ends.
func (m *raftMachine) Round(t *rapid.T) {
	m.stopRun()
	defer m.startRun()
	plan := slices.Clone(m.ents) // the log if everything succeeds
	lastTerm := func() uint64 {
		if len(plan) == 0 {
			return 0
		}
		return plan[len(plan)-1].Term
	}
	failOp := rapid.SampledFrom([]string{"write", "sync"}).Draw(t, "failOp")
	if m.s.j != nil {
		// With the journal a round syncs no segment; a failed segment sync
		// at a checkpoint fails the store (TestJournalFailures), which
		// this model does not follow.
		failOp = "write"
	}
	fail := rapid.IntRange(0, 3).Draw(t, "fail") // 0: none; else the n-th such call of the round
	var calls int
	var cutAt uint64 // the failed fdatasync's: where the store said the log was durable
	m.fsys.SetFault(func(op, name string) error {
		if op == failOp && strings.HasSuffix(name, ".log") {
			if calls++; calls == fail {
				cutAt = m.p.DurableIndex()
				return syscall.EIO
			}
		}
		return nil
	})
	defer m.fsys.SetFault(nil)
	durable := m.p.DurableIndex() // no failure may cut below it (a truncation may)
	var ops []roundOp
	for range rapid.IntRange(2, 8).Draw(t, "requests") {
		var op roundOp
		switch kind := rapid.IntRange(0, 4).Draw(t, "kind"); {
		case kind == 0 && uint64(len(plan)) > m.floor:
			op.truncate, op.index = true, rapid.Uint64Range(m.floor, uint64(len(plan))-1).Draw(t, "after")
			op.err = make(chan error, 1)
			go func() { op.err <- m.p.TruncateAfter(op.index) }()
			waitQueued(t, m.s, len(ops)+1)
			plan = plan[:op.index]
		case kind == 1:
			op.recs = m.drawRecords(t)
			op.base = queueAppends(m.p, [][]Record{op.recs})
			e := modelEntry{Entry: Entry{Index: uint64(len(plan)) + 1, Term: max(lastTerm(), 1), Type: EntryData}, recs: op.recs}
			plan = append(plan, e)
		default:
			op.ents = m.drawEntries(t, uint64(len(plan))+1, max(lastTerm(), 1))
			op.err = queueEntries(m.p, entriesOf(op.ents))
			plan = append(plan, op.ents...)
		}
		ops = append(ops, op)
	}
	oneRound(m.s)
	fired := fail > 0 && calls >= fail
	errs, bases := make([]error, len(ops)), make([]int64, len(ops))
	for i, op := range ops {
		if op.base != nil {
			r := <-op.base
			errs[i], bases[i] = r.err, r.base
		} else {
			errs[i] = <-op.err
		}
	}
	if m.failed != nil {
		for i, err := range errs {
			m.refused(t, fmt.Sprintf("op %d", i), err)
		}
		return
	}
	// live are the appends of this round written and still in the model, by
	// the raft index they end at.
	type liveOp struct {
		i   int
		end uint64
	}
	var live []liveOp
	// removed checks that the appends of this round a truncation after
	// index removed failed with ErrTruncated.
	removed := func(index uint64) {
		kept := live[:0]
		for _, l := range live {
			if l.end <= index {
				kept = append(kept, l)
			} else if !errors.Is(errs[l.i], ErrTruncated) {
				t.Fatalf("op %d (entries up to %d) removed by a truncation after %d: %v, want ErrTruncated", l.i, l.end, index, errs[l.i])
			}
		}
		live = kept
	}
	// A truncation whose fdatasync failed fails the partition, and with
	// fsync always the round's closing sync then vouches for nothing: the
	// appends before it that it kept and no roll had synced fail with the
	// partition's error, their entries still in the log (syncFailed: the
	// kernel may have dropped their pages).
	truncFailed := len(ops)
	for i, op := range ops {
		if op.truncate && errs[i] != nil {
			truncFailed = i
			break
		}
	}
	unvouched := func(i int) bool {
		return i < truncFailed && truncFailed < len(ops) && m.o.Fsync == FsyncAlways && errs[i] != nil && errors.Is(errs[i], errs[truncFailed])
	}
	eio, cut := false, false
	for i, op := range ops {
		err := errs[i]
		switch {
		case m.failed != nil: // a truncation earlier in the round failed the partition
			m.refused(t, fmt.Sprintf("op %d", i), err)
		case op.truncate && err == nil:
			if op.index < uint64(len(m.ents)) {
				removed(op.index)
				m.ents = m.ents[:op.index]
				durable = op.index // the truncation synced what it kept
			}
		case op.truncate:
			if !fired || failOp != "sync" || !errors.Is(err, syscall.EIO) {
				t.Fatalf("op %d: TruncateAfter(%d): %v (failed %s %d: %v)", i, op.index, err, failOp, fail, fired)
			}
			removed(op.index)
			m.failed, m.old = err, slices.Clone(m.ents)
			m.ents = m.ents[:min(op.index, uint64(len(m.ents)))]
			eio = true
		case err == nil || errors.Is(err, ErrTruncated) || unvouched(i):
			// Written (ErrTruncated: then removed by a truncation, checked
			// there; unvouched: not durable, see truncFailed).
			if op.recs != nil {
				if want := int64(len(m.records())); err == nil && bases[i] != want {
					t.Fatalf("op %d: base %d, want %d", i, bases[i], want)
				}
				e := modelEntry{Entry: Entry{Index: uint64(len(m.ents)) + 1, Term: max(m.lastTerm(), 1), Type: EntryData}, recs: op.recs}
				e.Data = EncodeRecords(nil, BatchHeader{}, op.recs, 0)
				m.ents = append(m.ents, e)
			} else {
				if op.ents[0].Index != uint64(len(m.ents))+1 {
					t.Fatalf("op %d: entries from %d written after entry %d", i, op.ents[0].Index, len(m.ents))
				}
				m.ents = append(m.ents, op.ents...)
			}
			live = append(live, liveOp{i: i, end: uint64(len(m.ents))})
		case !fired:
			t.Fatalf("op %d: %v, with no failed %s", i, err, failOp)
		case errors.Is(err, syscall.EIO):
			eio = true
			if failOp != "sync" || cut {
				break
			}
			// The first append the failed fdatasync cut: the cut is here.
			// If a roll of the round synced the first entries of this one
			// before, they stay, though it fails (not taken back as after a
			// failed write).
			cut = true
			if have := uint64(len(m.ents)); op.ents != nil && op.ents[0].Index == have+1 && cutAt > have {
				m.ents = append(m.ents, op.ents[:min(cutAt-have, uint64(len(op.ents)-1))]...)
			}
			if cutAt < durable || cutAt > uint64(len(m.ents)) {
				t.Fatalf("op %d: fdatasync failed with DurableIndex %d; the model's log ends at %d, durable up to %d", i, cutAt, len(m.ents), durable)
			}
			if n := len(live); n > 0 && live[n-1].end > cutAt {
				t.Fatalf("op %d: a failed fdatasync cut the log to %d, losing op %d (up to %d), reported %v", i, cutAt, live[n-1].i, live[n-1].end, errs[live[n-1].i])
			}
			m.ents = m.ents[:cutAt]
		case errors.Is(err, ErrNotContiguous):
			if op.ents == nil || op.ents[0].Index == uint64(len(m.ents))+1 {
				t.Fatalf("op %d: %v, after entry %d", i, err, len(m.ents))
			}
		case errors.Is(err, ErrTermDecrease):
			if op.ents == nil || op.ents[0].Index != uint64(len(m.ents))+1 || op.ents[0].Term >= m.lastTerm() {
				t.Fatalf("op %d: %v, after entry %d of term %d", i, err, len(m.ents), m.lastTerm())
			}
		default:
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if truncFailed < len(ops) && m.o.Fsync == FsyncAlways {
		// Nothing of the round becomes durable after the failed sync:
		// what was durable then is all that is (cutAt).
		if d := m.p.DurableIndex(); d != cutAt {
			t.Fatalf("DurableIndex %d after the round; %d when the truncation's fdatasync failed", d, cutAt)
		}
		for _, l := range live {
			if (errs[l.i] == nil) != (l.end <= cutAt) {
				t.Fatalf("op %d (entries up to %d), before the truncation whose fdatasync failed with DurableIndex %d: %v", l.i, l.end, cutAt, errs[l.i])
			}
		}
	}
	for _, l := range live {
		switch {
		case errs[l.i] == nil:
			if d := m.p.DurableIndex(); m.o.Fsync == FsyncAlways && l.end > d {
				t.Fatalf("op %d (entries up to %d) reported durable, DurableIndex %d", l.i, l.end, d)
			}
		case !unvouched(l.i):
			t.Fatalf("op %d: %v, its entries (up to %d) still in the log", l.i, errs[l.i], l.end)
		}
	}
	if fired && !eio {
		t.Fatalf("%s %d of the round failed, no request did", failOp, fail)
	}
	if fired {
		m.checkLog(t)
	}
}

// Append is the single-node path: it takes index last+1 and the last term (1 at first).
func (m *raftMachine) Append(t *rapid.T) {
	recs := m.drawRecords(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base, err := m.p.Append(ctx, recs)
	if m.refused(t, "Append", err) {
		return
	}
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if want := int64(len(m.records())); base != want {
		t.Fatalf("Append: base %d, want %d", base, want)
	}
	e := modelEntry{Entry: Entry{Index: uint64(len(m.ents)) + 1, Term: max(m.lastTerm(), 1), Type: EntryData}, recs: recs}
	e.Data = EncodeRecords(nil, BatchHeader{}, recs, 0)
	m.ents = append(m.ents, e)
}

// BadAppend: entries that do not continue the log are refused and change nothing.
func (m *raftMachine) BadAppend(t *rapid.T) {
	last := uint64(len(m.ents))
	e := Entry{Index: last + 1, Term: max(m.lastTerm(), 1), Type: EntryNormal}
	want := ErrNotContiguous
	switch rapid.IntRange(0, 1).Draw(t, "how") {
	case 0:
		e.Index = rapid.Uint64Range(1, last+5).Draw(t, "index")
		if e.Index == last+1 {
			e.Index = last + 2
		}
	case 1:
		if m.lastTerm() < 2 {
			return
		}
		e.Term, want = m.lastTerm()-1, ErrTermDecrease
	}
	errc := make(chan error, 1)
	m.p.AppendEntries([]Entry{e}, func(err error) { errc <- err })
	if err := <-errc; !m.refused(t, "AppendEntries", err) && !errors.Is(err, want) {
		t.Fatalf("AppendEntries(%d, term %d) after %d (term %d): %v, want %v", e.Index, e.Term, last, m.lastTerm(), err, want)
	}
}

func (m *raftMachine) TruncateAfter(t *rapid.T) {
	last := uint64(len(m.ents))
	i := rapid.Uint64Range(0, last+2).Draw(t, "after")
	err := m.p.TruncateAfter(i)
	if i < m.floor {
		if !errors.Is(err, ErrBelowTruncateFloor) {
			t.Fatalf("TruncateAfter(%d) below the floor %d: %v", i, m.floor, err)
		}
		return
	}
	if m.refused(t, "TruncateAfter", err) {
		return
	}
	if err != nil {
		t.Fatalf("TruncateAfter(%d): %v", i, err)
	}
	m.ents = m.ents[:min(i, last)]
}

func (m *raftMachine) SetFloor(t *rapid.T) {
	// The floor (raft's commit index) can sit past the log's end: a follower
	// commits entries it has not synced yet, and a failed fdatasync cuts them.
	m.floor = rapid.Uint64Range(m.floor, max(m.floor, uint64(len(m.ents)))).Draw(t, "floor")
	m.p.SetTruncateFloor(m.floor)
}

func (m *raftMachine) Term(t *rapid.T) {
	last := uint64(len(m.ents))
	i := rapid.Uint64Range(0, last+2).Draw(t, "i")
	got, err := m.p.Term(i)
	switch {
	case i > last:
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Term(%d) past %d: %d, %v", i, last, got, err)
		}
	case i == 0:
		if err != nil || got != 0 {
			t.Fatalf("Term(0) = %d, %v", got, err)
		}
	default:
		if err != nil || got != m.ents[i-1].Term {
			t.Fatalf("Term(%d) = %d, %v; want %d", i, got, err, m.ents[i-1].Term)
		}
	}
}

func (m *raftMachine) Entries(t *rapid.T) {
	last := uint64(len(m.ents))
	lo := rapid.Uint64Range(0, last+1).Draw(t, "lo")
	hi := rapid.Uint64Range(lo, last+2).Draw(t, "hi")
	maxBytes := rapid.Uint64Range(0, 2000).Draw(t, "maxBytes")
	got, err := m.p.Entries(lo, hi, maxBytes)
	switch {
	case lo == 0:
		if !errors.Is(err, ErrCompacted) {
			t.Fatalf("Entries(0, %d): %v", hi, err)
		}
		return
	case hi > last+1:
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Entries(%d, %d) past %d: %v", lo, hi, last, err)
		}
		return
	case err != nil:
		t.Fatalf("Entries(%d, %d, %d): %v", lo, hi, maxBytes, err)
	case lo < hi && len(got) == 0:
		t.Fatalf("Entries(%d, %d, %d) returned nothing", lo, hi, maxBytes)
	case uint64(len(got)) > hi-lo:
		t.Fatalf("Entries(%d, %d) returned %d entries", lo, hi, len(got))
	}
	var size uint64
	for k, e := range got {
		want := m.ents[lo-1+uint64(k)]
		if !sameEntry(e, want) {
			t.Fatalf("Entries(%d, %d): entry %d = {%d %d %v %q}, want {%d %d %v %q}", lo, hi, k,
				e.Index, e.Term, e.Type, e.Data, want.Index, want.Term, want.Type, want.Data)
		}
		size += frameSize(e)
	}
	if len(got) > 1 && size > maxBytes {
		t.Fatalf("Entries(%d, %d, %d): %d entries of %d bytes", lo, hi, maxBytes, len(got), size)
	}
}

// frameSize is the size of the frame holding e.
func frameSize(e Entry) uint64 {
	if e.Type == EntryData {
		return uint64(PlacementSize + len(e.Data))
	}
	return uint64(BatchHeaderSize + len(e.Data))
}

func (m *raftMachine) Read(t *rapid.T) {
	all := m.records()
	next := int64(len(all))
	off := rapid.Int64Range(0, next).Draw(t, "off")
	recs, err := m.p.Read(off, rapid.IntRange(1, 3000).Draw(t, "maxBytes"), next, nil)
	if err != nil {
		t.Fatalf("Read(%d): %v", off, err)
	}
	if off < next && len(recs) == 0 {
		t.Fatalf("Read(%d) returned nothing below %d", off, next)
	}
	for i, r := range recs {
		if r.Offset != off+int64(i) || !sameRecord(r, all[r.Offset]) {
			t.Fatalf("Read(%d): record %d at offset %d differs", off, i, r.Offset)
		}
	}
}

func (m *raftMachine) Roll(t *rapid.T) {
	if err := m.p.Roll(); !m.refused(t, "Roll", err) && err != nil {
		t.Fatalf("Roll: %v", err)
	}
}

func (m *raftMachine) Crash(t *rapid.T) {
	m.stopRun()
	durable := m.p.DurableIndex()
	m.fsys.Crash()
	m.floor = min(m.floor, durable)
	if m.failed == nil {
		m.ents = m.ents[:durable]
		m.open(t) // the crashed store is abandoned, as a dead process would be
		return
	}
	// A failed truncation's changes may or may not have reached the disk:
	// the log is a prefix of the one before it, holding what was durable
	// (the truncation's index at least, with fsync always).
	old := m.old
	m.failed, m.old = nil, nil
	m.open(t)
	last := m.p.LastIndex()
	if last < durable || last > uint64(len(old)) {
		t.Fatalf("after a failed truncation and a crash the log ends at %d: durable up to %d, %d entries before the truncation", last, durable, len(old))
	}
	m.ents = old[:last]
	m.checkLog(t)
}

func (m *raftMachine) Reopen(t *rapid.T) {
	m.stopRun()
	if err := m.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	failed := m.failed != nil
	m.failed, m.old = nil, nil // the failed truncation's cut is on disk, if not durable
	m.open(t)
	if failed {
		m.checkLog(t)
	}
}

func (m *raftMachine) Check(t *rapid.T) {
	last := uint64(len(m.ents))
	if got := m.p.LastIndex(); got != last {
		t.Fatalf("LastIndex %d, model %d", got, last)
	}
	if got := m.p.FirstIndex(); got != 1 {
		t.Fatalf("FirstIndex %d, want 1", got)
	}
	if got, want := m.p.NextOffset(), int64(len(m.records())); got != want {
		t.Fatalf("NextOffset %d, model %d", got, want)
	}
	if d := m.p.DurableIndex(); d > last || (m.o.Fsync == FsyncAlways && m.failed == nil && d != last) {
		t.Fatalf("DurableIndex %d, last %d", d, last)
	}
}

// TestRaftLogModel: the partition log as a raft log matches a slice of
// entries through appends, conflicting suffixes replaced, truncations
// refused below the floor, failed writes and fdatasyncs (Round), a
// partition failed by a truncation's fdatasync, crashes that lose what was
// not fsynced, and reopens; over both fsync modes, several segment sizes
// and index intervals, with and without FastOpen.
func TestRaftLogModel(t *testing.T) { rapid.Check(t, func(t *rapid.T) { raftLogModel(t, false) }) }

// TestRaftLogModelJournal is TestRaftLogModel with the node journal
// (Options.Journal): rounds sync the journal, checkpoints (by size, before
// every truncation, at Close) sync the segments, crashes replay it.
func TestRaftLogModelJournal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { raftLogModel(t, true) })
}

func raftLogModel(t *rapid.T, journal bool) {
	m := &raftMachine{fsys: NewMemFS(), clock: newFakeClock()}
	m.o = Options{
		FS:                 m.fsys,
		Now:                m.clock.Now,
		Logger:             quietLogger(),
		Fsync:              FsyncMode(rapid.IntRange(0, 1).Draw(t, "fsync")),
		FsyncInterval:      time.Hour, // interval syncs happen only at rolls, truncations and Close
		SegmentBytes:       int64(rapid.SampledFrom([]int{1 << 10, 4 << 10, 1 << 20}).Draw(t, "segBytes")),
		IndexIntervalBytes: rapid.SampledFrom([]int{1, 100, 1 << 10}).Draw(t, "indexBytes"),
		FastOpen:           rapid.Bool().Draw(t, "fastOpen"),
		Journal:            journal,
	}
	if journal {
		m.o.Fsync = FsyncAlways
		m.o.JournalBytes = int64(rapid.SampledFrom([]int{1 << 10, 64 << 20}).Draw(t, "journalBytes"))
	}
	m.open(t)
	defer func() {
		m.stopRun()
		m.s.Close()
	}()
	t.Repeat(rapid.StateMachineActions(m))
}
