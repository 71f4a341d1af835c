package engine

import (
	"errors"
	fnv1a "hash/fnv"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine/log"
)

func openNode(t *testing.T, dir string) *Node {
	t.Helper()
	n, err := Open(Config{DataDir: dir, Log: log.Options{SegmentBytes: 4 << 10, MaintenanceInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Partition counts can only grow: a config that declares fewer partitions
// than are stored is refused with an error that says what to do.
func TestTopicPartitionsOnlyGrow(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, dir)
	if err := n.EnsureTopic(TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, dir)
	defer n.Close()
	var conflict *TopicConflictError
	if err := n.EnsureTopic(TopicSpec{Name: "orders", Partitions: 2}); !errors.As(err, &conflict) || conflict.Stored != 4 {
		t.Fatalf("shrinking a topic: %v, want a TopicConflictError naming 4 stored partitions", err)
	}
	if err := n.EnsureTopic(TopicSpec{Name: "orders", Partitions: 6}); err != nil {
		t.Fatalf("growing a topic: %v", err)
	}
	if got, _ := n.Partitions("orders"); got != 6 {
		t.Fatalf("partitions = %d, want 6", got)
	}
	if _, err := n.Partitions("nope"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("unknown topic: %v", err)
	}
	if _, _, err := n.Offsets("orders", 9); !errors.Is(err, ErrUnknownPartition) {
		t.Fatalf("unknown partition: %v", err)
	}
}

// The key partitioner is fixed: changing it would move keys between
// partitions and break per-key order for existing data.
func TestPartitionForKeyIsStable(t *testing.T) {
	// Golden values: FNV-1a 64 of the key (a published constant and the
	// standard library's implementation), modulo the partition count.
	golden := []struct {
		key  string
		n    int32
		want int32
	}{{"a", 8, int32(0xaf63dc4c8601ec8c % 8)}, {"order-42", 12, int32(fnv("order-42") % 12)}, {"", 3, int32(0xcbf29ce484222325 % 3)}}
	for _, g := range golden {
		if got := PartitionForKey([]byte(g.key), g.n); got != g.want {
			t.Errorf("PartitionForKey(%q, %d) = %d, want %d", g.key, g.n, got, g.want)
		}
	}
}

// fnv is the standard library's FNV-1a, an independent implementation.
func fnv(s string) uint64 {
	h := fnv1a.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// quietLogger discards, unless SPOOL_TEST_LOG is set (then it writes to
// stderr, for debugging a test).
func quietLogger() *slog.Logger {
	if os.Getenv("SPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
