package conformance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spoolmq/spool/internal/testrelease"
)

func TestMain(m *testing.M) {
	if os.Getenv("SPOOL_CONFORMANCE_LANGS") == "" {
		os.Exit(m.Run()) // TestConformance skips, saying how to run it: build nothing
	}
	dir, err := os.MkdirTemp("", "spool-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.spoold = filepath.Join(dir, "spoold")
	bins.goApp = filepath.Join(dir, "goapp")
	for out, pkg := range map[string]string{bins.spoold: "github.com/spoolmq/spool/cmd/spoold", bins.goApp: "github.com/spoolmq/spool/sdk/conformance/apps/go"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", pkg, ":", err)
			os.Exit(1)
		}
	}
	// SPOOL_CONFORMANCE_SPOOLD=previous: every SDK against the previous
	// release's spoold (RELEASES), as an app whose sidecar is not upgraded
	// yet meets a newer SDK.
	if os.Getenv("SPOOL_CONFORMANCE_SPOOLD") == "previous" {
		rel, err := testrelease.Previous()
		if err == nil {
			bins.spoold, err = testrelease.Spoold(rel, "")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "the previous release's spoold:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "conformance against spoold %s (%s)\n", rel.Version, bins.spoold)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
