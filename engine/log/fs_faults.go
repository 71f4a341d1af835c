//go:build spoolfaults

package log

import (
	"os"
	"sync"
)

// FaultsBuilt: this is a test build (-tags spoolfaults), whose fault modes
// the environment turns on.
const FaultsBuilt = true

var faultFS struct {
	once sync.Once
	fs   FS
	err  error
}

// defaultFS is the OS's FS with the fault modes the environment turns on:
// syncs slowed (SlowSyncFS) when SlowSyncEnv names a delay file, journaled
// for a power loss (PowerLossFS) when PowerLossEnv names a journal. Every
// store of the process shares it.
func defaultFS() (FS, error) {
	if os.Getenv(SlowSyncEnv) == "" && os.Getenv(PowerLossEnv) == "" {
		return OSFS{}, nil
	}
	faultFS.once.Do(func() {
		var fsys FS = OSFS{}
		if path := os.Getenv(SlowSyncEnv); path != "" {
			fsys = NewSlowSyncFS(fsys, path)
		}
		if path := os.Getenv(PowerLossEnv); path != "" {
			fsys, faultFS.err = NewPowerLossFS(fsys, path)
		}
		faultFS.fs = fsys
	})
	return faultFS.fs, faultFS.err
}
