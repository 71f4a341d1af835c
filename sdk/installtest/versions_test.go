package installtest

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

// The Go modules of this repository require each other at VERSION, the
// version they are tagged with together (sdk/go/v0.1.0 and proto/v0.1.0):
// a user's `go get github.com/spoolmq/spool/sdk/go@v0.1.0` then gets the
// generated API of the same release.
func TestGoModulesRequireEachOtherAtVERSION(t *testing.T) {
	want := "v" + version(t)
	for dir, mods := range map[string][]string{
		".":      {"github.com/spoolmq/spool/proto", "github.com/spoolmq/spool/sdk/go"},
		"sdk/go": {"github.com/spoolmq/spool/proto"},
	} {
		var gomod struct {
			Require []struct{ Path, Version string }
		}
		out := run(t, 30*time.Second, filepath.Join(repo, dir), nil, "go", "mod", "edit", "-json")
		if err := json.Unmarshal([]byte(out), &gomod); err != nil {
			t.Fatal(err)
		}
		for _, m := range mods {
			got := ""
			for _, r := range gomod.Require {
				if r.Path == m {
					got = r.Version
				}
			}
			if got != want {
				t.Errorf("%s/go.mod requires %s at %q, want %s (VERSION)", dir, m, got, want)
			}
		}
	}
}
