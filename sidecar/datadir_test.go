package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/buildinfo"
	"github.com/spoolmq/spool/internal/release"
)

// A node records its release in the data dir once its storage opened it
// (release.StampFile); a data dir a newer release wrote in a format this
// build does not read is refused naming that release.
func TestDataDirStampAndNewerRelease(t *testing.T) {
	cfg := appsConfig(t)
	if _, err := runSidecar(t, cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	if v, err := release.Stamped(cfg.Node.DataDir); v != buildinfo.Version || err != nil {
		t.Fatalf("the data dir's stamp says %q (%v), want %s", v, err, buildinfo.Version)
	}

	// A data dir from a newer release, in a log format this build lacks.
	newer := appsConfig(t)
	if err := os.MkdirAll(filepath.Join(newer.Node.DataDir, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"log/FORMAT": "spool-log 99\n", release.StampFile: "spoold 99.1.0 0123456789abcdef\n"} {
		if err := os.WriteFile(filepath.Join(newer.Node.DataDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := runSidecar(t, newer, Options{})
	if err == nil || !strings.Contains(err.Error(), "spool-log 99") || !strings.Contains(err.Error(), "last opened by spoold 99.1.0") {
		t.Fatalf("a data dir of a newer release and format: %v", err)
	}
	if v, _ := release.Stamped(newer.Node.DataDir); v != "99.1.0" {
		t.Fatalf("the refused data dir's stamp was changed to %q", v)
	}
}
