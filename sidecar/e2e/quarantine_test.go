package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
)

// httpGet returns the status and body of an admin endpoint.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// One corrupt closed segment quarantines its partition, not the node: spoold
// starts, the other topic serves, /readyz and /metrics name the partition,
// the ERROR is logged once, and `spoold repair` truncates the partition to
// its last good offset so that it serves again (defect 14).
func TestCorruptSegmentQuarantinesOnlyItsPartition(t *testing.T) {
	n := startNodeWith(t, "", `
storage:
  segment_bytes: 1048576
topics:
  - name: orders
    partitions: 1
  - name: other
    partitions: 1
`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := n.client(ctx)
	payload := make([]byte, 1024)
	for range 50 { // 2,500 KiB in batches of 50 KiB: orders-0 spans three 1 MiB segments
		msgs := make([]spool.OutMessage, 50)
		for i := range msgs {
			msgs[i] = spool.OutMessage{Payload: payload}
		}
		if _, err := c.PublishBatch(ctx, "orders", msgs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(ctx, "other", nil, []byte("before")); err != nil {
		t.Fatal(err)
	}
	n.stop()
	segment := filepath.Join(n.dataDir, "log", "orders-0", "00000000000000000000.log")
	f, err := os.OpenFile(segment, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage!"), 300_000); err != nil {
		t.Fatal(err)
	}
	f.Close()

	n.start() // fails the test if spoold exits during start-up
	code, body := httpGet(t, "http://"+n.admin+"/readyz")
	if code != http.StatusOK || !strings.Contains(body, "orders/0") || strings.Contains(body, "at byte 0 ") || !strings.Contains(body, "quarantined") || !strings.Contains(body, segment) {
		t.Fatalf("/readyz = %d %q; want ready, naming orders/0 as quarantined in %s", code, body, segment)
	}
	_, metrics := httpGet(t, "http://"+n.admin+"/metrics")
	if !strings.Contains(metrics, `spool_partition_quarantined{partition="0",topic="orders"} 1`) {
		t.Fatalf("no spool_partition_quarantined series for orders/0 in /metrics")
	}
	c = n.client(ctx)
	if _, err := c.Publish(ctx, "other", nil, []byte("after")); err != nil {
		t.Fatalf("publish to a healthy topic next to a quarantined partition: %v", err)
	}
	if _, err := c.Publish(ctx, "orders", nil, []byte("refused")); err == nil || !strings.Contains(err.Error(), "quarantined") {
		t.Fatalf("publish to the quarantined partition: %v, want an error saying it is quarantined", err)
	}
	logs, _ := os.ReadFile(n.logPath)
	if got := strings.Count(string(logs), "level=ERROR msg=\"engine: partition quarantined"); got != 1 {
		t.Fatalf("%d quarantine ERROR lines, want 1", got)
	}

	n.stop()
	out, err := exec.Command(bins.spoold, "repair", "--data-dir", n.dataDir, "--partition", "orders-0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "truncated") {
		t.Fatalf("spoold repair: %v\n%s", err, out)
	}
	n.start()
	if _, body := httpGet(t, "http://"+n.admin+"/readyz"); strings.Contains(body, "quarantined") {
		t.Fatalf("/readyz still reports a quarantine after repair: %q", body)
	}
	c = n.client(ctx)
	if _, err := c.Publish(ctx, "orders", nil, []byte("repaired")); err != nil {
		t.Fatalf("publish after repair: %v", err)
	}
}

// Damage found while running (a consumer reads over it) quarantines the
// partition once: one ERROR line, /readyz names it, the group receives every
// record before the damage and nothing after, and the delivery loop does not
// log a failed fetch at every poll (it logged ~170 a second before).
func TestDamageFoundWhileRunningIsReportedOnce(t *testing.T) {
	n := startNodeWith(t, "", `
storage:
  segment_bytes: 1048576
topics:
  - name: orders
    partitions: 1
subscriptions:
  - topic: orders
    group: workers
    max_in_flight: 10
    window_messages: 10
`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := n.client(ctx)
	payload := make([]byte, 1024)
	for range 40 { // 2,000 KiB in batches of 50 KiB: two segments
		msgs := make([]spool.OutMessage, 50)
		for i := range msgs {
			msgs[i] = spool.OutMessage{Payload: payload}
		}
		if _, err := c.PublishBatch(ctx, "orders", msgs); err != nil {
			t.Fatal(err)
		}
	}
	// Damage the closed segment under the running node, far beyond the
	// group's window (nothing there has been read yet).
	segment := filepath.Join(n.dataDir, "log", "orders-0", "00000000000000000000.log")
	f, err := os.OpenFile(segment, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage!"), 600_000); err != nil {
		t.Fatal(err)
	}
	f.Close()

	handled := make(chan int64, 4096)
	subCtx, stop := context.WithCancel(ctx)
	subDone := make(chan error, 1)
	go func() {
		subDone <- c.Subscribe(subCtx, "workers", []string{"orders"}, func(_ context.Context, m *spool.Message) error {
			handled <- m.Offset
			return nil
		})
	}()
	defer func() { stop(); <-subDone }()
	var body string
	eventually(t, 30*time.Second, "/readyz to name the quarantined partition", func() bool {
		_, body = httpGet(t, "http://"+n.admin+"/readyz")
		return strings.Contains(body, "orders/0 quarantined")
	})
	var limit int64
	if _, err := fmt.Sscanf(body[strings.Index(body, "serves offsets below "):], "serves offsets below %d", &limit); err != nil || limit < 500 {
		t.Fatalf("/readyz %q: no plausible last good offset (%v)", body, err)
	}
	seen := map[int64]bool{}
	for int64(len(seen)) < limit {
		select {
		case off := <-handled:
			if off >= limit {
				t.Fatalf("offset %d delivered, past the damage at %d", off, limit)
			}
			seen[off] = true
		case <-ctx.Done():
			t.Fatalf("only %d of the %d records before the damage were delivered", len(seen), limit)
		}
	}
	logs, _ := os.ReadFile(n.logPath)
	if got := strings.Count(string(logs), "level=ERROR msg=\"engine: partition quarantined"); got != 1 {
		t.Fatalf("%d quarantine ERROR lines, want 1", got)
	}
	if got := strings.Count(string(logs), "fetch failed"); got != 0 {
		t.Fatalf("%d failed-fetch log lines: the loop keeps polling the damage", got)
	}
}
