package log

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// journalOptions are the options of the journal tests: checkpoints only by
// size and at the operations that need one, never by a timer.
func journalOptions(fsys *MemFS) Options {
	return Options{FS: fsys, Journal: true, JournalBytes: 64 << 20, JournalCheckpointInterval: time.Hour,
		MaintenanceInterval: time.Hour, SegmentBytes: 4 << 10, IndexIntervalBytes: 256, Logger: quietLogger()}
}

// TestJournalOneSyncPerRound: a round that appends to many partitions
// fdatasyncs the journal once and no segment; the appends are
// acknowledged, and a power loss right after keeps every one of them (the
// journal is replayed into segments that lost their unsynced bytes).
func TestJournalOneSyncPerRound(t *testing.T) {
	fsys := NewMemFS()
	s, err := OpenStore("/data", journalOptions(fsys))
	if err != nil {
		t.Fatal(err)
	}
	const parts = 40
	var res []chan appendResult
	for i := range parts {
		p, err := s.Partition(fmt.Sprintf("orders-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, queueAppends(p, [][]Record{{{Value: fmt.Appendf(nil, "m%d", i)}}}))
	}
	before := fsys.syncs()
	oneRound(s)
	for i, c := range res {
		if r := <-c; r.err != nil || r.base != 0 {
			t.Fatalf("partition %d: %d, %v", i, r.base, r.err)
		}
	}
	if got := fsys.syncs() - before; got != 1 {
		t.Fatalf("the round made %d syncs, want 1 (the journal's)", got)
	}
	if st := s.SyncStats(); st.Files != 0 {
		t.Fatalf("%d segment fdatasyncs in the round", st.Files)
	}
	if st := s.SyncStats(); st.Journal != 1 || st.JournalLag == 0 || st.Checkpoints != 0 {
		t.Fatalf("SyncStats %+v", st)
	}
	fsys.Crash()
	s, err = OpenStore("/data", journalOptions(fsys))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.SyncStats(); st.Replayed != parts {
		t.Fatalf("replayed %d records, want %d", st.Replayed, parts)
	}
	for i := range parts {
		p, err := s.Partition(fmt.Sprintf("orders-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := p.Read(0, 1<<20, p.NextOffset(), nil)
		if err != nil || len(recs) != 1 || string(recs[0].Value) != fmt.Sprintf("m%d", i) {
			t.Fatalf("partition %d after the power loss: %v, %v", i, recs, err)
		}
	}
}

func (m *MemFS) syncs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nsyncs
}

// TestJournalCleanCloseLeavesFormat2: while the journal may hold entries
// the data dir says format 3, which releases without the journal refuse; a
// clean Close leaves no journal and format 2, so the segments alone are
// complete. After a power loss, a store without the journal replays it and
// stamps format 2.
func TestJournalCleanCloseLeavesFormat2(t *testing.T) {
	fsys := NewMemFS()
	h := openHarness(t, "/data", journalOptions(fsys))
	if got := readFile(t, fsys, "/data/FORMAT"); got != "spool-log 3\n" {
		t.Fatalf("FORMAT with the journal open: %q", got)
	}
	appendN(t, h.part("orders-0"), 5)
	h.close()
	if got := readFile(t, fsys, "/data/FORMAT"); got != "spool-log 2\n" {
		t.Fatalf("FORMAT after a clean Close: %q", got)
	}
	if _, err := fsys.OpenFile("/data/journal", os.O_RDONLY, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal after a clean Close: %v", err)
	}
	fsys.Crash()
	// Segments alone: a store without the journal reads everything.
	o := journalOptions(fsys)
	o.Journal = false
	s, err := OpenStore("/data", o)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Partition("orders-0"); err != nil || p.NextOffset() != 5 {
		t.Fatalf("after a clean Close, without the journal: %v", err)
	}
	s.Close()

	h = openHarness(t, "/data", journalOptions(fsys))
	appendN(t, h.part("orders-0"), 3)
	h.stop()
	fsys.Crash() // the appends are in the journal only
	if got := readFile(t, fsys, "/data/FORMAT"); got != "spool-log 3\n" {
		t.Fatalf("FORMAT after a power loss: %q", got)
	}
	h.s = nil
	s, err = OpenStore("/data", o)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Partition("orders-0"); err != nil || p.NextOffset() != 8 {
		t.Fatalf("without the journal after a power loss: next %d, %v; want 8", p.NextOffset(), err)
	}
	if got := readFile(t, fsys, "/data/FORMAT"); got != "spool-log 2\n" {
		t.Fatalf("FORMAT once replayed without the journal: %q", got)
	}
	s.Close()
}

func readFile(t *testing.T, fsys *MemFS, name string) string {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := readAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func appendN(t *testing.T, p *Partition, n int) {
	t.Helper()
	for i := range n {
		if _, err := p.Append(context.Background(), []Record{{Value: fmt.Appendf(nil, "v%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJournalFailures: a failed write or fdatasync of the journal makes
// the round sync the segments instead, and its appends succeed; a failed
// cut of the journal at a checkpoint makes the store refuse appends (it
// can no longer say where the journal ends) until it is reopened, which
// replays the journal: nothing acknowledged is lost.
func TestJournalFailures(t *testing.T) {
	for _, op := range []string{"write", "sync"} {
		t.Run("journal "+op, func(t *testing.T) {
			fsys := NewMemFS()
			h := openHarness(t, "/data", journalOptions(fsys))
			p := h.part("orders-0")
			appendN(t, p, 2)
			failed := false
			fsys.SetFault(func(o, name string) error {
				if o == op && strings.HasSuffix(name, "/journal") && !failed {
					failed = true // once: the checkpoint that follows cuts the journal
					return syscall.EIO
				}
				return nil
			})
			appendN(t, p, 2) // the segment is synced instead; the journal is cut (a truncate)
			fsys.SetFault(nil)
			appendN(t, p, 2)
			h.stop()
			fsys.Crash()
			h.s = nil
			h.start()
			if n := h.part("orders-0").NextOffset(); n != 6 {
				t.Fatalf("after a failed journal %s and a power loss: next %d, want 6", op, n)
			}
		})
	}
	t.Run("journal cut", func(t *testing.T) {
		fsys := NewMemFS()
		o := journalOptions(fsys)
		o.JournalBytes = 1 // a checkpoint after every round
		h := openHarness(t, "/data", o)
		p := h.part("orders-0")
		appendN(t, p, 2)
		fsys.SetFault(func(o, name string) error {
			if o == "truncate" && strings.HasSuffix(name, "/journal") {
				return syscall.EIO
			}
			return nil
		})
		appendN(t, p, 1) // acknowledged by the journal's sync; the checkpoint's cut fails
		_, err := p.Append(context.Background(), []Record{{Value: []byte("refused")}})
		if err == nil || !strings.Contains(err.Error(), "journal checkpoint failed") {
			t.Fatalf("append after a failed checkpoint: %v", err)
		}
		fsys.SetFault(nil)
		h.stop()
		fsys.Crash()
		h.s = nil
		h.start()
		if n := h.part("orders-0").NextOffset(); n != 3 {
			t.Fatalf("after a failed checkpoint and a power loss: next %d, want 3", n)
		}
	})
}

// TestJournalPowerLossAtEveryPoint runs one workload — rounds over three
// partitions, truncations followed by new appends at the same indexes,
// rolls, retention, checkpoints by size — and cuts the power at each of
// its file-system changes in turn: from that change on nothing reaches the
// disk (every write, sync, truncation, removal and rename fails), then the
// machine loses what was not synced. Reopened, every partition holds
// exactly what was acknowledged: every acknowledged append, no entry an
// acknowledged truncation removed (the journal never brings one back), no
// segment retention deleted; only the one operation under way when the
// power went may show, whole or not at all.
func TestJournalPowerLossAtEveryPoint(t *testing.T) {
	total := journalWorkload(t, NewMemFS(), -1)
	if total < 100 {
		t.Fatalf("the workload made %d changes; it is meant to make many", total)
	}
	for cut := 1; cut <= total; cut++ {
		fsys := NewMemFS()
		journalWorkload(t, fsys, cut)
	}
}

// jModel is what a partition should hold: values by offset from start.
type jModel struct {
	vals  []string
	start int64
}

// journalWorkload runs the workload on fsys with the power cut at its
// cut-th change (-1: never), checks the reopened store against what was
// acknowledged, and returns the number of changes it made.
func journalWorkload(t *testing.T, fsys *MemFS, cut int) int {
	t.Helper()
	changes := 0
	fsys.SetFault(func(op, name string) error {
		switch op {
		case "write", "sync", "truncate", "remove", "rename", "syncdir":
			if changes++; cut > 0 && changes >= cut {
				return syscall.EIO
			}
		}
		return nil
	})
	clock := newFakeClock()
	o := journalOptions(fsys)
	o.SegmentBytes, o.JournalBytes, o.Now = 1<<10, 3<<10, clock.Now
	names := []string{"a-0", "b-0", "c-0"}
	parts := make([]*Partition, len(names))
	models := make([]jModel, len(names))
	s, err := OpenStore("/data", o)
	for i, n := range names {
		if err == nil {
			parts[i], err = s.Partition(n)
		}
	}
	if err != nil {
		if cut < 0 {
			t.Fatalf("opening: %v", err)
		}
		if s != nil {
			s.Close()
		}
		journalCheck(t, fsys, o, cut, names, models, nil, 0)
		return changes
	}
	if err := parts[2].SetRetention(0, 2<<10); err != nil {
		t.Fatal(err)
	}
	var pending *jOp
	step := 0
	for ; pending == nil && step < 30; step++ {
		var res []chan appendResult
		for i, p := range parts {
			res = append(res, queueAppends(p, [][]Record{{{Value: fmt.Appendf(nil, "%s/%d", names[i], step)}}}))
		}
		oneRound(s)
		for i, c := range res {
			v := fmt.Sprintf("%s/%d", names[i], step)
			if r := <-c; r.err != nil {
				pending = &jOp{kind: "append", part: i}
				// Another partition's append of the round may have
				// failed first; any of the round's may show.
				continue
			} else if r.base != int64(len(models[i].vals)) {
				t.Fatalf("cut %d: %s base %d, model %d", cut, names[i], r.base, len(models[i].vals))
			}
			models[i].vals = append(models[i].vals, v)
		}
		if pending != nil {
			break
		}
		if step%4 == 3 { // a raft leader change: the last two entries of a-0 replaced
			idx := uint64(len(models[0].vals) - 2)
			res := queueTruncate(t, parts[0], idx, 0)
			oneRound(s)
			if err := <-res; err != nil {
				pending = &jOp{kind: "truncate", part: 0, idx: idx}
				break
			}
			models[0].vals = models[0].vals[:idx]
		}
		if step%5 == 4 {
			clock.Advance(time.Minute)
			if err := parts[2].Roll(); err != nil {
				pending = &jOp{kind: "retention", part: 2}
				break
			}
			if err := s.Maintain(); err != nil {
				pending = &jOp{kind: "retention", part: 2}
				break
			}
			models[2].start = parts[2].StartOffset()
		}
	}
	if cut < 0 {
		if pending != nil {
			t.Fatalf("the workload failed with no power cut: %+v", pending)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return changes
	}
	if pending == nil {
		s.Close() // the cut came after the workload's last change (at Close)
	}
	journalCheck(t, fsys, o, cut, names, models, pending, step)
	return changes
}

// jOp is the operation under way when the power went: what it did may
// show, and nothing after it.
type jOp struct {
	kind string // "append" (a round of every partition), "truncate", "retention"
	part int
	idx  uint64
}

// journalCheck cuts the power and checks the reopened store against the
// models.
func journalCheck(t *testing.T, fsys *MemFS, o Options, cut int, names []string, models []jModel, pending *jOp, step int) {
	t.Helper()
	fsys.SetFault(nil)
	fsys.Crash()
	s, err := OpenStore("/data", o)
	if err != nil {
		t.Fatalf("cut %d: reopen after the power loss: %v", cut, err)
	}
	defer s.Close()
	for i, n := range names {
		p, err := s.Partition(n)
		if err != nil {
			t.Fatalf("cut %d: %s: %v", cut, n, err)
		}
		m := models[i]
		pend := pending != nil && (pending.part == i || pending.kind == "append")
		start := p.StartOffset()
		if start < m.start || (start > m.start && !(pend && pending.kind == "retention")) {
			t.Fatalf("cut %d: %s starts at %d; acknowledged start %d (under way: %+v)", cut, n, start, m.start, pending)
		}
		var recs []Record
		for at := start; at < p.NextOffset(); at = start + int64(len(recs)) {
			got, err := p.Read(at, 1<<20, p.NextOffset(), nil)
			if err != nil || len(got) == 0 {
				t.Fatalf("cut %d: %s: read at %d: %v", cut, n, at, err)
			}
			recs = append(recs, got...)
		}
		next := start + int64(len(recs))
		want := int64(len(m.vals))
		switch {
		case pend && pending.kind == "truncate":
			// The truncation may or may not have happened, but it
			// cannot have lost what it kept.
			if next < int64(pending.idx) || next > want {
				t.Fatalf("cut %d: %s ends at %d; the truncation under way keeps %d of %d", cut, n, next, pending.idx, want)
			}
		case pend && pending.kind == "append":
			if next < want || next > want+1 {
				t.Fatalf("cut %d: %s ends at %d; %d acknowledged, one under way", cut, n, next, want)
			}
		default:
			if next != want {
				t.Fatalf("cut %d: %s ends at %d; %d acknowledged (under way: %+v)", cut, n, next, want, pending)
			}
		}
		for k, r := range recs {
			off := int(r.Offset)
			var v string
			switch {
			case off < len(m.vals):
				v = m.vals[off]
			case pend && pending.kind == "append" && off == len(m.vals):
				v = fmt.Sprintf("%s/%d", n, step)
			}
			if pend && pending.kind == "truncate" && off >= int(pending.idx) {
				continue // the old entries, not yet cut
			}
			if !bytes.Equal(r.Value, []byte(v)) {
				t.Fatalf("cut %d: %s offset %d (record %d) = %q, want %q", cut, n, off, k, r.Value, v)
			}
		}
	}
}

// TestJournalQuarantineAndRepair: damage before the tail of a partition
// whose last appends are in the journal only (a power loss after them) is
// still corruption once the journal is replayed: the open fails with a
// CorruptionError, opens quarantined with QuarantineCorrupt, and Repair
// cuts the partition at the damage.
func TestJournalQuarantineAndRepair(t *testing.T) {
	fsys := NewMemFS()
	o := journalOptions(fsys)
	o.SegmentBytes = 1 << 10
	h := openHarness(t, "/data", o)
	p := h.part("p")
	var want []Record
	add := func(n int) {
		for range n {
			r := Record{Offset: int64(len(want)), Timestamp: 1_700_000_000_000 + int64(len(want)), Value: fmt.Appendf(nil, "value-%03d", len(want))}
			if _, err := p.Append(context.Background(), []Record{r}); err != nil {
				t.Fatal(err)
			}
			want = append(want, r)
		}
	}
	add(30)
	h.s.roundMu.Lock()
	err := h.s.checkpoint()
	h.s.unlockRound(nil)
	if err != nil {
		t.Fatal(err)
	}
	add(10) // in the journal only
	h.stop()
	fsys.Crash()
	h.s = nil
	fsys.Corrupt("/data/p/"+segmentName(0, ".log"), func(b []byte) []byte {
		b[BatchHeaderSize+4] ^= 0x10 // inside the first batch's records
		return b
	})
	s, err := OpenStore("/data", o)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.SyncStats(); st.Replayed == 0 {
		t.Fatal("nothing replayed: the test's appends were not in the journal only")
	}
	var ce *CorruptionError
	if _, err := s.Partition("p"); !errors.As(err, &ce) {
		t.Fatalf("open of the damaged partition: %v, want a CorruptionError", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkQuarantineAndRepair(t, fsys, o, want)
}

// TestJournalFailedRollKeepsSegmentBehind: a roll whose fdatasync of the
// old segment fails leaves that segment's acknowledged bytes in the
// journal's care: the next checkpoint syncs the segment before it cuts the
// journal, and a power loss after it keeps every acknowledged append. (It
// lost them when the roll forgot, before its sync, that the segment was
// behind the journal.)
func TestJournalFailedRollKeepsSegmentBehind(t *testing.T) {
	fsys := NewMemFS()
	h := openHarness(t, "/data", journalOptions(fsys))
	p := h.part("p")
	appendN(t, p, 5) // durable in the journal only
	fsys.SetFault(func(op, name string) error {
		if op == "sync" && strings.HasSuffix(name, ".log") {
			return syscall.EIO
		}
		return nil
	})
	if err := p.Roll(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Roll with a failing fdatasync: %v", err)
	}
	fsys.SetFault(nil)
	h.s.roundMu.Lock()
	err := h.s.checkpoint()
	h.s.unlockRound(nil)
	if err != nil {
		t.Fatal(err)
	}
	h.stop()
	fsys.Crash()
	h.s = nil
	h.start()
	if n := h.part("p").NextOffset(); n != 5 {
		t.Fatalf("after a failed roll, a checkpoint and a power loss: next %d, want 5", n)
	}
}

// TestJournalPowerLossOnTheOS: on the real file system, appends to many
// partitions acknowledged through the journal survive a power loss
// (PowerLossFS's record of syncs, every file cut back to its last synced
// size: the segments lose what they were written, the journal keeps it),
// and a store opened without the journal replays it.
func TestJournalPowerLossOnTheOS(t *testing.T) {
	dir := t.TempDir()
	syncs := filepath.Join(dir, "syncs")
	fsys, err := NewPowerLossFS(OSFS{}, syncs)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	s, err := OpenStore(data, Options{FS: fsys, Journal: true, JournalCheckpointInterval: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	const parts, each = 16, 20
	var wg sync.WaitGroup
	for i := range parts {
		p, err := s.Partition(fmt.Sprintf("p-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for k := range each {
				if _, err := p.Append(ctx, []Record{{Value: fmt.Appendf(nil, "%d/%d", i, k)}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	cancel()
	<-ran
	s.lock.Close() // the process is gone: its lock with it
	cut, err := CutToSynced(syncs)
	if err != nil {
		t.Fatal(err)
	}
	if cut == 0 {
		t.Fatal("the power loss cut nothing: the segments were synced, the journal was not tested")
	}
	s, err = OpenStore(data, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range parts {
		p, err := s.Partition(fmt.Sprintf("p-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := p.Read(0, 1<<20, p.NextOffset(), nil)
		if err != nil || len(recs) != each {
			t.Fatalf("p-%d after the power loss: %d records, %v; want %d", i, len(recs), err, each)
		}
		for k, r := range recs {
			if string(r.Value) != fmt.Sprintf("%d/%d", i, k) {
				t.Fatalf("p-%d offset %d: %q", i, k, r.Value)
			}
		}
	}
}
