package spool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

// BenchmarkSubscribe measures end-to-end delivery throughput through the SDK
// against the in-process twin: one op is one message delivered, handled
// (no-op handler) and acked. Allocations count both sides (twin, gRPC client
// and server) in one process; msgs/s is what matters.
//
//	go -C sdk/go test -run '^$' -bench Subscribe -benchtime 300000x .
func BenchmarkSubscribe(b *testing.B) {
	for _, conc := range []int{64, 256} {
		b.Run("concurrency="+itoa(conc), func(b *testing.B) {
			side, err := fakesidecar.Start(fakesidecar.Config{MaxBatch: 512})
			if err != nil {
				b.Fatal(err)
			}
			defer side.Stop()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c, err := spool.Dial(ctx, side.Addr())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			side.Generate("bench", b.N, make([]byte, 100))
			var n atomic.Int64
			target := int64(b.N)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			err = c.Subscribe(ctx, "bench", nil, func(context.Context, *spool.Message) error {
				if n.Add(1) == target {
					cancel()
				}
				return nil
			}, spool.WithConcurrency(conc), spool.WithLogger(quietLogger()))
			el := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
			r := side.Record()
			b.ReportMetric(float64(r.Frames)/float64(b.N), "frames/msg")
		})
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
