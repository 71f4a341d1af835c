package conformance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
