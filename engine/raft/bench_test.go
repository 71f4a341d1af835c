package raft

import (
	"context"
	"fmt"
	stdslog "log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
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
						if err := l.r.ProposeRecords(payload, 1_700_000_000_000); err != nil {
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

// BenchmarkHostPropose measures proposals through 3 Hosts in one process:
// 8 groups led by different hosts, each proposal one 1 KiB record,
// `inflight` proposals outstanding at any time; an op is one proposal
// acknowledged (committed and applied on its leader). Messages go from
// host to host directly (copied through their encoding, as the transport
// twin does) on the sending worker; each host has its own log store on its
// own MemFS, so the appends of a host's groups share its group commit.
//
// inflight=1 is the latency of one proposal at a time (ns/op): what the
// Host's scheduling adds to an acknowledgement, without network or fsync.
func BenchmarkHostPropose(b *testing.B) {
	for _, inflight := range []int{256, 1} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) { benchHostPropose(b, inflight) })
	}
}

func benchHostPropose(b *testing.B, inflight int) {
	const groups = 8
	var hosts [4]*Host
	send := func(msgs []transport.Message) {
		for _, m := range msgs {
			data, err := m.Msg.Marshal()
			if err != nil {
				b.Error(err)
				return
			}
			var cp raftpb.Message
			if err := cp.Unmarshal(data); err != nil {
				b.Error(err)
				return
			}
			_ = hosts[cp.To].HandleMessage(transport.Message{Group: m.Group, Msg: cp})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var stores []*slog.Store
	for id := uint64(1); id <= 3; id++ {
		fs := slog.NewMemFS()
		s, err := slog.OpenStore("/data", slog.Options{FS: fs, SegmentBytes: 256 << 10, MaintenanceInterval: time.Hour, Logger: stdslog.New(stdslog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		stores = append(stores, s)
		wg.Go(func() { _ = s.Run(ctx) })
		h, err := NewHost(HostConfig{NodeID: id, Send: send, TickInterval: 10 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		hosts[id] = h
		for g := uint64(1); g <= groups; g++ {
			p, err := s.Partition(fmt.Sprintf("p%d", g))
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Add(g, ReplicaConfig{Partition: p, FS: fs, Dir: fmt.Sprintf("/raft/p%d", g), Voters: []uint64{1, 2, 3}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	hctx, hcancel := context.WithCancel(context.Background())
	for _, h := range hosts[1:] {
		wg.Go(func() { _ = h.Run(hctx) })
	}
	defer func() {
		hcancel()
		cancel()
		wg.Wait()
		for _, h := range hosts[1:] {
			for _, g := range h.Groups() {
				_ = h.Remove(g)
			}
		}
		for _, s := range stores {
			_ = s.Close()
		}
	}()
	leaders := make([]*Host, groups+1)
	for g := uint64(1); g <= groups; g++ {
		_ = hosts[1+g%3].Campaign(g)
	}
	deadline := time.Now().Add(30 * time.Second)
	for g := uint64(1); g <= groups; g++ {
		for leaders[g] == nil {
			for _, h := range hosts[1:] {
				if st, _ := h.Status(g); st.IsLeader {
					leaders[g] = h
				}
			}
			if time.Now().After(deadline) {
				b.Fatalf("group %d: no leader", g)
			}
			time.Sleep(time.Millisecond) // sleep-ok: benchmark setup polls for the elections
		}
	}
	payload := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: make([]byte, 1024)}}, 1_700_000_000_000)
	sem := make(chan struct{}, inflight)
	var failed atomic.Int64
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		sem <- struct{}{}
		g := uint64(1 + i%groups)
		leaders[g].Propose(g, payload, func(_ int64, err error) {
			if err != nil {
				failed.Add(1)
			}
			<-sem
		})
	}
	for range inflight {
		sem <- struct{}{}
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d proposals failed", n)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "proposals/s")
}
