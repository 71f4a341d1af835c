package wallclock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A production build tells the time as it is and refuses the offset's
// variable; a test build (-tags spoolfaults) moves the clock by the file's
// offset, re-read as it changes.
func TestOffsetOnlyInTestBuilds(t *testing.T) {
	f := filepath.Join(t.TempDir(), "offset")
	if err := os.WriteFile(f, []byte("30000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(OffsetEnv, f)
	now := time.Now()
	err := Refuse()
	if !faultsBuilt {
		if err == nil || !strings.Contains(err.Error(), "-tags spoolfaults") {
			t.Fatalf("a production build with %s set: %v, want a refusal", OffsetEnv, err)
		}
		if got := UnixMilli(now); got != now.UnixMilli() {
			t.Fatalf("UnixMilli = %d, want %d", got, now.UnixMilli())
		}
		return
	}
	if err != nil {
		t.Fatalf("a test build refused %s: %v", OffsetEnv, err)
	}
	if got := UnixMilli(now); got != now.UnixMilli()+30000 {
		t.Fatalf("UnixMilli with a 30 s offset = %d, want %d", got, now.UnixMilli()+30000)
	}
	if err := os.WriteFile(f, []byte("-5000"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for UnixMilli(now) != now.UnixMilli()-5000 {
		if time.Now().After(deadline) {
			t.Fatalf("the offset file's new value not taken within 5 s: %d", UnixMilli(now)-now.UnixMilli())
		}
		time.Sleep(10 * time.Millisecond) // sleep-ok: awaiting the file's re-read
	}
}
