package embedded

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// The batch limit derived from the sidecar's limits admits a maximal
// message (most headers, longest id, every byte of max_message_bytes) and
// its dead letter with up to DeadLetterHeadroomBytes of added headers.
func TestMaxBatchBytesForAdmitsMaximalDeadLetter(t *testing.T) {
	const maxMsg, maxID, maxHeaders = 5 << 20, 1024, 1024
	n := runNode(t, t.TempDir(), log.Options{MaxBatchBytes: engine.MaxBatchBytesFor(maxMsg, maxID, maxHeaders)}, "t")
	rec := engine.Record{ID: make([]byte, maxID), Key: make([]byte, 100)}
	used := len(rec.Key)
	for i := range maxHeaders {
		h := engine.Header{Key: fmt.Sprintf("h%04d", i), Value: make([]byte, 10)}
		rec.Headers = append(rec.Headers, h)
		used += len(h.Key) + len(h.Value)
	}
	rec.Value = make([]byte, maxMsg-used)
	// What a dead letter adds: headers totalling the headroom with their framing.
	dead := rec
	dead.Headers = append([]engine.Header(nil), rec.Headers...)
	for i := range 4 {
		dead.Headers = append(dead.Headers, engine.Header{Key: fmt.Sprintf("spool-dlq-%d", i), Value: make([]byte, engine.DeadLetterHeadroomBytes/4-64)})
	}
	for _, r := range []engine.Record{rec, dead} {
		res := make(chan error, 1)
		n.Produce("t", 0, []engine.Record{r}, func(_ int64, err error) { res <- err })
		if err := await(t, res, 10*time.Second, "produce"); err != nil {
			t.Fatalf("a message the limits allow is refused: %v", err)
		}
	}
	if got := engine.MaxBatchBytesFor(1<<20, 128, 64); got != log.DefaultMaxBatchBytes {
		t.Fatalf("small limits give %d, want the log default %d", got, log.DefaultMaxBatchBytes)
	}
}

// TestPartitionBudgetAndNameCase: a single node refuses, before creating
// anything, a topic that would pass its partition budget (seven topics of
// 1024 partitions once used up the file descriptors: spoold stopped
// accepting on every port, health included), and a topic whose name
// differs from another's only in case (one directory on a
// case-insensitive file system), open or only on disk.
func TestPartitionBudgetAndNameCase(t *testing.T) {
	dir := t.TempDir()
	n, err := Open(Config{DataDir: dir, Log: log.Options{MaintenanceInterval: time.Hour}, Logger: quietLogger(), MaxPartitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []engine.TopicSpec{{Name: "orders", Partitions: 4}, {Name: "audit", Partitions: 4}} {
		if err := n.EnsureTopic(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "more", Partitions: 1}); !errors.Is(err, engine.ErrPartitionBudget) || !strings.Contains(err.Error(), "guards.max_node_partitions") {
		t.Fatalf("past the budget: %v", err)
	}
	if used, limit := n.PartitionBudget(); used != 8 || limit != 8 {
		t.Fatalf("PartitionBudget = %d, %d", used, limit)
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatalf("the same topic again: %v", err)
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "Orders", Partitions: 1}); !errors.Is(err, engine.ErrTopicNameCase) {
		t.Fatalf("Orders beside orders: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened, orders is on disk but not declared yet.
	n2, err := Open(Config{DataDir: dir, Log: log.Options{MaintenanceInterval: time.Hour}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if err := n2.EnsureTopic(engine.TopicSpec{Name: "ORDERS", Partitions: 1}); !errors.Is(err, engine.ErrTopicNameCase) {
		t.Fatalf("ORDERS beside orders on disk: %v", err)
	}
	if _, limit := n2.PartitionBudget(); limit != DefaultMaxPartitions {
		t.Fatalf("default budget %d", limit)
	}
}
