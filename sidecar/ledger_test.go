package sidecar

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/spoolmq/spool/internal/testredis"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// Defect 12: spool_ledger_available reads 0 when Redis does not answer the
// startup ping, and 1 once a ledger call succeeds.
func TestLedgerAvailableAfterFailedStartupPing(t *testing.T) {
	srv := testredis.Start(t)
	srv.Kill()
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil)).With("node", "n1")
	m := metrics.New()
	led, err := newLedger(&config.Config{Redis: config.RedisConfig{Addrs: []string{srv.Addr()}}}, m, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	if v := gauge(t, m); v != 0 {
		t.Fatalf("spool_ledger_available = %v after the startup ping failed, want 0", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Trip the breaker: its log line comes through the node's logger.
	for range ledger.DefaultConsecutiveFailures {
		if _, err := led.Reset(ctx, "g", []string{"id"}); err == nil {
			t.Fatal("a call succeeded with Redis down")
		}
	}
	var opened string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "breaker open") {
			opened = l
		}
	}
	if !strings.Contains(opened, `"node":"n1"`) {
		t.Fatalf("the ledger breaker does not log through the node's logger; its log:\n%s", logs.String())
	}
	srv.Restart()
	for {
		_, err := led.Reset(ctx, "g", []string{"id"})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redis did not answer after restart: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if v := gauge(t, m); v != 1 {
		t.Fatalf("spool_ledger_available = %v after a successful call, want 1", v)
	}
}

// With Redis up at start the gauge reads 1 at once.
func TestLedgerAvailableWhenRedisAnswers(t *testing.T) {
	srv := testredis.Start(t)
	m := metrics.New()
	led, err := newLedger(&config.Config{Redis: config.RedisConfig{Addrs: []string{srv.Addr()}}}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	if v := gauge(t, m); v != 1 {
		t.Fatalf("spool_ledger_available = %v with Redis up, want 1", v)
	}
}

func gauge(t *testing.T, m *metrics.Metrics) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.LedgerAvailable.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetGauge().GetValue()
}

// syncBuffer is a strings.Builder safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A malformed entry under the ledger's prefix is counted in
// spool_ledger_malformed_entries_total{op} every time, and logged once (a
// Redis someone fills with junk must not flood the log).
func TestLedgerMalformedEntriesCountedAndWarnedOnce(t *testing.T) {
	srv := testredis.Start(t)
	var logs syncBuffer
	m := metrics.New()
	led, err := newLedger(&config.Config{Redis: config.RedisConfig{Addrs: []string{srv.Addr()}}}, m, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := srv.Do("SET", ledger.Key("g", id), "junk\x1b[31m"); err != nil {
			t.Fatal(err)
		}
	}
	lease := time.Now().Add(time.Minute)
	if _, err := led.Claim(ctx, "g", "n1", time.Now(), 0, []ledger.Claim{{ID: "a", Lease: lease}, {ID: "b", Lease: lease}, {ID: "ok", Lease: lease}}); err != nil {
		t.Fatal(err)
	}
	if _, err := led.Reset(ctx, "g", []string{"c"}); err != nil {
		t.Fatal(err)
	}
	for op, want := range map[string]float64{"claim": 2, "reset": 1} {
		var out dto.Metric
		if err := m.LedgerMalformed.WithLabelValues(op).Write(&out); err != nil {
			t.Fatal(err)
		}
		if got := out.GetCounter().GetValue(); got != want {
			t.Errorf("spool_ledger_malformed_entries_total{op=%q} = %v, want %v", op, got, want)
		}
	}
	n := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "malformed") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d log lines about malformed entries, want 1:\n%s", n, logs.String())
	}
}

// redis.key_prefix and redis.tls's files reach the ledger: a spoold with a
// client certificate writes its entries under its prefix on a Redis that
// requires client certificates. The config's prefix rule is the ledger's.
func TestLedgerKeyPrefixAndTLSFilesFromConfig(t *testing.T) {
	if config.MaxRedisKeyPrefixBytes != ledger.MaxKeyPrefixBytes || config.DefaultRedisKeyPrefix != ledger.DefaultKeyPrefix {
		t.Fatal("sidecar/config and sidecar/ledger disagree on the key prefix's default or bound")
	}
	srv := testredis.StartWith(t, testredis.Options{TLS: true, TLSClientAuth: true})
	ca, cert, key := srv.TLSFiles()
	cfg := &config.Config{Redis: config.RedisConfig{Addrs: []string{srv.Addr()}, KeyPrefix: "shop-a:l:",
		TLS: config.RedisTLSConfig{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "localhost"}}}
	led, err := newLedger(cfg, metrics.New(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := led.Claim(ctx, "g", "n1", time.Now(), 0, []ledger.Claim{{ID: "m", Lease: time.Now().Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Do("EXISTS", "shop-a:l:{g}:m"); err != nil || n != int64(1) {
		t.Fatalf("EXISTS shop-a:l:{g}:m = %v, %v; want 1", n, err)
	}
	cfg.Redis.TLS.CAFile = cert + ".missing"
	if _, err := newLedger(cfg, metrics.New(), slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "CA file") {
		t.Fatalf("a missing CA file: %v, want an error naming it", err)
	}
}
