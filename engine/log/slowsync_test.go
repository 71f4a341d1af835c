package log

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A slow disk: every sync of a file or a directory first waits the delay
// the delay file names at the time; no file, "0" or nonsense: no wait.
func TestSlowSyncWaitsTheDelayOfItsFile(t *testing.T) {
	dir := t.TempDir()
	delayFile := filepath.Join(dir, "delay")
	s := NewSlowSyncFS(OSFS{}, delayFile)
	var waits []time.Duration
	s.sleep = func(d time.Duration) { waits = append(waits, d) }
	f, err := s.OpenFile(filepath.Join(dir, "seg"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syncs := func(delay string) []time.Duration {
		t.Helper()
		if delay != "" {
			if err := os.WriteFile(delayFile, []byte(delay), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s.mu.Lock()
		s.read = time.Time{} // read the file again now
		s.mu.Unlock()
		waits = nil
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := s.SyncDir(dir); err != nil {
			t.Fatal(err)
		}
		return waits
	}
	if w := syncs(""); len(w) != 0 {
		t.Fatalf("no delay file: waited %v", w)
	}
	if w := syncs("250\n"); !slices.Equal(w, []time.Duration{250 * time.Millisecond, 250 * time.Millisecond}) {
		t.Fatalf("a delay of 250 ms: the file's and the directory's syncs waited %v", w)
	}
	if w := syncs("0"); len(w) != 0 {
		t.Fatalf("the delay back to 0: waited %v", w)
	}
	if w := syncs("fast"); len(w) != 0 {
		t.Fatalf("a delay that is no number: waited %v", w)
	}
}
