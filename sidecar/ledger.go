package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
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
	opts := ledger.RedisOptions{Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username, Password: r.Password, DB: r.DB,
		KeyPrefix: r.KeyPrefix, OnMalformed: malformedHook(m, logger),
		MaxReplyBytes: cfg.Guards.RedisMaxReplyBytes, OnReplyRefused: func() { m.RemoteRefused.WithLabelValues("redis").Inc() }}
	if r.TLS.On() {
		tc, err := ledger.TLSFiles{CAFile: r.TLS.CAFile, CertFile: r.TLS.CertFile, KeyFile: r.TLS.KeyFile, ServerName: r.TLS.ServerName}.Config()
		if err != nil {
			return nil, fmt.Errorf("redis ledger: %w", err)
		}
		opts.TLS = tc
	}
	red, err := ledger.NewRedis(opts)
	if err != nil {
		return nil, fmt.Errorf("redis ledger: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The gauge starts from what the ping saw: a Redis that is down at
	// start reads 0 until a call succeeds, not 1 until the breaker trips.
	if err := red.Ping(ctx); err != nil {
		m.LedgerAvailable.Set(0)
		logger.Warn("redis ledger not reachable at start; delivery follows redis_unavailable until it is", "addrs", r.Addrs, "err", err)
	} else {
		m.LedgerAvailable.Set(1)
	}
	return ledger.NewBreaker(red, ledger.BreakerConfig{Logger: logger}, ledgerHooks{m: m}), nil
}

// malformedHook counts every malformed ledger entry met and logs the first
// one only: entries under the prefix are written by whoever can write to
// Redis, and a Redis filled with junk must not flood the log. The key is
// logged quoted (%q): it may hold control characters.
func malformedHook(m *metrics.Metrics, logger *slog.Logger) func(op, group, key string) {
	var warned atomic.Bool
	return func(op, group, key string) {
		m.LedgerMalformed.WithLabelValues(op).Inc()
		if !warned.Swap(true) {
			logger.Warn("redis ledger: an entry under the key prefix is malformed; it is treated as unknown (claim overwrites it), only its own message is affected; further ones are counted in spool_ledger_malformed_entries_total",
				"op", op, "group", group, "key", fmt.Sprintf("%q", key))
		}
	}
}

// ledgerHooks turns ledger events into metrics (the Breaker logs its own
// transitions). spool_ledger_available is 1 once Redis has answered and 0
// from a failed startup ping or the breaker opening until Redis answers
// again; a half-open probe changes nothing until its outcome is known, so
// an outage does not flap the gauge at every probe.
type ledgerHooks struct {
	m *metrics.Metrics
}

func (h ledgerHooks) LedgerCall(op string, items int, d time.Duration, err error) {
	h.m.LedgerLatency.WithLabelValues(op).Observe(d.Seconds())
	h.m.LedgerBatch.WithLabelValues(op).Observe(float64(items))
	if err != nil {
		h.m.LedgerErrors.WithLabelValues(op).Inc()
		return
	}
	h.m.LedgerAvailable.Set(1)
}

func (h ledgerHooks) LedgerBreaker(_, to string) {
	switch to {
	case "open":
		h.m.LedgerAvailable.Set(0)
	case "closed":
		h.m.LedgerAvailable.Set(1)
	}
}
