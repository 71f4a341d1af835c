package embedded

import (
	"context"
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

// TestOpenFileBudget: a single node refuses, before creating anything, a
// topic whose partitions would take the files the log keeps open past
// its budget (guards.max_open_files), counting the segments its topics
// have grown to, and admits it again once files are freed.
func TestOpenFileBudget(t *testing.T) {
	dir := t.TempDir()
	o := log.Options{MaintenanceInterval: time.Hour, SegmentBytes: log.MinSegmentBytes, IndexIntervalBytes: 512}
	n, err := Open(Config{DataDir: dir, Log: o, Logger: quietLogger(), MaxOpenFiles: 19})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { cancel(); <-done; _ = n.Close() }()

	if err := n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	// The lock, and three files (log, offset index, time index) for the
	// one segment of each of four partitions.
	if open := n.OpenFiles(); open != 13 {
		t.Fatalf("OpenFiles = %d, want 13", open)
	}
	// orders-0 grows past one segment: its next segment is three more files.
	for i := 0; n.OpenFiles() < 16; i++ {
		if i == 10 {
			t.Fatalf("10 records of 800 bytes into 1 KiB segments: %d files open", n.OpenFiles())
		}
		res := make(chan error, 1)
		n.Produce("orders", 0, []engine.Record{{Value: make([]byte, 800)}}, func(_ int64, err error) { res <- err })
		if err := await(t, res, 10*time.Second, "produce"); err != nil {
			t.Fatal(err)
		}
	}
	// Before the growth, two partitions more fitted (13 + 6 = 19).
	err = n.EnsureTopic(engine.TopicSpec{Name: "more", Partitions: 2})
	if !errors.Is(err, engine.ErrFileBudget) || !strings.Contains(err.Error(), "guards.max_open_files") {
		t.Fatalf("past the budget: %v", err)
	}
	for _, pn := range n.store.Partitions() {
		if strings.HasPrefix(pn, "more-") {
			t.Fatalf("the refused topic left %s on disk", pn)
		}
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "one", Partitions: 1}); err != nil {
		t.Fatalf("a topic within the budget: %v", err)
	}
	if open := n.OpenFiles(); open != 19 {
		t.Fatalf("OpenFiles = %d, want 19", open)
	}
	if err := n.DeleteTopic("orders"); err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "more", Partitions: 2}); err != nil {
		t.Fatalf("after the files were freed: %v", err)
	}
	if open := n.OpenFiles(); open != 10 {
		t.Fatalf("open files %d after deleting orders and creating more; want 10", open)
	}
}

// The default budget leaves a reserve of the descriptor limit for
// listeners and connections, a quarter of a small limit.
func TestDefaultMaxOpenFiles(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{{1024, 768}, {4096, 3072}, {65536, 64512}, {1 << 20, 1<<20 - 1024}, {0, MaxOpenFilesCap}, {1 << 62, MaxOpenFilesCap}} {
		if got := DefaultMaxOpenFiles(c.nofile); got != c.want {
			t.Errorf("DefaultMaxOpenFiles(%d) = %d, want %d", c.nofile, got, c.want)
		}
	}
}
