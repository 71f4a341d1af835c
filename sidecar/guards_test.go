package sidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine/embedded"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// TestAdminCreateTopicPartitionBudgetAndCase: on a single node,
// CreateTopic past guards.max_node_partitions is INVALID_ARGUMENT
// INVALID_TOPIC_SPEC naming the setting, a name that differs from a
// topic's only in case is FAILED_PRECONDITION TOPIC_EXISTS, and
// spool_node_partitions{,_limit} show the use.
func TestAdminCreateTopicPartitionBudgetAndCase(t *testing.T) {
	dir := t.TempDir()
	eng, err := embedded.Open(embedded.Config{DataDir: dir, MaxPartitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() { stop(); <-done; _ = eng.Close() }()
	m := metrics.New()
	a := newAdmin(&config.Config{}, eng, nil, nil, m)
	a.catalog = newTopicCatalog(dir, false)
	if _, err := a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "more", Partitions: 2})
	if status.Code(err) != codes.InvalidArgument || reasonOf(err) != "INVALID_TOPIC_SPEC" || !strings.Contains(err.Error(), "guards.max_node_partitions") {
		t.Errorf("past the budget: %v (reason %q)", err, reasonOf(err))
	}
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "Audit", Partitions: 1})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "TOPIC_EXISTS" {
		t.Errorf("Audit beside audit: %v (reason %q)", err, reasonOf(err))
	}
	mctx, mcancel := context.WithCancel(ctx)
	mcancel()
	partitionMetrics(mctx, eng, m) // one reading, then ctx has ended
	if used, limit := testutil.ToFloat64(m.NodePartitions), testutil.ToFloat64(m.NodePartitionsLimit); used != 3 || limit != 4 {
		t.Errorf("spool_node_partitions %v, limit %v; want 3, 4", used, limit)
	}
}
