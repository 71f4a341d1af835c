package sidecar

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// newLedger returns the idempotency ledger the config asks for: Redis when
// redis.addrs is set (behind a circuit breaker), an in-process ledger in
// dev mode without Redis, and none otherwise (at-least-once without dedupe).
func newLedger(cfg *config.Config, m *metrics.Metrics, logger *slog.Logger) (ledger.Ledger, error) {
	r := cfg.Redis
	if len(r.Addrs) == 0 {
		if cfg.Node.Dev {
			logger.Info("dev mode: in-process idempotency ledger (set redis.addrs for a shared one)")
			return ledger.NewMemory(time.Now), nil
		}
		logger.Warn("no redis.addrs: delivering without the idempotency ledger (at-least-once, no dedupe by message id)")
		return nil, nil
	}
	opts := ledger.RedisOptions{Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username, Password: r.Password, DB: r.DB}
	if r.TLS {
		opts.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	red, err := ledger.NewRedis(opts)
	if err != nil {
		return nil, fmt.Errorf("redis ledger: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := red.Ping(ctx); err != nil {
		logger.Warn("redis ledger not reachable at start; delivery follows redis_unavailable until it is", "addrs", r.Addrs, "err", err)
	}
	m.LedgerAvailable.Set(1)
	return ledger.NewBreaker(red, ledger.BreakerConfig{}, ledgerHooks{m: m}), nil
}

// ledgerHooks turns ledger events into metrics (the Breaker logs its own
// transitions).
type ledgerHooks struct {
	m *metrics.Metrics
}

func (h ledgerHooks) LedgerCall(op string, _ int, d time.Duration, err error) {
	h.m.LedgerLatency.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		h.m.LedgerErrors.WithLabelValues(op).Inc()
	}
}

func (h ledgerHooks) LedgerBreaker(_, to string) {
	if to == "open" {
		h.m.LedgerAvailable.Set(0)
	} else {
		h.m.LedgerAvailable.Set(1)
	}
}
