package apps

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// BenchmarkAuthenticate is the cost of one call's authentication with a
// full tokens file (MaxTokens entries, each compared).
func BenchmarkAuthenticate(b *testing.B) {
	var f strings.Builder
	for i := range MaxTokens {
		fmt.Fprintf(&f, "%064d app-%d\n", i, i)
	}
	path := filepath.Join(b.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(f.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	tk, err := OpenTokens(path, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	g := NewGate(Config{Apps: &config.AppsConfig{DefaultIdentity: "local"}, Tokens: tk})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", fmt.Sprintf("Bearer %064d", MaxTokens-1)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Authenticate(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmitPublish is the cost the gate adds to one publish request:
// ten scope patterns and both buckets.
func BenchmarkAdmitPublish(b *testing.B) {
	pats := []string{"a", "b", "c", "d", "e", "f", "g", "h", "audit.*", "orders"}
	a := &config.AppsConfig{DefaultIdentity: "local", PublishRate: 1e9, PublishBurst: 1e9, PublishBytesRate: 1 << 40, PublishBytesBurst: 1 << 40,
		Identities: []config.AppIdentityConfig{{Name: "local", Publish: &pats}}}
	g := NewGate(Config{Apps: a, MaxMessageBytes: 1 << 20, Metrics: metrics.New(), Now: time.Now})
	ctx := WithIdentity(context.Background(), "local")
	b.ReportAllocs()
	for b.Loop() {
		if err := g.AdmitPublish(ctx, "orders", 10, 10240); err != nil {
			b.Fatal(err)
		}
	}
}
