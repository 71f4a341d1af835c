// Package buildinfo says which build a binary is: its version (the
// repository's VERSION file, embedded), the commit it was built from and the
// Go version that built it. spool_build_info on /metrics and
// AdminService.ClusterStatus report it; internal/release adds the protocol
// and data formats for `spoold version` and `spool version`.
//
// The commit is set at link time by the Makefile
// (-ldflags "-X github.com/spoolmq/spool/internal/buildinfo.commit=<sha>");
// without it the Go toolchain's own stamp (vcs.revision, with "-dirty" when
// the tree had changes) is used, and "unknown" when there is neither (a build
// outside a git checkout, or with -buildvcs=false). The version is not a link
// flag: the embedded VERSION file cannot disagree with the tree it came from,
// and `go build`, `go run` and `go test` report it as `make` does.
//
// It imports only the root package (the embedded VERSION), so that any
// package may import it.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/spoolmq/spool"
)

// Version is this release's semantic version (the VERSION file).
var Version = strings.TrimSpace(spool.VERSION)

// commit is set with -ldflags -X by the Makefile's build and release.
var commit string

// GoVersion is the version of Go that built this binary.
func GoVersion() string { return runtime.Version() }

// Commit is the commit this binary was built from: the link-time value, else
// the toolchain's vcs.revision (with "-dirty" for a tree with changes), else
// "unknown".
func Commit() string { return commitOnce() }

var commitOnce = sync.OnceValue(func() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return vcsCommit(bi.Settings)
})

// vcsCommit is the commit the toolchain stamped into the binary's settings.
func vcsCommit(settings []debug.BuildSetting) string {
	rev, dirty := "", false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "-dirty"
	}
	return rev
}
