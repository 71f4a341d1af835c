//go:build !spoolfaults

package log

import (
	"fmt"
	"os"
)

// FaultsBuilt reports whether this build has the fault modes of the test
// builds (-tags spoolfaults: PowerLossFS from PowerLossEnv, SlowSyncFS
// from SlowSyncEnv). Production builds have none, and refuse their
// settings.
const FaultsBuilt = false

// defaultFS is the FS of Options without one: the OS's. A fault mode's
// setting is refused, not ignored: set in production it would do nothing,
// and a test that set it would inject no fault.
func defaultFS() (FS, error) {
	for _, env := range []string{PowerLossEnv, SlowSyncEnv} {
		if _, ok := os.LookupEnv(env); ok {
			return nil, fmt.Errorf("%s is a fault mode of test builds (go build -tags spoolfaults); this build has none and refuses it", env)
		}
	}
	return OSFS{}, nil
}
