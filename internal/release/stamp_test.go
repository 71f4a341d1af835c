package release

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/buildinfo"
)

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int // sign
	}{
		{"0.1.0", "0.2.0", -1}, {"0.10.0", "0.9.9", 1}, {"1.0.0", "1.0.0", 0},
		{"1.0.0-rc.1", "1.0.0", -1}, {"1.0.0", "1.0.0-rc.1", 1}, {"1.0.0-rc.1", "1.0.0-rc.2", -1},
		{"junk", "0.0.1", -1}, {"0.0.1", "junk", 1},
	} {
		got := Compare(c.a, c.b)
		if (got < 0) != (c.want < 0) || (got > 0) != (c.want > 0) {
			t.Errorf("Compare(%q, %q) = %d, want sign %d", c.a, c.b, got, c.want)
		}
	}
}

func TestStamp(t *testing.T) {
	dir := t.TempDir()
	if v, err := Stamped(dir); v != "" || err != nil {
		t.Fatalf("no stamp: Stamped = %q, %v", v, err)
	}
	if err := Stamp(dir); err != nil {
		t.Fatal(err)
	}
	if v, err := Stamped(dir); v != buildinfo.Version || err != nil {
		t.Fatalf("Stamped = %q, %v; want %s", v, err, buildinfo.Version)
	}
	for _, bad := range []string{"", "spoold\n", "spoold 1.2 abc\n", "spoold 1.2.3 abc", "spoold 1.2.3 abc\nmore\n", "spoold 1.2.3 " + strings.Repeat("a", 300) + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, StampFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if v, err := Stamped(dir); err == nil {
			t.Errorf("stamp %q read as %q", bad, v)
		}
	}
}

// A refusal to open a data dir names the newer release that last opened it;
// an older or equal one, or none, leaves the refusal as it was.
func TestExplainOpen(t *testing.T) {
	dir := t.TempDir()
	refusal := errors.New("spool log: data dir in another on-disk format")
	for _, c := range []struct {
		stamp string
		named bool
	}{
		{"", false},
		{"spoold 0.0.1 abc\n", false},
		{"spoold " + buildinfo.Version + " abc\n", false},
		{"spoold 99.0.0 0123abc\n", true},
	} {
		os.Remove(filepath.Join(dir, StampFile))
		if c.stamp != "" {
			if err := os.WriteFile(filepath.Join(dir, StampFile), []byte(c.stamp), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		err := ExplainOpen(refusal, dir)
		if !errors.Is(err, refusal) {
			t.Fatalf("stamp %q: %v does not wrap the refusal", c.stamp, err)
		}
		if named := strings.Contains(err.Error(), "last opened by spoold 99.0.0"); named != c.named {
			t.Errorf("stamp %q: %v (named: %v, want %v)", c.stamp, err, named, c.named)
		}
	}
	if ExplainOpen(nil, dir) != nil {
		t.Fatal("ExplainOpen(nil) is not nil")
	}
}
