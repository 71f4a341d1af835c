package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// ResetOffsets replays what is retained (earliest) or skips the backlog
// (latest); it refuses while a consumer is connected, and a dry run moves
// nothing.
func TestResetOffsets(t *testing.T) {
	n := startNode(t, config("10s", "key"))
	c := n.client(context.Background())
	ids := publishSeq(t, c, "orders", 0, 50, func(s int) string { return fmt.Sprintf("k%d", s%5) })
	dir := t.TempDir()
	first, replay := filepath.Join(dir, "first"), filepath.Join(dir, "replay")
	a := startApp(t, n, first, "--group", "workers")
	eventually(t, 20*time.Second, "all handled", func() bool { return len(doneCounts(readEvents(t, first))) == len(ids) })
	admin := n.adminClient()
	earliest := &spoolv1.ResetOffsetsRequest{Group: "workers", Topic: "orders", To: &spoolv1.ResetOffsetsRequest_Earliest{Earliest: true}}
	eventually(t, 10*time.Second, "consumer seen connected", func() bool { return metricValue(t, n, `spool_consumers{group="workers"}`) == 1 })
	if _, err := admin.ResetOffsets(context.Background(), earliest); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("reset with a consumer connected: %v, want FAILED_PRECONDITION", err)
	}
	a.stopGracefully()
	eventually(t, 10*time.Second, "consumer gone", func() bool {
		_, err := admin.ResetOffsets(context.Background(), &spoolv1.ResetOffsetsRequest{Group: "workers", Topic: "orders", To: &spoolv1.ResetOffsetsRequest_Latest{Latest: true}, DryRun: true})
		return err == nil
	})
	dry := &spoolv1.ResetOffsetsRequest{Group: "workers", Topic: "orders", To: &spoolv1.ResetOffsetsRequest_Earliest{Earliest: true}, DryRun: true}
	resp, err := admin.ResetOffsets(context.Background(), dry)
	if err != nil {
		t.Fatal(err)
	}
	var lag int64
	for _, p := range resp.GetPartitions() {
		lag += p.GetLagMessages()
	}
	if lag != int64(len(ids)) {
		t.Fatalf("dry run to earliest reports lag %d, want %d", lag, len(ids))
	}
	if got := groupLag(t, admin, "workers"); got != 0 {
		t.Fatalf("a dry run moved offsets: lag %d", got)
	}
	if _, err := admin.ResetOffsets(context.Background(), earliest); err != nil {
		t.Fatal(err)
	}
	startApp(t, n, replay, "--group", "workers")
	eventually(t, 20*time.Second, "everything replayed", func() bool { return len(doneCounts(readEvents(t, replay))) == len(ids) })
}
