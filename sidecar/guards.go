package sidecar

import (
	"context"
	"log/slog"
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

// openFileCounter is a node that counts the files its log keeps open
// (engine/embedded, engine/cluster).
type openFileCounter interface {
	OpenFiles() int
}

// nodeBudgetMetrics copies a node's partition and open-file use into
// spool_node_partitions and spool_open_files until ctx ends, and warns as
// the open files cross 80 % of fileLimit (guards.max_open_files); other
// engines have nothing to copy.
func nodeBudgetMetrics(ctx context.Context, eng engine.Backend, fileLimit int, m *metrics.Metrics, logger *slog.Logger) {
	pb, hasParts := eng.(partitionBudgeter)
	fc, hasFiles := eng.(openFileCounter)
	if !hasParts && !hasFiles {
		return
	}
	var high fileHighWater
	t := time.NewTicker(clusterMetricsInterval)
	defer t.Stop()
	for {
		if hasParts {
			used, limit := pb.PartitionBudget()
			m.NodePartitions.WithLabelValues().Set(float64(used))
			m.NodePartitionsLimit.WithLabelValues().Set(float64(limit))
		}
		if hasFiles {
			open := fc.OpenFiles()
			m.OpenFiles.Set(float64(open))
			m.OpenFilesLimit.Set(float64(fileLimit))
			if high.cross(open, fileLimit) {
				logger.Warn("the log keeps open more than 80% of guards.max_open_files: segments grow with data until retention deletes them, and a node out of file descriptors stops accepting on every port; shorten retention, grow segment_bytes, delete topics, or raise the file descriptor limit",
					"open_files", open, "max_open_files", fileLimit)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fileHighWater decides when the open files cross the high-water mark
// (80 % of the budget): once on the way up, and again only after they
// fell below it.
type fileHighWater struct{ above bool }

func (h *fileHighWater) cross(open, limit int) (warn bool) {
	above := limit > 0 && open*5 >= limit*4
	warn = above && !h.above
	h.above = above
	return warn
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
