package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
)

// When the app is slower than the producers, the backlog stays in the log,
// not in spoold's memory: with a 200 MB backlog, spoold's peak RSS stays
// under a bound far below it, and the delivery window stays within its limit.
func TestBackpressureHoldsMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 200 MB")
	}
	n := startNode(t, `
storage:
  fsync: interval
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: workers
    window_messages: 1000
    max_in_flight: 16
`)
	rec := filepath.Join(t.TempDir(), "rec")
	startApp(t, n, rec, "--group", "workers", "--concurrency", "2", "--delay", "20ms")
	c := n.client(context.Background())
	payload := []byte(strings.Repeat("x", 1024))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const total, batch = 200_000, 1000
	for i := 0; i < total; i += batch {
		msgs := make([]spool.OutMessage, batch)
		for j := range msgs {
			msgs[j] = spool.OutMessage{Key: []byte(fmt.Sprintf("k%d", (i+j)%100)), Payload: payload}
		}
		if _, err := c.PublishBatch(ctx, "orders", msgs); err != nil {
			t.Fatal(err)
		}
	}
	admin := n.adminClient()
	if lag := groupLag(t, admin, "workers"); lag < total/2 {
		t.Fatalf("lag %d: the slow app should leave most of the %d messages in the log", lag, total)
	}
	// Let delivery run against the backlog for a while, then read the peak.
	eventually(t, 30*time.Second, "some messages handled", func() bool { return len(doneCounts(readEvents(t, rec))) >= 50 })
	window := metricValue(t, n, `spool_window_messages{group="workers",topic="orders"}`)
	if window > 4*1000 {
		t.Fatalf("window holds %v messages, limit is 4 partitions × 1000", window)
	}
	if dir := os.Getenv("SPOOL_E2E_HEAP_PROFILE"); dir != "" {
		saveProfile(t, n, "heap", filepath.Join(dir, "heap.pprof"))
	}
	const boundMiB = 80
	peak := n.status("VmHWM") / 1024
	t.Logf("spoold peak RSS %d MiB with a %d MiB backlog (window %v messages)", peak, total*1024>>20, window)
	if peak > boundMiB {
		t.Fatalf("spoold peak RSS %d MiB exceeds %d MiB: the backlog is being held in memory", peak, boundMiB)
	}
}
