package log

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const benchValue = 1 << 10

func benchRecords(n int) []Record {
	recs := make([]Record, n)
	v := make([]byte, benchValue)
	for i := range recs {
		recs[i] = Record{Timestamp: 1_700_000_000_000, ID: []byte("0123456789abcdef"), Key: []byte("key-1"), Value: v}
	}
	return recs
}

func benchStore(b *testing.B, o Options) (*Store, func()) {
	s, err := OpenStore(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	return s, func() { cancel(); <-done; s.Close() }
}

// BenchmarkAppend: one appender, one partition, FsyncAlways (one fdatasync per batch).
func BenchmarkAppend(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			s, stop := benchStore(b, Options{})
			defer stop()
			p, _ := s.Partition("bench-0")
			recs := benchRecords(n)
			ctx := context.Background()
			b.SetBytes(int64(n * benchValue))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := p.Append(ctx, recs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkRawWriteFdatasync is the baseline: the same encoded bytes written
// with pwrite + fdatasync per batch, no log.
func BenchmarkRawWriteFdatasync(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			dir, files := b.TempDir(), 0
			newFile := func() *os.File {
				files++
				f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(files)), os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
			f := newFile()
			defer func() { f.Close() }()
			buf := EncodeBatch(nil, BatchHeader{}, benchRecords(n))
			fd := int(f.Fd())
			b.SetBytes(int64(n * benchValue))
			b.ResetTimer()
			var off int64
			for range b.N {
				if _, err := f.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if err := unix.Fdatasync(fd); err != nil {
					b.Fatal(err)
				}
				off += int64(len(buf))
				if off > DefaultSegmentBytes { // a new file per 64 MiB, like segments
					f.Close()
					f, off = newFile(), 0
					fd = int(f.Fd())
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkAppendConcurrent: many appenders over 8 partitions, group commit.
func BenchmarkAppendConcurrent(b *testing.B) {
	for _, w := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("appenders=%d/batch=1", w), func(b *testing.B) {
			s, stop := benchStore(b, Options{})
			defer stop()
			parts := make([]*Partition, 8)
			for i := range parts {
				parts[i], _ = s.Partition(fmt.Sprintf("bench-%d", i))
			}
			recs := benchRecords(1)
			var left atomic.Int64
			left.Store(int64(b.N))
			b.SetBytes(benchValue)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := range w {
				wg.Go(func() {
					p := parts[g%len(parts)]
					for left.Add(-1) >= 0 {
						if _, err := p.Append(context.Background(), recs); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkRead: sequential reads of 1 MiB from the page cache.
func BenchmarkRead(b *testing.B) {
	s, stop := benchStore(b, Options{Fsync: FsyncInterval})
	defer stop()
	p, _ := s.Partition("bench-0")
	recs := benchRecords(64)
	batchLen := len(EncodeBatch(nil, BatchHeader{}, recs))
	for range 1024 { // 64 Ki records, 64 MiB of values
		if _, err := p.Append(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
	}
	maxBytes := 16 * batchLen // exactly 1024 records per Read
	var dst []Record
	b.SetBytes(1024 * benchValue)
	b.ReportAllocs()
	b.ResetTimer()
	off := int64(0)
	for range b.N {
		var err error
		dst, err = p.Read(off, maxBytes, p.NextOffset(), dst)
		if err != nil || len(dst) != 1024 {
			b.Fatalf("Read(%d): %d records, %v", off, len(dst), err)
		}
		off += 1024
		if off >= p.NextOffset() {
			off = 0
		}
	}
	b.ReportMetric(float64(b.N*1024)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppend100Partitions appends at full speed to 100 partitions (two
// appenders each, batches of 16 × 1 KiB) and reports the peak RSS of the
// whole test process (ru_maxrss and VmHWM).
func BenchmarkAppend100Partitions(b *testing.B) {
	s, stop := benchStore(b, Options{})
	defer stop()
	parts := make([]*Partition, 100)
	for i := range parts {
		parts[i], _ = s.Partition(fmt.Sprintf("rss-%d", i))
	}
	recs := benchRecords(16)
	var left atomic.Int64
	left.Store(int64(b.N))
	b.SetBytes(16 * benchValue)
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 200 {
		wg.Go(func() {
			p := parts[g%len(parts)]
			for left.Add(-1) >= 0 {
				if _, err := p.Append(context.Background(), recs); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*16)/b.Elapsed().Seconds(), "records/s")
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(ru.Maxrss)/1024, "maxrss_MiB")
	b.ReportMetric(vmHWM()/1024, "VmHWM_MiB")
}

func vmHWM() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	return -1
}

// BenchmarkAppendEntries is the follower path: entries of 64 records of
// 1 KiB as a leader proposed them (EncodeRecords), n entries per call,
// FsyncAlways, one call at a time (each waits for its fsync).
func BenchmarkAppendEntries(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("entries=%d/records=64", n), func(b *testing.B) {
			s, stop := benchStore(b, Options{})
			defer stop()
			p, _ := s.Partition("bench-0")
			data := EncodeRecords(nil, BatchHeader{}, benchRecords(64), 0)
			ents := make([]Entry, n)
			errc := make(chan error, 1)
			done := func(err error) { errc <- err }
			b.SetBytes(int64(n * 64 * benchValue))
			b.ReportAllocs()
			b.ResetTimer()
			index := uint64(0)
			for range b.N {
				for k := range ents {
					index++
					ents[k] = Entry{Index: index, Term: 1, Type: EntryData, Data: data}
				}
				p.AppendEntries(ents, done)
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n*64)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// benchRaftLog is a partition of 4096 entries of 16 records of 1 KiB over
// 4 MiB segments, with a term change every 100 entries.
func benchRaftLog(b *testing.B) *Partition {
	s, stop := benchStore(b, Options{Fsync: FsyncInterval, SegmentBytes: 4 << 20})
	b.Cleanup(stop)
	p, _ := s.Partition("bench-0")
	data := EncodeRecords(nil, BatchHeader{}, benchRecords(16), 0)
	errc := make(chan error, 1)
	for i := uint64(1); i <= 4096; i += 64 {
		ents := make([]Entry, 64)
		for k := range ents {
			ents[k] = Entry{Index: i + uint64(k), Term: 1 + (i+uint64(k))/100, Type: EntryData, Data: data}
		}
		p.AppendEntries(ents, func(err error) { errc <- err })
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// BenchmarkTerm: Term of the last entry (what raft asks most) and of an
// entry anywhere in the log.
func BenchmarkTerm(b *testing.B) {
	p := benchRaftLog(b)
	b.Run("last", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := p.Term(4096); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("any", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := p.Term(1 + uint64(i*7919)%4096); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEntries: what a leader does to feed a follower, 1 MiB of
// entries from an index anywhere in the log (page cache).
func BenchmarkEntries(b *testing.B) {
	p := benchRaftLog(b)
	b.ReportAllocs()
	b.SetBytes(1 << 20)
	for i := range b.N {
		lo := 1 + uint64(i*61)%4000
		ents, err := p.Entries(lo, 4097, 1<<20)
		if err != nil || len(ents) == 0 {
			b.Fatalf("Entries(%d): %d, %v", lo, len(ents), err)
		}
	}
}

// BenchmarkEncodeRecords: one publish batch of 100 × 1 KiB records encoded
// into a fresh buffer, as the publish path does (EncodeRecords(nil, ...)).
func BenchmarkEncodeRecords(b *testing.B) {
	recs := make([]Record, 100)
	for i := range recs {
		recs[i] = Record{ID: []byte(fmt.Sprintf("id-%012d", i)), Key: []byte("key-1"), Value: make([]byte, 1024)}
	}
	b.ReportAllocs()
	b.SetBytes(100 * 1024)
	for b.Loop() {
		_ = EncodeRecords(nil, BatchHeader{}, recs, 1_700_000_000_000)
	}
}

// BenchmarkAppendRound is a steady keyed load as the publish path makes it:
// each op is one append round of 64 requests of 1 or 2 records of 1 KiB
// spread over 8 partitions (8 requests per partition) or over 64, on the
// real file system: with FsyncAlways, with the node journal
// (Options.Journal: one fdatasync per round, the segments synced at
// checkpoints, counted in), and with FsyncInterval (no sync in the round:
// the cost of the writes alone). It reports the write syscalls (pwrite,
// pwritev: syscw of /proc/self/io) and fdatasyncs per round.
func BenchmarkAppendRound(b *testing.B) {
	for _, c := range []struct {
		name  string
		o     Options
		parts int
	}{
		{"fsync=always", Options{}, 8},
		{"fsync=always/partitions=64", Options{}, 64},
		{"sync=journal", Options{Journal: true}, 8},
		{"sync=journal/partitions=64", Options{Journal: true}, 64},
		{"fsync=interval", Options{Fsync: FsyncInterval}, 8},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := OpenStore(b.TempDir(), c.o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			parts := make([]*Partition, c.parts)
			for i := range parts {
				parts[i], _ = s.Partition(fmt.Sprintf("bench-%d", i))
			}
			recs := benchRecords(2)
			const requests = 64
			var failed atomic.Int64
			done := func(_ int64, err error) {
				if err != nil {
					failed.Add(1)
				}
			}
			round := func() { // as Run does, with every request queued first
				for i := range requests {
					parts[(i*5)%len(parts)].AppendAsync(recs[:1+i%2], done)
				}
				s.roundMu.Lock()
				s.unlockRound(s.round())
			}
			round() // create the segments' first pages
			writes, syncs := procWrites(), s.SyncStats().Files+s.SyncStats().Journal
			b.SetBytes(requests * 3 / 2 * benchValue)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				round()
			}
			b.StopTimer()
			if failed.Load() > 0 {
				b.Fatalf("%d appends failed", failed.Load())
			}
			b.ReportMetric(float64(procWrites()-writes)/float64(b.N), "writes/round")
			b.ReportMetric(float64(s.SyncStats().Files+s.SyncStats().Journal-syncs)/float64(b.N), "fdatasyncs/round")
		})
	}
}

// procWrites returns the write syscalls this process made (syscw of
// /proc/self/io), or -1.
func procWrites() float64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscw:"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n
		}
	}
	return -1
}
