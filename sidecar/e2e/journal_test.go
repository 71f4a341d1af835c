package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// TestJournalKillRestartAndRollback: a sidecar with storage.sync journal
// keeps every acknowledged message across a kill -9 and a restart; while the journal may hold entries its data dir is log format
// 3, which the previous release refuses rather than read without the
// journal; after a clean stop it is format 2 with no journal, and the
// previous release opens it with every message.
func TestJournalKillRestartAndRollback(t *testing.T) {
	n := startNode(t, "storage:\n  sync: journal\ntopics:\n  - name: orders\n    partitions: 4\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const total = 2000
	publishSeq(t, n.client(ctx), "orders", 0, total, strconv.Itoa)
	n.kill()
	logDir := filepath.Join(n.dataDir, "log")
	format := func() string {
		b, err := os.ReadFile(filepath.Join(logDir, "FORMAT"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := format(); got != "spool-log 3\n" {
		t.Fatalf("FORMAT after a kill with the journal on: %q", got)
	}

	// The previous release, configured without the journal (it knows none).
	cfg, err := os.ReadFile(n.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(filepath.Dir(n.cfgPath), "plain.yaml")
	if err := os.WriteFile(plain, []byte(strings.Replace(string(cfg), "  sync: journal\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	old := previousSpoold(t)
	out, err := exec.CommandContext(ctx, old, "--config", plain).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "spool-log 3") {
		t.Fatalf("the previous release on a data dir its journal may hold entries of: %v\n%s", err, tail(string(out), 10))
	}

	n.start() // replays the journal
	if got := endOffsets(ctx, t, n); got != total {
		t.Fatalf("after a kill and a restart the topic holds %d messages, want %d", got, total)
	}
	n.stop()
	if got := format(); got != "spool-log 2\n" {
		t.Fatalf("FORMAT after a clean stop: %q", got)
	}
	if _, err := os.Stat(filepath.Join(logDir, "journal")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal after a clean stop: %v", err)
	}
	n.bin, n.cfgPath = old, plain
	n.start()
	if got := endOffsets(ctx, t, n); got != total {
		t.Fatalf("the previous release after a clean stop: %d messages, want %d", got, total)
	}
	n.stop()
}

// endOffsets sums the end offsets of every partition of every topic.
func endOffsets(ctx context.Context, t *testing.T, n *node) int64 {
	t.Helper()
	resp, err := n.adminClient().ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, tp := range resp.GetTopics() {
		if tp.GetName() != "orders" {
			continue
		}
		for _, p := range tp.GetPartitions() {
			sum += p.GetEndOffset()
		}
	}
	return sum
}
