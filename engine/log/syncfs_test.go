package log

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// appendRound queues one record to each of n partitions before Run starts,
// so that the first round writes them all, then runs the store until every
// append completed, and returns their errors.
func appendRound(t *testing.T, s *Store, n int) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		p, err := s.Partition(fmt.Sprintf("p-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		p.AppendAsync([]Record{{Value: []byte(fmt.Sprintf("v%d", i))}}, func(_ int64, err error) { errs[i] = err; wg.Done() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	wg.Wait()
	cancel()
	<-done
	return errs
}

// With SyncFileSystem, a round that dirties several segment files syncs the
// file system once instead of each file (OSFS: syncfs), and what it wrote
// is there after a reopen; a round dirtying one file fdatasyncs it.
func TestSyncFileSystemOneSyncPerRound(t *testing.T) {
	dir := t.TempDir()
	o := Options{Fsync: FsyncAlways, SyncFileSystem: true, Logger: quietLogger()}
	s, err := OpenStore(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range appendRound(t, s, 4) {
		if err != nil {
			t.Fatalf("append to p-%d: %v", i, err)
		}
	}
	if st := s.SyncStats(); st.FileSystem != 1 || st.Files != 0 || st.Fallbacks != 0 {
		t.Fatalf("sync stats after a round of 4 files: %+v, want one file-system sync", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenStore(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 4 {
		p, err := s.Partition(fmt.Sprintf("p-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := p.Read(0, 1<<20, p.NextOffset(), nil)
		if err != nil || len(recs) != 1 || string(recs[0].Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("p-%d after reopen: %v, %v", i, recs, err)
		}
	}
	if errs := appendRound(t, s, 1); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if st := s.SyncStats(); st.FileSystem != 0 || st.Files != 1 {
		t.Fatalf("sync stats after a round of 1 file: %+v, want one fdatasync", st)
	}
}

// failingFSSync is a file-system sync that fails, over MemFS.
type failingFSSync struct{ *MemFS }

func (failingFSSync) OpenFSSync(string) (FSSync, error) { return failingSync{}, nil }

type failingSync struct{}

func (failingSync) Sync() error  { return errors.New("syncfs: input/output error") }
func (failingSync) Close() error { return nil }

// A failed file-system sync is followed by one fdatasync per file, which
// decides each append's outcome: here they succeed.
func TestSyncFileSystemFallsBackPerFile(t *testing.T) {
	s, err := OpenStore("/data", Options{Fsync: FsyncAlways, SyncFileSystem: true, FS: failingFSSync{NewMemFS()}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, err := range appendRound(t, s, 3) {
		if err != nil {
			t.Fatalf("append to p-%d: %v", i, err)
		}
	}
	if st := s.SyncStats(); st.Fallbacks != 1 || st.Files != 3 || st.FileSystem != 0 {
		t.Fatalf("sync stats: %+v, want one fallback and three fdatasyncs", st)
	}
}

// An FS that cannot sync a whole file system is refused with
// SyncFileSystem, rather than silently syncing file by file.
func TestSyncFileSystemNeedsAnFSSyncer(t *testing.T) {
	_, err := OpenStore("/data", Options{Fsync: FsyncAlways, SyncFileSystem: true, FS: NewMemFS()})
	if err == nil {
		t.Fatal("OpenStore with SyncFileSystem on MemFS succeeded")
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{{"6.18.44-fc-v669", true}, {"5.8.0", true}, {"5.7.19", false}, {"4.19.0-amd64", false}, {"garbage", false}, {"5.10", true}} {
		if got := kernelAtLeast(c.release, 5, 8); got != c.want {
			t.Errorf("kernelAtLeast(%q, 5, 8) = %v", c.release, got)
		}
	}
}

// BenchmarkSyncRound: one op is a round that appends a record to each of 8
// partitions and makes it durable, file by file or with one sync of the
// file system (Options.SyncFileSystem); cpu-µs/op is the process's CPU
// (user + system) per round.
func BenchmarkSyncRound(b *testing.B) {
	for _, fsSync := range []bool{false, true} {
		name := "files"
		if fsSync {
			name = "filesystem"
		}
		b.Run(name, func(b *testing.B) {
			s, err := OpenStore(b.TempDir(), Options{Fsync: FsyncAlways, SyncFileSystem: fsSync, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var parts []*Partition
			for i := range 8 {
				p, err := s.Partition(fmt.Sprintf("p-%d", i))
				if err != nil {
					b.Fatal(err)
				}
				parts = append(parts, p)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = s.Run(ctx) }()
			recs := []Record{{Value: make([]byte, 1024)}}
			var wg sync.WaitGroup
			cpu0 := processCPU()
			b.ResetTimer()
			for range b.N {
				// Queued together, so that one round takes all eight.
				s.roundMu.Lock()
				for _, p := range parts {
					wg.Add(1)
					p.AppendAsync(recs, func(int64, error) { wg.Done() })
				}
				s.roundMu.Unlock()
				wg.Wait()
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(b.N), "cpu-µs/op")
			st := s.SyncStats()
			b.ReportMetric(float64(st.Files+st.FileSystem)/float64(b.N), "syncs/op")
		})
	}
}

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
