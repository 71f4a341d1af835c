//go:build spoolfaults

package log

import (
	"os"
	"sync"
)

// FaultsBuilt: this is a test build (-tags spoolfaults), whose fault modes
// the environment turns on.
const FaultsBuilt = true

var powerLoss struct {
	once sync.Once
	fs   FS
	err  error
}

// defaultFS is the OS's FS, journaled for a power loss (PowerLossFS) when
// PowerLossEnv names a journal; every store of the process shares it.
func defaultFS() (FS, error) {
	path := os.Getenv(PowerLossEnv)
	if path == "" {
		return OSFS{}, nil
	}
	powerLoss.once.Do(func() { powerLoss.fs, powerLoss.err = NewPowerLossFS(OSFS{}, path) })
	return powerLoss.fs, powerLoss.err
}
