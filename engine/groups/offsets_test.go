package groups

import (
	"errors"
	"github.com/spoolmq/spool/engine/log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestCommitLoadRoundTrip(t *testing.T) {
	s, err := Open(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.Load("g", "orders"); err != nil || len(m) != 0 {
		t.Fatalf("fresh load = %v, %v; want empty", m, err)
	}
	want := map[int32]Position{0: {Next: 10, Done: []int64{12, 15}}, 3: {Next: 0}}
	if err := s.Commit("g", "orders", want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load("g", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for p, w := range want {
		if !got[p].Equal(w) {
			t.Fatalf("partition %d: got %v want %v", p, got[p], w)
		}
	}
	// Other groups and topics are independent.
	if m, _ := s.Load("other", "orders"); len(m) != 0 {
		t.Fatalf("other group sees %v", m)
	}
}

func TestCorruptFileIsReportedWithItsPath(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(nil, dir)
	if err := s.Commit("g", "t", map[int32]Position{1: {Next: 5}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "g", "t.offsets")
	b, _ := os.ReadFile(path)
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := s.Load("g", "t")
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	if want := path; !contains(err.Error(), want) {
		t.Fatalf("error %q does not name %s", err, want)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestEncodeDecodeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := map[int32]Position{}
		for range rapid.IntRange(0, 8).Draw(t, "parts") {
			p := rapid.Int32Range(0, 1000).Draw(t, "p")
			next := rapid.Int64Range(0, 1<<40).Draw(t, "next")
			pos := Position{Next: next}
			o := next
			for range rapid.IntRange(0, 20).Draw(t, "done") {
				o += rapid.Int64Range(1, 1000).Draw(t, "delta")
				pos.Done = append(pos.Done, o)
			}
			m[p] = pos
		}
		got, err := Decode(Encode(nil, m))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(m) {
			t.Fatalf("got %d partitions, want %d", len(got), len(m))
		}
		for p, w := range m {
			if !got[p].Equal(w) {
				t.Fatalf("partition %d: got %v want %v", p, got[p], w)
			}
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(nil, map[int32]Position{0: {Next: 3, Done: []int64{5, 9}}, 7: {Next: 1}}))
	f.Add([]byte("SPOF\x01\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		// Whatever decodes is well formed and survives a round trip.
		again, err := Decode(Encode(nil, m))
		if err != nil || len(again) != len(m) {
			t.Fatalf("decoded %v does not round-trip: %v", m, err)
		}
		for p, pos := range m {
			if !again[p].Equal(pos) {
				t.Fatalf("partition %d: %v round-trips to %v", p, pos, again[p])
			}
			for i, o := range pos.Done {
				if o <= pos.Next || (i > 0 && o <= pos.Done[i-1]) {
					t.Fatalf("partition %d: done offsets not ascending above next: %v", p, pos)
				}
			}
		}
	})
}

// Committed positions survive a power loss right after Commit returns: the
// file, its directory entry and the directories of the store and of the
// group are all durable (defect 8).
func TestCommitSurvivesCrash(t *testing.T) {
	fsys := log.NewMemFS()
	s, err := Open(fsys, "/data/groups")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]Position{0: {Next: 7, Done: []int64{9}}, 2: {Next: 3}}
	if err := s.Commit("workers", "orders", want); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit("workers", "payments", map[int32]Position{1: {Next: 1}}); err != nil {
		t.Fatal(err)
	}
	fsys.Crash()
	s, err = Open(fsys, "/data/groups")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Load("workers", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || !got[0].Equal(want[0]) || !got[2].Equal(want[2]) {
		t.Fatalf("after a crash: %v, want %v (the commit was acknowledged)", got, want)
	}
	// A commit that failed to sync is not acknowledged, and the previous
	// positions stay readable.
	fsys.SetFault(func(op, name string) error {
		if op == "sync" {
			return errors.New("EIO")
		}
		return nil
	})
	if err := s.Commit("workers", "orders", map[int32]Position{0: {Next: 100}}); err == nil {
		t.Fatal("commit acknowledged although its fsync failed")
	}
	fsys.SetFault(nil)
	fsys.Crash()
	if got, err := s.Load("workers", "orders"); err != nil || !got[0].Equal(want[0]) {
		t.Fatalf("after a failed commit and a crash: %v, %v; want %v", got, err, want)
	}
}
