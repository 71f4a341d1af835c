package sidecar

import (
	"context"
	"log/slog"
	"syscall"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// partitionBudgeter is a single node that counts its partitions against a
// budget (engine/embedded).
type partitionBudgeter interface {
	PartitionBudget() (used, limit int)
}

// partitionMetrics copies a single node's partition use into
// spool_node_partitions until ctx ends; other engines have nothing to copy.
func partitionMetrics(ctx context.Context, eng engine.Backend, m *metrics.Metrics) {
	b, ok := eng.(partitionBudgeter)
	if !ok {
		return
	}
	t := time.NewTicker(clusterMetricsInterval)
	defer t.Stop()
	for {
		used, limit := b.PartitionBudget()
		m.NodePartitions.WithLabelValues().Set(float64(used))
		m.NodePartitionsLimit.WithLabelValues().Set(float64(limit))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// filesPerPartition is what one partition of one segment holds open (the
// log, its offset index, its time index); fileReserve is what spoold needs
// besides (listeners, connections, the groups' store).
const (
	filesPerPartition = 3
	fileReserve       = 1024
)

// checkFileLimit warns at start when the process's file descriptor limit
// would run out before guards.max_node_partitions does: the budget then
// does not protect the node, and the limit should be raised (or the budget
// lowered).
func checkFileLimit(budget int, logger *slog.Logger) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return
	}
	need := uint64(budget)*filesPerPartition + fileReserve
	if rl.Cur < need {
		logger.Warn("the file descriptor limit is below what guards.max_node_partitions needs: a node out of descriptors stops accepting on every port; raise the limit (ulimit -n) or lower guards.max_node_partitions",
			"nofile", rl.Cur, "max_node_partitions", budget, "needs", need)
	}
}

// warnPlaintextRemotes logs an INSECURE warning for each address of the
// ledger or the broker reached without TLS beyond loopback, and counts
// them in spool_plaintext_remotes{peer}. Such a config is refused before
// this unless guards.insecure_plaintext_remotes or node.dev allows it.
func warnPlaintextRemotes(cfg *config.Config, m *metrics.Metrics, logger *slog.Logger) {
	counts := map[string]int{"redis": 0, "nats": 0, "kafka": 0}
	for _, r := range cfg.PlaintextRemotes() {
		counts[r.Peer]++
		logger.Warn("INSECURE: spoold reaches this address beyond loopback without TLS: anyone on the path reads and changes what it sends and receives (a hostile reply is bounded, not prevented); set TLS and drop guards.insecure_plaintext_remotes, which allows this",
			"peer", r.Peer, "setting", r.Field, "addr", r.Addr)
	}
	for peer, n := range counts {
		m.PlaintextRemotes.WithLabelValues(peer).Set(float64(n))
	}
}
