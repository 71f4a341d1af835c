//go:build spoolfaults

package wallclock

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const faultsBuilt = true

// The offset file is read at most every 50 ms.
var offset struct {
	mu     sync.Mutex
	read   time.Time
	ms     int64
	path   string
	looked bool
}

func offsetMs() int64 {
	offset.mu.Lock()
	defer offset.mu.Unlock()
	if !offset.looked {
		offset.path, offset.looked = os.Getenv(OffsetEnv), true
	}
	if offset.path == "" {
		return 0
	}
	if time.Since(offset.read) >= 50*time.Millisecond {
		offset.read = time.Now()
		if b, err := os.ReadFile(offset.path); err == nil {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				offset.ms = v
			}
		}
	}
	return offset.ms
}
