package log

import (
	"os"
	"path/filepath"
	"testing"
)

// A power loss keeps of each file what was synced: CutToSynced cuts the
// tail written after the last sync, a file never synced to nothing, and
// follows renames (an atomic write) and removals.
func TestPowerLossKeepsWhatWasSynced(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPowerLossFS(OSFS{}, filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data string, sync bool) {
		t.Helper()
		f, err := p.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		if _, err := f.WriteAt([]byte(data), st.Size()); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write("seg", "synced.", true)
	write("seg", "lost", false)           // past the sync: lost
	write("never", "never synced", false) // created, never synced: empty
	write("state.tmp", "new state", true) // an atomic write
	if err := p.Rename(filepath.Join(dir, "state.tmp"), filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}
	write("gone", "removed", true)
	if err := p.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	cut, err := CutToSynced(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"seg": "synced.", "never": "", "state": "new state"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s after the power loss: %q, %v; want %q", name, b, err, want)
		}
	}
	if cut != int64(len("lost")+len("never synced")) {
		t.Errorf("cut %d bytes, want %d", cut, len("lost")+len("never synced"))
	}
}
