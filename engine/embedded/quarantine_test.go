package embedded

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// syncBuffer is a log sink safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// quarantineNode is a node over dir with small segments, a captured log and
// a recorded PartitionQuarantined hook. Topics: orders (2 partitions), other (1).
type quarantineNode struct {
	*Node
	logs   *syncBuffer
	mu     sync.Mutex
	events []engine.Quarantine
}

func openQuarantineNode(t *testing.T, dir string) *quarantineNode {
	t.Helper()
	q := &quarantineNode{logs: &syncBuffer{}}
	n, err := Open(Config{
		DataDir: dir,
		Log:     log.Options{SegmentBytes: 4 << 10, MaintenanceInterval: time.Hour},
		Logger:  slog.New(slog.NewTextHandler(q.logs, nil)),
		Hooks: Hooks{PartitionQuarantined: func(e engine.Quarantine) {
			q.mu.Lock()
			q.events = append(q.events, e)
			q.mu.Unlock()
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	q.Node = n
	for _, s := range []engine.TopicSpec{{Name: "orders", Partitions: 2}, {Name: "other", Partitions: 1}} {
		if err := n.EnsureTopic(s); err != nil {
			t.Fatalf("EnsureTopic(%s): %v", s.Name, err)
		}
	}
	return q
}

func (q *quarantineNode) hookEvents() []engine.Quarantine {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]engine.Quarantine(nil), q.events...)
}

// run starts the appender until the returned stop is called.
func (q *quarantineNode) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	return func() {
		cancel()
		await(t, done, 5*time.Second, "Run to return")
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func produceOne(t *testing.T, n *Node, topic string, p int32, value string) (int64, error) {
	t.Helper()
	type res struct {
		base int64
		err  error
	}
	ch := make(chan res, 1)
	n.Produce(topic, p, []engine.Record{{Value: []byte(value)}}, func(base int64, err error) { ch <- res{base, err} })
	r := await(t, ch, 5*time.Second, "produce to "+topic)
	return r.base, r.err
}

// fillOrders writes 60 records of 200 bytes, one batch each, to every
// partition (orders-0 spans several 4 KiB segments) and closes the node.
func fillOrders(t *testing.T, dir string) {
	t.Helper()
	q := openQuarantineNode(t, dir)
	stop := q.run(t)
	for i := range 60 {
		for _, tp := range []struct {
			topic string
			p     int32
		}{{"orders", 0}, {"orders", 1}, {"other", 0}} {
			if _, err := produceOne(t, q.Node, tp.topic, tp.p, strings.Repeat(string(rune('a'+i%26)), 200)); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop()
}

// flip inverts one byte of a file at pos.
func flip(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

func firstSegment(dir, partition string) string {
	return filepath.Join(dir, "log", partition, "00000000000000000000.log")
}

// checkQuarantined asserts what a quarantined orders/0 must look like: it
// serves exactly the records before the damage, nothing past it, refuses
// publishes with ErrQuarantined, and the other partitions serve.
func checkQuarantined(t *testing.T, q *quarantineNode, file string) engine.Quarantine {
	t.Helper()
	qs := q.Quarantined()
	if len(qs) != 1 || qs[0].Topic != "orders" || qs[0].Partition != 0 || qs[0].File != file {
		t.Fatalf("Quarantined() = %+v, want orders/0 in %s", qs, file)
	}
	bad := qs[0]
	if bad.Offset <= 0 || bad.Position <= 0 {
		t.Fatalf("quarantine %+v does not locate the damage", bad)
	}
	if _, end, _ := q.Offsets("orders", 0); end != bad.Offset {
		t.Fatalf("committed end %d, want the last good offset %d", end, bad.Offset)
	}
	for off := int64(0); off < bad.Offset; {
		recs, err := q.Fetch("orders", 0, off, 1<<20, nil)
		if err != nil || len(recs) == 0 {
			t.Fatalf("fetch %d below the damage: %d records, %v", off, len(recs), err)
		}
		for _, r := range recs {
			if r.Offset != off || len(r.Value) != 200 || r.Value[0] != byte('a'+off%26) {
				t.Fatalf("wrong record at %d: offset %d value %q...", off, r.Offset, r.Value[:1])
			}
			off++
		}
	}
	for range 100 { // a consumer polling at the end: nothing, and no error
		if recs, err := q.Fetch("orders", 0, bad.Offset, 1<<20, nil); err != nil || len(recs) != 0 {
			t.Fatalf("fetch at the damage: %d records, %v; want nothing", len(recs), err)
		}
	}
	if _, err := produceOne(t, q.Node, "orders", 0, "x"); !errors.Is(err, engine.ErrQuarantined) || !strings.Contains(err.Error(), "repair") {
		t.Fatalf("publish to a quarantined partition: %v, want ErrQuarantined saying how to repair", err)
	}
	for _, tp := range []struct {
		topic string
		p     int32
	}{{"orders", 1}, {"other", 0}} {
		if _, err := produceOne(t, q.Node, tp.topic, tp.p, "fine"); err != nil {
			t.Fatalf("publish to healthy %s/%d: %v", tp.topic, tp.p, err)
		}
	}
	if got := strings.Count(q.logs.String(), "partition quarantined"); got != 1 {
		t.Fatalf("%d quarantine log lines, want exactly 1:\n%s", got, q.logs.String())
	}
	for _, want := range []string{"level=ERROR", file, "position=", "offset="} {
		if !strings.Contains(q.logs.String(), want) {
			t.Fatalf("the quarantine log line lacks %q:\n%s", want, q.logs.String())
		}
	}
	if ev := q.hookEvents(); len(ev) != 1 || ev[0] != bad {
		t.Fatalf("hook events %+v, want once %+v", ev, bad)
	}
	return bad
}

// One corrupt closed segment quarantines its partition at open; the node
// opens and every other partition serves (defect 14).
func TestCorruptClosedSegmentQuarantinesItsPartitionAtOpen(t *testing.T) {
	dir := t.TempDir()
	fillOrders(t, dir)
	file := firstSegment(dir, "orders-0")
	flip(t, file, 1000) // inside the fourth or fifth batch of a closed segment
	q := openQuarantineNode(t, dir)
	stop := q.run(t)
	defer stop()
	checkQuarantined(t, q, file)
}

// Corruption found by a read while running quarantines the partition once:
// one log line, one hook call, and the consumer polling it sees its end.
func TestCorruptionFoundWhileRunningQuarantinesOnce(t *testing.T) {
	dir := t.TempDir()
	fillOrders(t, dir)
	q := openQuarantineNode(t, dir)
	stop := q.run(t)
	defer stop()
	if qs := q.Quarantined(); len(qs) != 0 {
		t.Fatalf("quarantined before any damage: %+v", qs)
	}
	file := firstSegment(dir, "orders-0")
	flip(t, file, 1000)
	// The first read over the damage finds it.
	recs, err := q.Fetch("orders", 0, 0, 1<<20, nil)
	if err != nil {
		t.Fatalf("fetch over fresh damage: %v (want the good records and no error)", err)
	}
	bad := checkQuarantined(t, q, file)
	if len(recs) > int(bad.Offset) {
		t.Fatalf("the first fetch returned %d records, past the damage at %d", len(recs), bad.Offset)
	}
}

// Repair truncates a quarantined partition to its last good offset; after
// it the partition opens healthy and takes appends from there.
func TestRepairTruncatesToLastGoodOffset(t *testing.T) {
	dir := t.TempDir()
	fillOrders(t, dir)
	file := firstSegment(dir, "orders-0")
	flip(t, file, 1000)
	q := openQuarantineNode(t, dir)
	bad := q.Quarantined()[0]
	if _, err := RepairPartition(Config{DataDir: dir, Logger: quietLogger()}, "orders-0"); err == nil || !strings.Contains(err.Error(), "stop spoold") {
		t.Fatalf("repair while the node holds the data dir: %v, want a refusal saying to stop spoold", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := RepairPartition(Config{DataDir: dir, Logger: quietLogger()}, "orders-0")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Repaired || res.End != bad.Offset || res.File != file || res.SegmentsRemoved == 0 {
		t.Fatalf("repair result %+v, want the partition cut at %d in %s and later segments removed", res, bad.Offset, file)
	}
	if res, err := RepairPartition(Config{DataDir: dir, Logger: quietLogger()}, "orders-1"); err != nil || res.Repaired {
		t.Fatalf("repair of a healthy partition: %+v, %v; want nothing done", res, err)
	}
	q = openQuarantineNode(t, dir)
	stop := q.run(t)
	defer stop()
	if qs := q.Quarantined(); len(qs) != 0 {
		t.Fatalf("still quarantined after repair: %+v", qs)
	}
	base, err := produceOne(t, q.Node, "orders", 0, "after repair")
	if err != nil || base != bad.Offset {
		t.Fatalf("append after repair: base %d, %v; want %d", base, err, bad.Offset)
	}
	recs, err := q.Fetch("orders", 0, 0, 64<<20, nil)
	for len(recs) > 0 && recs[len(recs)-1].Offset < base && err == nil {
		more, ferr := q.Fetch("orders", 0, recs[len(recs)-1].Offset+1, 64<<20, nil)
		recs, err = append(recs, more...), ferr
	}
	if err != nil || int64(len(recs)) != base+1 || string(recs[base].Value) != "after repair" {
		t.Fatalf("after repair: %d records, %v", len(recs), err)
	}
}
