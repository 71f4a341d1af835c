package log

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A slow disk, for the fault suite (chaos/, the slowdisk kind): each sync
// of a file or directory first waits the delay a file names, so that one
// node's fsyncs take 50-500 ms for a while, as a disk does under another
// tenant's load or a failing device's retries. The delay file holds
// milliseconds ("0", or missing: no delay) and is read at most every
// slowSyncReread, so the suite changes it while spoold runs.
//
// Only builds with the spoolfaults tag turn it on (fs_faults.go), from the
// environment variable SlowSyncEnv; spoold built without it refuses the
// variable.

// SlowSyncEnv names the delay file SlowSyncFS reads, in the environment of
// a spoold built with -tags spoolfaults.
const SlowSyncEnv = "SPOOL_FAULT_SLOW_SYNC_FILE"

// slowSyncReread is how often SlowSyncFS reads its delay file at most.
const slowSyncReread = 50 * time.Millisecond

// SlowSyncFS is an FS whose syncs first wait the delay of a file.
type SlowSyncFS struct {
	FS
	path  string
	sleep func(time.Duration) // time.Sleep; a test records the waits

	mu    sync.Mutex
	read  time.Time
	delay time.Duration
}

// NewSlowSyncFS slows inner's syncs by the milliseconds in the file at path.
func NewSlowSyncFS(inner FS, path string) *SlowSyncFS {
	return &SlowSyncFS{FS: inner, path: path, sleep: time.Sleep}
}

// wait waits the delay the file names now.
func (s *SlowSyncFS) wait() {
	s.mu.Lock()
	if time.Since(s.read) >= slowSyncReread {
		s.read, s.delay = time.Now(), 0
		if b, err := os.ReadFile(s.path); err == nil {
			if ms, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && ms > 0 {
				s.delay = time.Duration(ms) * time.Millisecond
			}
		}
	}
	d := s.delay
	s.mu.Unlock()
	if d > 0 {
		s.sleep(d) // the injected fault: a slow fsync
	}
}

// OpenFile opens a file whose syncs are slowed.
func (s *SlowSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{File: f, fs: s}, nil
}

// SyncDir waits the delay, then syncs the directory.
func (s *SlowSyncFS) SyncDir(name string) error {
	s.wait()
	return s.FS.SyncDir(name)
}

type slowSyncFile struct {
	File
	fs *SlowSyncFS
}

// Sync waits the delay, then syncs the file.
func (f slowSyncFile) Sync() error {
	f.fs.wait()
	return f.File.Sync()
}
