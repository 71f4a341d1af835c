package log

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Drop closes a partition and deletes its files; the other partitions go
// on; the name opens again as a new, empty partition; the dropped value
// reads nothing any more; a partition never opened is only deleted.
func TestDrop(t *testing.T) {
	dir := t.TempDir()
	h := openHarness(t, dir, Options{})
	a, err := h.s.Partition("a-0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.s.Partition("b-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Partition{a, b} {
		if _, err := p.Append(context.Background(), []Record{{Value: []byte("x")}, {Value: []byte("y")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.s.Drop("a-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a-0")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a-0's directory after Drop: %v, want it gone", err)
	}
	if slices.Contains(h.s.Partitions(), "a-0") {
		t.Fatalf("Partitions lists a dropped partition: %v", h.s.Partitions())
	}
	if _, err := a.Read(0, 1<<20, 2, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("read of a dropped partition: %v, want ErrClosed", err)
	}
	if off, err := b.Append(context.Background(), []Record{{Value: []byte("z")}}); err != nil || off != 2 {
		t.Fatalf("append to another partition after Drop: %d, %v", off, err)
	}
	a2, err := h.s.Partition("a-0")
	if err != nil {
		t.Fatal(err)
	}
	if a2 == a || a2.NextOffset() != 0 {
		t.Fatalf("a-0 opened again: same value %v, next offset %d, want a new empty partition", a2 == a, a2.NextOffset())
	}
	if _, err := a2.Append(context.Background(), []Record{{Value: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	// Not open in this run: deleted from disk only.
	h.close()
	h.start()
	if err := h.s.Drop("a-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a-0")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a-0's directory after Drop of an unopened partition: %v", err)
	}
	if err := h.s.Drop("../x"); err == nil {
		t.Fatalf("Drop of a bad name: no error")
	}
}
