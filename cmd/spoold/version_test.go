package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/buildinfo"
	"github.com/spoolmq/spool/internal/release"
)

func TestVersionArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := version(nil, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "spoold "+buildinfo.Version+" (commit ") {
		t.Fatalf("spoold version: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	var info release.Info
	if code := version([]string{"--json"}, &out, &errOut); code != 0 {
		t.Fatalf("spoold version --json: exit %d: %s", code, errOut.String())
	}
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || info.Version != buildinfo.Version {
		t.Fatalf("spoold version --json: %v: %s", err, out.String())
	}
	errOut.Reset()
	if code := version([]string{"extra"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unexpected argument "extra"`) {
		t.Fatalf("spoold version extra: exit %d: %s", code, errOut.String())
	}
}
