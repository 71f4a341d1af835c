package ledger

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testredis"
)

// BenchmarkClaimCompleteBatch: the delivery loop's hot path against a real
// local redis-server over one connection: Claim a batch of 256 new ids,
// then Complete them (two script calls per batch). Reports ids/s.
func BenchmarkClaimCompleteBatch(b *testing.B) {
	const batch = 256
	srv := testredis.Start(b)
	r, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}, PoolSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	benchClaimComplete(b, r, batch)
}

// BenchmarkClaimCompleteBatchMemory: the same against the --dev ledger.
func BenchmarkClaimCompleteBatchMemory(b *testing.B) {
	benchClaimComplete(b, NewMemory(nil), 256)
}

func benchClaimComplete(b *testing.B, l Ledger, batch int) {
	ctx := context.Background()
	claims := make([]Claim, batch)
	fins := make([]Finish, batch)
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		now := time.Now()
		for i := range claims {
			claims[i] = Claim{ID: "msg-" + strconv.Itoa(n), Lease: now.Add(30 * time.Second)}
			n++
		}
		res, err := l.Claim(ctx, "bench", "node-1/1", now, time.Hour, claims)
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range res {
			if r.Status != Granted {
				b.Fatalf("claim %d: %v", i, r.Status)
			}
			fins[i] = Finish{ID: claims[i].ID, Token: r.Token}
		}
		if err := l.Complete(ctx, "bench", time.Hour, fins); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "ids/s")
}

// BenchmarkClaimCompleteBatchParallel: several delivery loops sharing one
// Redis (one connection each); ids/s is the total.
func BenchmarkClaimCompleteBatchParallel(b *testing.B) {
	const batch = 256
	srv := testredis.Start(b)
	r, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	var seq atomic.Int64
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		worker := strconv.FormatInt(seq.Add(1), 10)
		claims := make([]Claim, batch)
		fins := make([]Finish, batch)
		n := 0
		for pb.Next() {
			now := time.Now()
			for i := range claims {
				claims[i] = Claim{ID: worker + "-" + strconv.Itoa(n), Lease: now.Add(30 * time.Second)}
				n++
			}
			res, err := r.Claim(ctx, "bench", "node-1/1", now, time.Hour, claims)
			if err != nil {
				b.Error(err)
				return
			}
			for i, c := range res {
				fins[i] = Finish{ID: claims[i].ID, Token: c.Token}
			}
			if err := r.Complete(ctx, "bench", time.Hour, fins); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "ids/s")
}
