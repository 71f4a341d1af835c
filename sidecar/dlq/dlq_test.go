package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/embedded"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/deliver"
	"github.com/spoolmq/spool/sidecar/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	topic    = "orders"
	dlqTopic = "orders.dlq.workers"
	group    = "workers"
)

// t0 is the dead-letter time of the first entry; entry i is dead-lettered
// at t0 + i seconds.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newNode opens a real engine in a temp dir with topic (4 partitions) and
// its dead-letter topic (2 partitions), and runs its appender until the
// test ends.
func newNode(t *testing.T) *embedded.Node {
	t.Helper()
	n, err := embedded.Open(embedded.Config{DataDir: t.TempDir(), Log: engine.LogOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []engine.TopicSpec{{Name: topic, Partitions: 4}, {Name: dlqTopic, Partitions: 2}} {
		if err := n.EnsureTopic(spec); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// dl describes one dead-letter entry to write.
type dl struct {
	id, group, topic, reason, key string
	partition                     int32 // original partition
	value                         []byte
	attempts                      int // 0 means 3
}

// dlRecord is the dead-letter record the delivery loop writes for d,
// dead-lettered at t0 + i seconds.
func dlRecord(d dl, i int) engine.Record {
	return dlRecordAt(d, i, t0.Add(time.Duration(i)*time.Second))
}

// dlRecordAt is the dead-letter record for d dead-lettered at at (and
// appended then, as the delivery loop does).
func dlRecordAt(d dl, i int, at time.Time) engine.Record {
	h := func(k, v string) engine.Header { return engine.Header{Key: k, Value: []byte(v)} }
	attempts := d.attempts
	if attempts == 0 {
		attempts = 3
	}
	return engine.Record{
		Timestamp: at.UnixMilli(),
		ID:        []byte(d.id),
		Key:       []byte(d.key),
		Value:     d.value,
		Headers: []engine.Header{
			h("app-header", "kept"),
			h(deliver.HeaderDLQTopic, d.topic),
			h(deliver.HeaderDLQPartition, strconv.Itoa(int(d.partition))),
			h(deliver.HeaderDLQOffset, strconv.Itoa(i)),
			h(deliver.HeaderDLQGroup, d.group),
			h(deliver.HeaderDLQReason, d.reason),
			h(deliver.HeaderDLQLastError, "boom"),
			h(deliver.HeaderDLQAttempts, strconv.Itoa(attempts)),
			h(deliver.HeaderDLQTimeMs, strconv.FormatInt(at.UnixMilli(), 10)),
		},
	}
}

// produce appends recs to one partition and waits until they are durable.
func produce(t *testing.T, eng Engine, topic string, p int32, recs ...engine.Record) {
	t.Helper()
	done := make(chan error, 1)
	eng.Produce(topic, p, recs, func(_ int64, err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// writeDLQ writes the entries to the dead-letter topic, entry i to
// partition i%2, and returns them.
func writeDLQ(t *testing.T, eng Engine, ds ...dl) []dl {
	t.Helper()
	for i, d := range ds {
		if d.group == "" {
			ds[i].group = group
		}
		if ds[i].topic == "" {
			ds[i].topic = topic
		}
		if ds[i].reason == "" {
			ds[i].reason = "max_attempts_exceeded"
		}
		produce(t, eng, dlqTopic, int32(i%2), dlRecord(ds[i], i))
	}
	return ds
}

// readAll returns every record of every partition of a topic.
func readAll(t *testing.T, eng Engine, topic string) map[int32][]engine.Record {
	t.Helper()
	n, err := eng.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][]engine.Record{}
	for p := range n {
		for off := int64(0); ; {
			recs, err := eng.Fetch(topic, p, off, 1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			out[p] = append(out[p], recs...)
			off = recs[len(recs)-1].Offset + 1
		}
	}
	return out
}

func ids(entries []*spoolv1.DeadLetter) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.GetMessage().GetMessageId())
	}
	slices.Sort(out)
	return out
}

func redrivenIDs(t *testing.T, eng Engine) []string {
	t.Helper()
	var out []string
	for _, recs := range readAll(t, eng, topic) {
		for _, r := range recs {
			out = append(out, string(r.ID))
		}
	}
	slices.Sort(out)
	return out
}

func header(r engine.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// fiveEntries: two groups, two topics, two reasons, two keys, dead-lettered
// at t0+0s … t0+4s.
func fiveEntries() []dl {
	return []dl{
		{id: "a", key: "k1", reason: "bad", attempts: 1},
		{id: "b", key: "k2", attempts: 5},
		{id: "c", key: "k1", group: "audit"},
		{id: "d", key: "k1", topic: "payments"},
		{id: "e", key: "k2", reason: "bad", partition: 3},
	}
}

// Peek returns the group's entries that match the filter, decoded, and
// never more than the limit.
func TestPeekFilters(t *testing.T) {
	n := newNode(t)
	writeDLQ(t, n, fiveEntries()...)
	tests := []struct {
		name   string
		filter *spoolv1.DeadLetterFilter
		limit  int
		want   []string
	}{
		{"no filter: the group's entries only", nil, 100, []string{"a", "b", "d", "e"}},
		{"reason", &spoolv1.DeadLetterFilter{Reason: "bad"}, 100, []string{"a", "e"}},
		{"key", &spoolv1.DeadLetterFilter{Key: []byte("k1")}, 100, []string{"a", "d"}},
		{"from time (inclusive)", &spoolv1.DeadLetterFilter{FromTimeMs: t0.Add(3 * time.Second).UnixMilli()}, 100, []string{"d", "e"}},
		{"to time (exclusive)", &spoolv1.DeadLetterFilter{ToTimeMs: t0.Add(3 * time.Second).UnixMilli()}, 100, []string{"a", "b"}},
		// Oldest first, partition by partition: a, (c of audit), e in partition 0, then b.
		{"limit", nil, 3, []string{"a", "b", "e"}},
		{"nothing matches", &spoolv1.DeadLetterFilter{Reason: "none"}, 100, nil},
		{"at least 3 attempts", &spoolv1.DeadLetterFilter{MinAttempts: 3}, 100, []string{"b", "d", "e"}},
		{"at most 3 attempts", &spoolv1.DeadLetterFilter{MaxAttempts: 3}, 100, []string{"a", "d", "e"}},
		{"attempts 2..4", &spoolv1.DeadLetterFilter{MinAttempts: 2, MaxAttempts: 4}, 100, []string{"d", "e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := Peek(n, Query{Group: group, DLQTopic: dlqTopic, Filter: tt.filter}, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			got := page.Entries
			if len(got) > tt.limit {
				t.Fatalf("%d entries, limit %d", len(got), tt.limit)
			}
			if g := ids(got); !slices.Equal(g, tt.want) {
				t.Fatalf("Peek = %v, want %v", g, tt.want)
			}
		})
	}
	page, err := Peek(n, Query{Group: group, DLQTopic: dlqTopic, Filter: &spoolv1.DeadLetterFilter{Reason: "bad", Key: []byte("k2")}}, 10)
	got := page.Entries
	if err != nil || len(got) != 1 {
		t.Fatalf("Peek(reason bad, key k2) = %v, %v", got, err)
	}
	m := got[0].GetMessage()
	if m.GetTopic() != topic || m.GetPartition() != 3 || string(m.GetKey()) != "k2" || m.GetAttempt() != 3 ||
		m.GetLastError() != "boom" || m.GetHeaders()["app-header"] != "kept" || len(m.GetHeaders()) != 1 ||
		got[0].GetReason() != "bad" || got[0].GetDeadLetteredTimeMs() != t0.Add(4*time.Second).UnixMilli() {
		t.Fatalf("entry decoded as %v", got[0])
	}
}

// A redrive moves exactly the entries of its group and topic that match
// the filter, back to their original partition, without the dead-letter
// headers and marked for the group; the others stay where they are.
func TestRedriveMovesMatchingEntriesToTheirPartition(t *testing.T) {
	n := newNode(t)
	writeDLQ(t, n, fiveEntries()...)
	var redriven int
	res, err := Redrive(context.Background(), n, nil, Request{
		Group: group, Topic: topic, DLQTopic: dlqTopic, Filter: &spoolv1.DeadLetterFilter{Reason: "bad"}, RatePerS: MaxRatePerS,
	}, Counters{Redriven: func(k int) { redriven += k }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 2 || res.Redriven != 2 || redriven != 2 || len(res.Sample) != 2 {
		t.Fatalf("result %+v (counter %d), want 2 matched and redriven", res, redriven)
	}
	all := readAll(t, n, topic)
	if len(all[0]) != 1 || string(all[0][0].ID) != "a" || len(all[3]) != 1 || string(all[3][0].ID) != "e" || len(all[1])+len(all[2]) != 0 {
		t.Fatalf("after the redrive, topic holds %v; want a on partition 0 and e on partition 3", all)
	}
	r := all[3][0]
	if string(r.Key) != "k2" {
		t.Fatalf("redriven key %q", r.Key)
	}
	if g, _ := header(r, deliver.HeaderRedriveGroup); g != group {
		t.Fatalf("redrive group header %q, want %q", g, group)
	}
	if from, _ := header(r, deliver.HeaderRedriveFrom); from != dlqTopic+"/0/2" {
		t.Fatalf("redrive-from header %q, want %s/0/2", from, dlqTopic)
	}
	if v, _ := header(r, "app-header"); v != "kept" {
		t.Fatal("the app's header was lost")
	}
	if _, ok := header(r, deliver.HeaderDLQReason); ok {
		t.Fatal("a dead-letter header was carried over to the redriven message")
	}
	// The dead-letter entries stay (redrive copies; retention removes them).
	if got := readAll(t, n, dlqTopic); len(got[0])+len(got[1]) != 5 {
		t.Fatalf("dead-letter topic holds %d entries after the redrive, want 5", len(got[0])+len(got[1]))
	}
}

// A dry run reports what would move (count and a bounded sample) and moves
// nothing, resets nothing.
func TestRedriveDryRun(t *testing.T) {
	n := newNode(t)
	var ds []dl
	for i := range MaxSample + 20 {
		ds = append(ds, dl{id: fmt.Sprint("m", i), key: "k"})
	}
	writeDLQ(t, n, ds...)
	l := ledger.NewMemory(nil)
	defer l.Close()
	ctx := context.Background()
	if _, err := l.Claim(ctx, group, "node", time.Now(), time.Hour, []ledger.Claim{{ID: "m0", Lease: time.Now().Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	res, err := Redrive(ctx, n, l, Request{Group: group, Topic: topic, DLQTopic: dlqTopic, DryRun: true, PageEntries: 7}, Counters{
		Redriven: func(int) { t.Error("a dry run counted a redriven message") },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != uint64(len(ds)) || res.Redriven != 0 || len(res.Sample) != MaxSample {
		t.Fatalf("dry run: matched %d, redriven %d, sample %d; want %d, 0, %d", res.Matched, res.Redriven, len(res.Sample), len(ds), MaxSample)
	}
	if got := redrivenIDs(t, n); len(got) != 0 {
		t.Fatalf("a dry run appended %v", got)
	}
	// m0's ledger entry is still in progress: a reset would have made it
	// claimable again at attempt 1 by another owner.
	cr, err := l.Claim(ctx, group, "other-node", time.Now(), time.Hour, []ledger.Claim{{ID: "m0", Lease: time.Now().Add(time.Minute)}})
	if err != nil || cr[0].Status != ledger.Busy {
		t.Fatalf("after a dry run, m0's ledger entry answers %+v, %v; want still busy (not reset)", cr, err)
	}
}

// A redrive appends no faster than its rate.
func TestRedriveRate(t *testing.T) {
	n := newNode(t)
	var ds []dl
	for i := range 10 {
		ds = append(ds, dl{id: fmt.Sprint("m", i), key: fmt.Sprint("k", i)})
	}
	writeDLQ(t, n, ds...)
	start := time.Now()
	res, err := Redrive(context.Background(), n, nil, Request{Group: group, Topic: topic, DLQTopic: dlqTopic, RatePerS: 50, PageEntries: 3}, Counters{})
	if err != nil {
		t.Fatal(err)
	}
	// 10 messages at 50/s: one every 20 ms, the first after 20 ms.
	if took := time.Since(start); res.Redriven != 10 || took < 190*time.Millisecond {
		t.Fatalf("%d messages redriven in %v at 50/s; want 10 in at least 200 ms", res.Redriven, took)
	}
}

// An entry whose message the ledger shows as done since is not redriven
// (counted as already done); the others get a fresh ledger entry.
func TestRedriveSkipsMessagesTheLedgerShowsDone(t *testing.T) {
	n := newNode(t)
	writeDLQ(t, n, dl{id: "done", key: "k"}, dl{id: "dead", key: "k"}, dl{id: "unknown", key: "k"})
	l := ledger.NewMemory(nil)
	defer l.Close()
	ctx := context.Background()
	now := time.Now()
	cr, err := l.Claim(ctx, group, "node", now, time.Hour, []ledger.Claim{{ID: "done", Lease: now.Add(time.Minute)}, {ID: "dead", Lease: now.Add(time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, group, time.Hour, []ledger.Finish{{ID: "done", Token: cr[0].Token}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Dead(ctx, group, time.Hour, []ledger.Finish{{ID: "dead", Token: cr[1].Token}}); err != nil {
		t.Fatal(err)
	}
	skipped := map[string]int{}
	res, err := Redrive(ctx, n, l, Request{Group: group, Topic: topic, DLQTopic: dlqTopic, RatePerS: MaxRatePerS}, Counters{
		Skipped: func(reason string, k int) { skipped[reason] += k },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 3 || res.Redriven != 2 || res.AlreadyDone != 1 || skipped["already_done"] != 1 {
		t.Fatalf("result %+v, skipped %v; want 3 matched, 2 redriven, 1 already done", res, skipped)
	}
	if got := redrivenIDs(t, n); !slices.Equal(got, []string{"dead", "unknown"}) {
		t.Fatalf("redriven %v, want [dead unknown]", got)
	}
	// "dead" starts afresh: the next claim is its first attempt.
	cr, err = l.Claim(ctx, group, "node", now, time.Hour, []ledger.Claim{{ID: "dead", Lease: now.Add(time.Minute)}})
	if err != nil || cr[0].Status != ledger.Granted || cr[0].Attempts != 1 {
		t.Fatalf("claim after the redrive = %+v, %v; want granted, attempt 1", cr, err)
	}
}

// countingEngine counts the dead letters read from the log and the
// messages appended by the redrive: what a redrive holds at a time is the
// difference.
type countingEngine struct {
	Engine
	mu             sync.Mutex
	read, appended int
	maxHeld        int
	// reDeadLetter: every redriven message is dead-lettered again at once
	// (a fix that did not work), appended to the dead-letter topic.
	reDeadLetter bool
}

func (c *countingEngine) Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error) {
	recs, err := c.Engine.Fetch(topic, p, offset, maxBytes, dst)
	if topic == dlqTopic {
		c.mu.Lock()
		c.read += len(recs) - len(dst)
		c.mu.Unlock()
	}
	return recs, err
}

func (c *countingEngine) Produce(topic string, p int32, recs []engine.Record, done func(int64, error)) {
	c.mu.Lock()
	c.maxHeld = max(c.maxHeld, c.read-c.appended)
	c.appended += len(recs)
	c.mu.Unlock()
	if !c.reDeadLetter {
		c.Engine.Produce(topic, p, recs, done)
		return
	}
	c.Engine.Produce(topic, p, recs, func(base int64, err error) {
		// The appender's goroutine must not wait on itself: append the new
		// dead letter without waiting for it.
		c.Engine.Produce(dlqTopic, 0, []engine.Record{dlRecord(dl{id: string(recs[0].ID), group: group, topic: topic, reason: "again"}, 0)}, func(int64, error) {})
		done(base, err)
	})
}

// A redrive over a dead-letter topic much larger than its page never holds
// more than a page (plus what one read returns), and still moves every
// entry once.
func TestRedriveHoldsOnePageAtATime(t *testing.T) {
	n := newNode(t)
	const entries, valueBytes, pageEntries, pageBytes = 600, 1 << 10, 20, 16 << 10
	// In batches of 5 records: a read from the log returns whole batches.
	for p := range int32(2) {
		for b := 0; b < entries/2; b += 5 {
			var recs []engine.Record
			for i := b; i < b+5; i++ {
				recs = append(recs, dlRecord(dl{id: fmt.Sprintf("m%d-%d", p, i), group: group, topic: topic, reason: "r", key: "k", value: make([]byte, valueBytes)}, i))
			}
			produce(t, n, dlqTopic, p, recs...)
		}
	}
	c := &countingEngine{Engine: n}
	maxPage, pages := 0, 0
	res, err := Redrive(context.Background(), c, nil, Request{
		Group: group, Topic: topic, DLQTopic: dlqTopic, RatePerS: MaxRatePerS, PageEntries: pageEntries, PageBytes: pageBytes,
	}, Counters{Page: func(k, size int) {
		pages++
		maxPage = max(maxPage, k)
		if k > pageEntries || size > pageBytes {
			t.Errorf("a page of %d entries, %d bytes; limits %d, %d", k, size, pageEntries, pageBytes)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != entries || len(redrivenIDs(t, n)) != entries {
		t.Fatalf("redriven %d, appended %d; want %d", res.Redriven, len(redrivenIDs(t, n)), entries)
	}
	// A read asks for at most the page's bytes (whole batches: about 3 of
	// 5 records of 1 KiB and headers); with the page's 20 entries, fewer
	// than 40 dead letters are ever held.
	if c.maxHeld > 2*pageEntries {
		t.Fatalf("the redrive held up to %d dead letters at once (read, not yet appended); the page is %d", c.maxHeld, pageEntries)
	}
	if pages < entries/pageEntries {
		t.Fatalf("%d pages (largest %d) for %d entries with pages of %d", pages, maxPage, entries, pageEntries)
	}
}

// Entries that arrive in the dead-letter topic while a redrive runs (its
// own messages failing again) are not redriven by it: it ends, and moves
// each message once.
func TestRedriveEndsAtTheEntriesPresentWhenItStarted(t *testing.T) {
	n := newNode(t)
	var ds []dl
	for i := range 30 {
		ds = append(ds, dl{id: fmt.Sprint("m", i), key: fmt.Sprint("k", i)})
	}
	writeDLQ(t, n, ds...)
	c := &countingEngine{Engine: n, reDeadLetter: true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Redrive(ctx, c, nil, Request{Group: group, Topic: topic, DLQTopic: dlqTopic, RatePerS: MaxRatePerS, PageEntries: 4}, Counters{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 30 || res.Matched != 30 {
		t.Fatalf("matched %d, redriven %d; want 30 and 30 (entries dead-lettered during the redrive are for the next one)", res.Matched, res.Redriven)
	}
}

// A cancelled redrive stops between two messages and says how far it got;
// what it counted as redriven was appended.
func TestRedriveStopsWhenCancelled(t *testing.T) {
	n := newNode(t)
	var ds []dl
	for i := range 20 {
		ds = append(ds, dl{id: fmt.Sprint("m", i), key: fmt.Sprint("k", i)})
	}
	writeDLQ(t, n, ds...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := Redrive(ctx, n, nil, Request{Group: group, Topic: topic, DLQTopic: dlqTopic, RatePerS: 200, PageEntries: 5}, Counters{
		Redriven: func(int) { cancel() },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res.Redriven != 1 || len(redrivenIDs(t, n)) != 1 {
		t.Fatalf("redriven %d, appended %v; want 1 and 1", res.Redriven, redrivenIDs(t, n))
	}
}

// When the ledger cannot reset an entry, the redrive stops before moving
// that message and says what to do.
func TestRedriveStopsWhenTheLedgerFails(t *testing.T) {
	n := newNode(t)
	writeDLQ(t, n, dl{id: "m0", key: "k"}, dl{id: "m1", key: "k"})
	l := ledger.NewMemory(nil)
	l.Close() // every call now fails with ErrClosed
	res, err := Redrive(context.Background(), n, l, Request{Group: group, Topic: topic, DLQTopic: dlqTopic, RatePerS: MaxRatePerS}, Counters{})
	if !errors.Is(err, ledger.ErrClosed) || res.Redriven != 0 || len(redrivenIDs(t, n)) != 0 {
		t.Fatalf("err %v, redriven %d, appended %v; want the ledger's error and nothing moved", err, res.Redriven, redrivenIDs(t, n))
	}
}
