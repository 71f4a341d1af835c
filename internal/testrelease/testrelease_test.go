package testrelease

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	good := "# comment\n\n0.1.0 " + strings.Repeat("a", 40) + "\n0.2.0 " + strings.Repeat("b", 40) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "RELEASES"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := Read(dir)
	if err != nil || len(rs) != 2 || rs[1].Version != "0.2.0" || rs[1].Commit != strings.Repeat("b", 40) {
		t.Fatalf("Read = %v, %v", rs, err)
	}
	for _, bad := range []string{"0.1 " + strings.Repeat("a", 40), "0.1.0 abc", "0.1.0  " + strings.Repeat("a", 40) + " x"} {
		if err := os.WriteFile(filepath.Join(dir, "RELEASES"), []byte(bad+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(dir); err == nil {
			t.Errorf("Read accepted %q", bad)
		}
	}
}

// The previous release's spoold is built from the repository's history and
// says it is that release.
func TestSpooldOfPreviousRelease(t *testing.T) {
	rel, err := Previous()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := Spoold(rel, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("%s version --json: %v", bin, err)
	}
	var v struct{ Version, Commit string }
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if v.Version != rel.Version || v.Commit != rel.Commit {
		t.Fatalf("release %s %s built a spoold that says %s %s", rel.Version, rel.Commit, v.Version, v.Commit)
	}
}
