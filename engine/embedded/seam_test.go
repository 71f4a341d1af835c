package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// runNode opens a node on dir with the given log options and runs its
// appender until the test ends.
func runNode(t testing.TB, dir string, o log.Options, topics ...string) *Node {
	t.Helper()
	if o.MaintenanceInterval == 0 {
		o.MaintenanceInterval = time.Hour
	}
	n, err := Open(Config{DataDir: dir, Log: o, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range topics {
		if err := n.EnsureTopic(engine.TopicSpec{Name: name, Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = n.Close()
	})
	return n
}

// await fails the test if ch does not deliver within d.
func await[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		var zero T
		return zero
	}
}

// A done callback that blocks (a slow consumer of results) must not stall
// appends to other partitions and topics, nor the appender's shutdown
// (defect 1, engine half).
func TestBlockedDoneStallsNothingElse(t *testing.T) {
	n, err := Open(Config{DataDir: t.TempDir(), Log: log.Options{MaintenanceInterval: time.Hour}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := n.EnsureTopic(engine.TopicSpec{Name: name, Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- n.Run(ctx) }()

	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	n.Produce("a", 0, []engine.Record{{Value: []byte("blocks")}}, func(int64, error) {
		close(entered)
		<-release // a consumer of results that does not keep up
	})
	await(t, entered, 5*time.Second, "the blocking done to be called")

	for _, target := range []struct {
		topic string
		p     int32
	}{{"b", 0}, {"a", 1}} {
		res := make(chan error, 1)
		n.Produce(target.topic, target.p, []engine.Record{{Value: []byte("other")}}, func(_ int64, err error) { res <- err })
		if err := await(t, res, 5*time.Second, "a produce to "+target.topic+"/"+string(rune('0'+target.p))+" while another partition's done blocks"); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	await(t, runDone, 5*time.Second, "Run to return while a done blocks")
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	if err := await(t, closed, 5*time.Second, "Close to return while a done blocks"); err != nil {
		t.Fatal(err)
	}
}

// With fsync: interval, appended records become visible when the timer
// fsync moves the end; that must signal watchers, or consumers wait for
// their next periodic wake-up (defect 6).
func TestWatchSignalledByIntervalSync(t *testing.T) {
	n := runNode(t, t.TempDir(), log.Options{Fsync: log.FsyncInterval, FsyncInterval: 200 * time.Millisecond}, "t")
	ch := make(chan struct{}, 1)
	cancel, err := n.Watch([]string{"t"}, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	res := make(chan error, 1)
	n.Produce("t", 1, []engine.Record{{Value: []byte("x")}}, func(_ int64, err error) { res <- err })
	if err := await(t, res, 5*time.Second, "produce"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for {
		// Drain a signal that may have come before the end moved, then check.
		if _, end, _ := n.Offsets("t", 1); end == 1 {
			break
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("no watch signal made the record visible within 5s (timer fsync does not notify)")
		}
	}
	// The record is visible now; it must also be fetchable.
	recs, err := n.Fetch("t", 1, 0, 1<<20, nil)
	if err != nil || len(recs) != 1 {
		t.Fatalf("fetch after the signal: %d records, %v", len(recs), err)
	}
}

// RecordTime reads a batch header; it must agree with the records' own
// append time, and refuse offsets that are not committed.
func TestRecordTimeMatchesFetch(t *testing.T) {
	n := runNode(t, t.TempDir(), log.Options{SegmentBytes: 4 << 10}, "t")
	for i := range 20 {
		recs := make([]engine.Record, 1+i%7)
		for j := range recs {
			recs[j] = engine.Record{Value: make([]byte, 300), Timestamp: int64(1_000_000 + i)}
		}
		res := make(chan error, 1)
		n.Produce("t", 0, recs, func(_ int64, err error) { res <- err })
		if err := await(t, res, 5*time.Second, "produce"); err != nil {
			t.Fatal(err)
		}
	}
	_, end, _ := n.Offsets("t", 0)
	for off := int64(0); off < end; off++ {
		recs, err := n.Fetch("t", 0, off, 1, nil)
		if err != nil || len(recs) == 0 {
			t.Fatalf("fetch %d: %v", off, err)
		}
		got, err := n.RecordTime("t", 0, off)
		if err != nil || got != recs[0].Timestamp {
			t.Fatalf("RecordTime(%d) = %d, %v; the record says %d", off, got, err, recs[0].Timestamp)
		}
	}
	if _, err := n.RecordTime("t", 0, end); err == nil {
		t.Fatalf("RecordTime at the committed end %d: no error", end)
	}
}

// done is never called on the caller's goroutine, even for an append
// refused before it is queued: a caller that holds a lock, or blocks on a
// channel its own goroutine serves, cannot deadlock itself (the
// batch-too-large path of defect 1).
func TestProduceNeverCallsDoneOnCallersGoroutine(t *testing.T) {
	n := runNode(t, t.TempDir(), log.Options{MaxBatchBytes: 64 << 10}, "t")
	cases := []struct {
		name  string
		topic string
		p     int32
		recs  []engine.Record
	}{
		{"unknown topic", "nope", 0, []engine.Record{{Value: []byte("x")}}},
		{"unknown partition", "t", 9, []engine.Record{{Value: []byte("x")}}},
		{"batch too large", "t", 0, []engine.Record{{Value: make([]byte, 100<<10)}}},
		{"empty batch", "t", 1, nil},
	}
	for _, c := range cases {
		results := make(chan error) // unbuffered: a synchronous done would block Produce forever
		returned := make(chan struct{})
		go func() {
			n.Produce(c.topic, c.p, c.recs, func(_ int64, err error) { results <- err })
			close(returned)
		}()
		await(t, returned, 5*time.Second, c.name+": Produce to return before its done is received")
		if err := await(t, results, 5*time.Second, c.name+": done"); err == nil {
			t.Fatalf("%s: done reported success", c.name)
		}
	}
}
