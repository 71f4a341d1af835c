package embedded

import (
	"syscall"
)

// MaxFileReserve is what the default open-file budget leaves of the
// process's file descriptor limit for everything besides the log:
// listeners, connections, the groups' store (a quarter of a limit below
// 4,096).
const MaxFileReserve = 1024

// MaxOpenFilesCap bounds the default budget where the descriptor limit is
// unlimited or larger.
const MaxOpenFilesCap = 1 << 24

// FileLimit returns the process's soft file descriptor limit (RLIMIT_NOFILE;
// Go raises it to the hard limit at start), 0 if unknown.
func FileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}

// DefaultMaxOpenFiles derives Config.MaxOpenFiles from a file descriptor
// limit: the limit less MaxFileReserve (or a quarter of a small limit),
// capped at MaxOpenFilesCap; MaxOpenFilesCap when the limit is unknown.
func DefaultMaxOpenFiles(nofile uint64) int {
	if nofile == 0 || nofile > MaxOpenFilesCap {
		return MaxOpenFilesCap
	}
	return int(nofile - min(MaxFileReserve, nofile/4))
}

// OpenFiles returns the files the node's log keeps open (log.Store.OpenFiles),
// which Config.MaxOpenFiles bounds.
func (n *Node) OpenFiles() int { return n.store.OpenFiles() }
