package log

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// logMachine checks a Partition on MemFS against a plain slice model.
type logMachine struct {
	fsys   *MemFS
	clock  *fakeClock
	o      Options
	s      *Store
	p      *Partition
	cancel context.CancelFunc
	done   chan error

	model []Record // model[i] is the record at offset i (below start: ignored)
	start int64
}

func (m *logMachine) open(t *rapid.T) {
	s, err := OpenStore("/data", m.o)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	p, err := s.Partition("orders-0")
	if err != nil {
		t.Fatalf("Partition: %v", err)
	}
	m.s, m.p = s, p
	m.startRun()
}

func (m *logMachine) startRun() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	m.cancel, m.done = cancel, done
	go func() { done <- m.s.Run(ctx) }()
}

func (m *logMachine) stopRun() {
	m.cancel()
	<-m.done
}

func (m *logMachine) Append(t *rapid.T) {
	recs := m.drawRecords(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base, err := m.p.Append(ctx, recs)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if base != int64(len(m.model)) {
		t.Fatalf("base %d, want %d", base, len(m.model))
	}
	m.model = append(m.model, m.stamped(recs)...)
}

// AppendRound queues 2 to 8 appends for one round (written together, a
// run per segment), sometimes failing one of its writes or (fsync always)
// fdatasyncs, a roll's included: the appends that failed or were cut back
// fail, the others land in order.
func (m *logMachine) AppendRound(t *rapid.T) {
	m.stopRun()
	defer m.startRun()
	batches := make([][]Record, rapid.IntRange(2, 8).Draw(t, "requests"))
	for i := range batches {
		batches[i] = m.drawRecords(t)
	}
	// Syncs fail only with fsync always: with interval a failed sync drops
	// appends acknowledged before it (they were never promised durable),
	// which this model does not follow.
	ops := []string{"write"}
	if m.o.Fsync == FsyncAlways {
		ops = append(ops, "sync")
	}
	failOp := rapid.SampledFrom(ops).Draw(t, "failOp")
	fail := rapid.IntRange(0, 3).Draw(t, "fail") // 0: none; else the n-th such call of the round
	// With the journal a round syncs the journal, not the segments: a
	// failed journal sync makes the round sync the segments instead, and
	// every append succeeds. Only the round's own journal sync fails: a
	// failed sync of the journal's cut at a checkpoint fails the store
	// (TestJournalFailures).
	file, survived := ".log", false
	if m.o.Journal && failOp == "sync" {
		file, survived, fail = "/"+journalFile, true, min(fail, 1)
	}
	var calls int
	m.fsys.SetFault(func(op, name string) error {
		if op == failOp && strings.HasSuffix(name, file) {
			if calls++; calls == fail {
				return syscall.EIO
			}
		}
		return nil
	})
	defer m.fsys.SetFault(nil)
	res := queueAppends(m.p, batches)
	oneRound(m.s)
	failed := false
	for i, recs := range batches {
		r := <-res
		switch {
		case r.err == nil:
			if r.base != int64(len(m.model)) {
				t.Fatalf("request %d: base %d, want %d", i, r.base, len(m.model))
			}
			m.model = append(m.model, m.stamped(recs)...)
		case errors.Is(r.err, syscall.EIO) && fail > 0 && calls >= fail && !survived:
			failed = true
		default:
			t.Fatalf("request %d: %v", i, r.err)
		}
	}
	if fail > 0 && calls >= fail && !failed && !survived {
		t.Fatalf("%s %d of the round failed, no append did", failOp, fail)
	}
}

// stamped returns recs with the timestamps Append gives them.
func (m *logMachine) stamped(recs []Record) []Record {
	now := m.clock.Now().UnixMilli()
	out := make([]Record, len(recs))
	for i, r := range recs {
		if r.Timestamp == 0 {
			r.Timestamp = now
		}
		out[i] = r
	}
	return out
}

func (m *logMachine) drawRecords(t *rapid.T) []Record {
	n := rapid.IntRange(1, 6).Draw(t, "n")
	recs := make([]Record, n)
	now := m.clock.Now().UnixMilli()
	for i := range recs {
		r := Record{
			ID:    rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "id"),
			Key:   rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "key"),
			Value: rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "value"),
		}
		if rapid.Bool().Draw(t, "explicitTs") {
			r.Timestamp = now + rapid.Int64Range(-3_600_000, 3_600_000).Draw(t, "dts")
		}
		if rapid.IntRange(0, 3).Draw(t, "hasHeaders") == 0 {
			r.Headers = []Header{{Key: rapid.StringN(0, 5, 5).Draw(t, "hk"), Value: rapid.SliceOfN(rapid.Byte(), 0, 5).Draw(t, "hv")}}
		}
		recs[i] = r
	}
	return recs
}

func (m *logMachine) Read(t *rapid.T) {
	next := int64(len(m.model))
	off := rapid.Int64Range(m.start-2, next+2).Draw(t, "off")
	maxBytes := rapid.IntRange(1, 3000).Draw(t, "maxBytes")
	upTo := rapid.Int64Range(off, next+2).Draw(t, "upTo")
	recs, err := m.p.Read(off, maxBytes, upTo, nil)
	if off < m.start || off > next {
		var oor *OffsetOutOfRangeError
		if !errors.As(err, &oor) || oor.Start != m.start || oor.End != next {
			t.Fatalf("Read(%d) outside [%d, %d]: %v", off, m.start, next, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Read(%d): %v", off, err)
	}
	if off < min(upTo, next) && len(recs) == 0 {
		t.Fatalf("Read(%d, upTo %d) returned nothing", off, upTo)
	}
	for i, r := range recs {
		if r.Offset != off+int64(i) || r.Offset >= min(upTo, next) {
			t.Fatalf("record %d has offset %d (read from %d up to %d)", i, r.Offset, off, upTo)
		}
		if !sameRecord(r, m.model[r.Offset]) {
			t.Fatalf("offset %d: got %+v, want %+v", r.Offset, r, m.model[r.Offset])
		}
	}
}

func (m *logMachine) OffsetForTime(t *rapid.T) {
	ts := m.clock.Now().UnixMilli() + rapid.Int64Range(-4_000_000, 4_000_000).Draw(t, "dts")
	want := int64(len(m.model))
	for off := m.start; off < int64(len(m.model)); off++ {
		if m.model[off].Timestamp >= ts {
			want = off
			break
		}
	}
	got, err := m.p.OffsetForTime(ts)
	if err != nil || got != want {
		t.Fatalf("OffsetForTime(%d) = %d, %v; want %d", ts, got, err, want)
	}
}

func (m *logMachine) Roll(t *rapid.T) {
	if err := m.p.Roll(); err != nil {
		t.Fatalf("Roll: %v", err)
	}
}

func (m *logMachine) Retention(t *rapid.T) {
	m.clock.Advance(time.Duration(rapid.IntRange(0, 90).Draw(t, "minutes")) * time.Minute)
	if err := m.s.Maintain(); err != nil {
		t.Fatalf("Maintain: %v", err)
	}
	start := m.p.StartOffset()
	if start < m.start || start > int64(len(m.model)) {
		t.Fatalf("start moved from %d to %d (next %d)", m.start, start, len(m.model))
	}
	m.start = start
}

func (m *logMachine) Crash(t *rapid.T) {
	m.stopRun()
	durable := m.p.DurableOffset()
	m.fsys.Crash()
	m.model = m.model[:durable]
	m.open(t) // the crashed store is abandoned, as a dead process would be
}

func (m *logMachine) Reopen(t *rapid.T) {
	m.stopRun()
	if err := m.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	m.open(t)
}

func (m *logMachine) Check(t *rapid.T) {
	if n := m.p.NextOffset(); n != int64(len(m.model)) {
		t.Fatalf("NextOffset %d, model %d", n, len(m.model))
	}
	if s := m.p.StartOffset(); s != m.start {
		t.Fatalf("StartOffset %d, model %d", s, m.start)
	}
	if d := m.p.DurableOffset(); d > m.p.NextOffset() || (m.o.Fsync == FsyncAlways && d != m.p.NextOffset()) {
		t.Fatalf("DurableOffset %d, next %d", d, m.p.NextOffset())
	}
}

func TestLogModel(t *testing.T) { rapid.Check(t, func(t *rapid.T) { logModel(t, false) }) }

// TestLogModelJournal is TestLogModel with the node journal (Options.Journal).
func TestLogModelJournal(t *testing.T) { rapid.Check(t, func(t *rapid.T) { logModel(t, true) }) }

func logModel(t *rapid.T, journal bool) {
	m := &logMachine{fsys: NewMemFS(), clock: newFakeClock()}
	m.o = Options{
		FS:                 m.fsys,
		Now:                m.clock.Now,
		Logger:             quietLogger(),
		Fsync:              FsyncMode(rapid.IntRange(0, 1).Draw(t, "fsync")),
		FsyncInterval:      time.Hour, // interval syncs happen only at rolls and Close
		SegmentBytes:       int64(rapid.SampledFrom([]int{1 << 10, 4 << 10, 1 << 20}).Draw(t, "segBytes")),
		IndexIntervalBytes: rapid.SampledFrom([]int{1, 100, 1 << 10}).Draw(t, "indexBytes"),
		RetentionAge:       time.Duration(rapid.SampledFrom([]int{0, 30, 120}).Draw(t, "retentionMin")) * time.Minute,
		RetentionBytes:     int64(rapid.SampledFrom([]int{0, 3 << 10, 20 << 10}).Draw(t, "retentionBytes")),
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

func ExampleStore() {
	s, err := OpenStore("/data", Options{FS: NewMemFS()})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	p, _ := s.Partition("orders-3")
	base, _ := p.Append(ctx, []Record{{Key: []byte("k"), Value: []byte("hello")}})
	recs, _ := p.Read(base, 1<<20, p.DurableOffset(), nil)
	fmt.Println(base, string(recs[0].Value))
	cancel()
	<-done
	s.Close()
	// Output: 0 hello
}
