package embedded

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
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
	if err := n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, dir)
	defer n.Close()
	var conflict *engine.TopicConflictError
	if err := n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); !errors.As(err, &conflict) || conflict.Stored != 4 {
		t.Fatalf("shrinking a topic: %v, want a TopicConflictError naming 4 stored partitions", err)
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 6}); err != nil {
		t.Fatalf("growing a topic: %v", err)
	}
	if got, _ := n.Partitions("orders"); got != 6 {
		t.Fatalf("partitions = %d, want 6", got)
	}
	if _, err := n.Partitions("nope"); !errors.Is(err, engine.ErrUnknownTopic) {
		t.Fatalf("unknown topic: %v", err)
	}
	if _, _, err := n.Offsets("orders", 9); !errors.Is(err, engine.ErrUnknownPartition) {
		t.Fatalf("unknown partition: %v", err)
	}
}

// quietLogger discards, unless SPOOL_TEST_LOG is set (then it writes to
// stderr, for debugging a test).
func quietLogger() *slog.Logger {
	if os.Getenv("SPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
