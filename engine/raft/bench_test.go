package raft

import (
	"context"
	"fmt"
	"testing"
	"time"

	slog "github.com/spoolmq/spool/engine/log"
)

// BenchmarkReplicaCommit measures committed proposals per second of one
// group of 3 replicas in one process: each proposal is a batch of 10
// records of 100 bytes, proposed in windows of `window` before waiting for
// them to commit on the leader; messages cross the transport twin without
// delay, and each replica appends through its own log store (MemFS, or a
// temp dir on the real file system with a real fdatasync per round).
func BenchmarkReplicaCommit(b *testing.B) {
	for _, fsName := range []string{"memfs", "disk"} {
		for _, window := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/window=%d", fsName, window), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				root := ""
				if fsName == "disk" {
					root = b.TempDir()
				}
				// MemFS copies a whole file at each fsync: small segments
				// keep that from dominating.
				c := newWClusterOn(b, ctx, 1, slog.Options{SegmentBytes: 256 << 10}, false, root)
				defer c.close()
				l := c.waitLeader(100)
				recs := make([]slog.Record, 10)
				for i := range recs {
					recs[i] = slog.Record{Value: make([]byte, 100)}
				}
				payload := slog.EncodeRecords(nil, slog.BatchHeader{}, recs, 1_700_000_000_000)
				b.SetBytes(int64(len(payload)))
				b.ResetTimer()
				for done := 0; done < b.N; {
					n := min(window, b.N-done)
					for range n {
						if err := l.r.ProposeRecords(payload); err != nil {
							b.Fatal(err)
						}
					}
					target := l.r.Partition().LastIndex() + uint64(n) // at least
					for l.r.CommitIndex() < target {
						c.process()
						c.net.Advance(0)
					}
					done += n
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "proposals/s")
			})
		}
	}
}
