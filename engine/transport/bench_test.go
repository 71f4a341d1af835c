package transport

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// counter is a Handler that counts and signals when an expected total is reached.
type counter struct {
	n, want atomic.Int64
	reached chan struct{}
}

func newCounter() *counter { return &counter{reached: make(chan struct{}, 1)} }

func (c *counter) HandleMessage(Message) error {
	if c.n.Add(1) >= c.want.Load() {
		select {
		case c.reached <- struct{}{}:
		default:
		}
	}
	return nil
}
func (c *counter) HandleSnapshot(context.Context, Message) error { return nil }
func (c *counter) PeerUnreachable(uint64)                        {}
func (c *counter) SnapshotDone(uint64, uint64, error)            {}

// expect announces n more messages; call it before sending them.
func (c *counter) expect(n int64) { c.want.Add(n) }

// wait returns once every expected message has arrived.
func (c *counter) wait(b *testing.B) {
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for c.n.Load() < c.want.Load() {
		select {
		case <-c.reached:
		case <-timeout.C:
			b.Fatalf("timed out: %d of %d", c.n.Load(), c.want.Load())
		}
	}
}

func benchPair(b *testing.B, disableCoalescing bool) (*GRPC, *counter, *GRPC) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rx := newCounter()
	a := startNode(b, 1, "127.0.0.1:0", func(c *GRPCConfig) { c.Logger = quiet; c.DisableHeartbeatCoalescing = disableCoalescing })
	bn := startNode(b, 2, "127.0.0.1:0", func(c *GRPCConfig) { c.Logger = quiet; c.Handler = rx })
	b.Cleanup(func() { a.stop(b); bn.stop(b) })
	if err := a.t.AddPeer(2, bn.addr); err != nil {
		b.Fatal(err)
	}
	waitConnected(b, a, 2)
	return a.t, rx, bn.t
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MsgApp batches of 16 messages with one 128-byte entry each, from node 1
// to node 2 over real gRPC on localhost, 64 batches in flight.
func BenchmarkGRPCMsgApp(b *testing.B) {
	tx, rx, _ := benchPair(b, false)
	const perBatch, window = 16, 64
	batch := make([]Message, perBatch)
	for i := range batch {
		batch[i] = Message{Group: uint64(i + 1), Msg: raftpb.Message{Type: raftpb.MsgApp, From: 1, To: 2, Term: 2, Index: 10, LogTerm: 2, Commit: 9,
			Entries: []raftpb.Entry{{Term: 2, Index: 11, Data: make([]byte, 128)}}}}
	}
	s0 := tx.Stats()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i += window {
		n := min(window, b.N-i)
		rx.expect(int64(n * perBatch))
		for range n {
			tx.Send(batch)
		}
		rx.wait(b)
	}
	el := time.Since(start).Seconds()
	s := tx.Stats()
	b.ReportMetric(float64(b.N*perBatch)/el, "msgs/s")
	b.ReportMetric(float64(s.BytesSent-s0.BytesSent)/el/(1<<20), "MiB/s")
	b.ReportMetric(float64(s.FramesSent-s0.FramesSent)/float64(b.N), "frames/batch")
	if s.DroppedQueueFull > 0 {
		b.Fatalf("dropped %d", s.DroppedQueueFull)
	}
}

// One tick of 1,000 groups' heartbeats from a leader to one follower:
// bytes on the wire and CPU (both ends, this process) per tick, coalesced
// and as full raft messages.
func BenchmarkGRPCHeartbeatTick1000(b *testing.B) {
	for _, c := range []struct {
		name    string
		disable bool
	}{{"coalesced", false}, {"full", true}} {
		b.Run(c.name, func(b *testing.B) {
			tx, rx, _ := benchPair(b, c.disable)
			const groups = 1000
			tick := make([]Message, groups)
			for g := range tick {
				tick[g] = heartbeat(uint64(g+1), 1, 2, 5, uint64(1000+g))
			}
			s0, cpu0 := tx.Stats(), cpuTime()
			b.ResetTimer()
			for range b.N {
				rx.expect(groups)
				tx.Send(tick)
				rx.wait(b)
			}
			b.StopTimer()
			s := tx.Stats()
			b.ReportMetric(float64(s.BytesSent-s0.BytesSent)/float64(b.N), "bytes/tick")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/tick")
		})
	}
}
