// Package wallclock turns a time into the unix milliseconds that leave the
// process: a ledger lease's deadline and the claimer's now (Redis
// compares them with other sidecars' values), a leader's publish times,
// a coordinator command's time (the group's sessions count from it).
// Durations measured inside one process use Go's monotonic clock and need
// none of this; these values are compared across processes, so a wrong
// wall clock moves them.
//
// In production builds UnixMilli is t.UnixMilli(). Test builds (-tags
// spoolfaults) add an offset read from the file named by OffsetEnv, so
// that the fault suite can put one node's clock 30 s ahead or behind and
// move it mid-run (Go reads the clock without libc: no faketime). A
// production build refuses that variable (Refuse).
package wallclock

import (
	"fmt"
	"os"
	"time"
)

// OffsetEnv names a file holding the clock offset in milliseconds (a
// decimal integer, re-read as it changes), in the environment of a test
// build.
const OffsetEnv = "SPOOL_FAULT_CLOCK_OFFSET_FILE"

// UnixMilli is t in unix milliseconds as this process's clock tells it to
// others.
func UnixMilli(t time.Time) int64 { return t.UnixMilli() + offsetMs() }

// FromUnixMilli is the time that ms, told by another process, is on this
// process's clock (the inverse of UnixMilli).
func FromUnixMilli(ms int64) time.Time { return time.UnixMilli(ms - offsetMs()) }

// Refuse says why this build cannot run with the environment it has: a
// fault mode's variable in a build without fault modes.
func Refuse() error {
	if _, ok := os.LookupEnv(OffsetEnv); ok && !faultsBuilt {
		return fmt.Errorf("%s is a fault mode of test builds (go build -tags spoolfaults); this build has none and refuses it", OffsetEnv)
	}
	return nil
}
