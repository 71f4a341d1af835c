package log

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// readCountingFS counts ReadAt calls on segment files.
type readCountingFS struct {
	OSFS
	reads atomic.Int64
}

type readCountingFile struct {
	File
	n *atomic.Int64
}

func (f readCountingFile) ReadAt(b []byte, off int64) (int, error) {
	f.n.Add(1)
	return f.File.ReadAt(b, off)
}

func (c *readCountingFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := c.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return readCountingFile{File: f, n: &c.reads}, nil
}

// A reader following a partition's tail — delivery at a steady rate: one
// small batch appended, one read — reads each batch with one pread. It took
// two to four (the batch headers from the last index entry on, then the
// data): at 5,000 msgs/s over 8 partitions, 2.5 preads per message.
func TestTailReadIsOnePread(t *testing.T) {
	fsys := &readCountingFS{}
	h := openHarness(t, t.TempDir(), Options{FS: fsys, Logger: quietLogger()})
	p := h.part("p")
	ctx := testCtx(t)
	var off int64
	const batches = 200
	var reads int64
	for b := range batches {
		want := genRecords(b, 1+b%3, 400)
		if _, err := p.Append(ctx, want); err != nil {
			t.Fatal(err)
		}
		before := fsys.reads.Load()
		got, err := p.Read(off, 1<<20, p.NextOffset(), nil)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if b > 0 { // the first read has nothing to go on
			reads += fsys.reads.Load() - before
		}
		if len(got) != len(want) {
			t.Fatalf("batch %d: read %d records, want %d", b, len(got), len(want))
		}
		for i := range got {
			if got[i].Offset != off+int64(i) || !sameRecord(got[i], want[i]) {
				t.Fatalf("batch %d record %d: got offset %d %q", b, i, got[i].Offset, got[i].ID)
			}
		}
		off += int64(len(got))
	}
	if per := float64(reads) / (batches - 1); per != 1 {
		t.Fatalf("%.2f preads per tail read, want 1", per)
	}
}

// A hint never outlives the batches it points at: after TruncateAfter the
// batches written in their place start elsewhere, and a read from the
// hinted offset returns the new records.
func TestReadHintDroppedByTruncation(t *testing.T) {
	h := openHarness(t, t.TempDir(), Options{Logger: quietLogger()})
	p := h.part("p")
	if err := appendEntriesSync(t, p, raftEntries(1, 30, 1, 0)); err != nil {
		t.Fatal(err)
	}
	// Read to the end: the hint now points at the end of the log.
	readAllRecords(t, p, 0, p.NextOffset(), 1<<20)
	// Cut back to entry 20, then write entries of other sizes in a later term.
	if err := p.TruncateAfter(20); err != nil {
		t.Fatal(err)
	}
	for i := range p.hints {
		if h := p.hints[i].Load(); h != nil {
			t.Fatalf("a read hint (offset %d at %d) survived TruncateAfter", h.offset, h.pos)
		}
	}
	from := p.NextOffset()
	readAllRecords(t, p, 0, from, 1<<20) // a hint at the cut
	if err := appendEntriesSync(t, p, raftEntries(21, 30, 5, 3)); err != nil {
		t.Fatal(err)
	}
	var want []Record
	for _, e := range raftEntries(21, 30, 5, 3) {
		if e.Type != EntryData {
			continue
		}
		i := int(e.Index)
		want = append(want, genRecords(i*7+3, 1+i%3, 40+i%50)...) // as raftEntries made them
	}
	got := readAllRecords(t, p, from, p.NextOffset(), 300)
	if len(got) != len(want) {
		t.Fatalf("read %d records after the cut, want %d", len(got), len(want))
	}
	for i := range got {
		if !sameRecord(got[i], want[i]) {
			t.Fatalf("record %d after the cut: %q, want %q", i, got[i].ID, want[i].ID)
		}
	}
}
