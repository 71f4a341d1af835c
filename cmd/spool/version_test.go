package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/buildinfo"
	"github.com/spoolmq/spool/internal/release"
)

// spool version needs no sidecar and prints this build's release, as text
// and as JSON (--json and -o json alike).
func TestVersion(t *testing.T) {
	r := runSpool(t, nil, "", false, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "spool "+buildinfo.Version+" (commit ") || !strings.Contains(r.stdout, "peer-protocol") {
		t.Fatalf("spool version: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"version", "--json"}, {"version", "-o", "json"}} {
		r := runSpool(t, nil, "", false, args...)
		var info release.Info
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != 0 {
			t.Fatalf("spool %v: exit %d, %v\n%s%s", args, r.code, err, r.stdout, r.stderr)
		}
		if info.Version != buildinfo.Version || info.Commit == "" || info.GoVersion == "" || len(info.Formats) == 0 {
			t.Fatalf("spool %v: %+v", args, info)
		}
	}
}
