package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// writeMany writes n entries of the group to partition 0 of the
// dead-letter topic, entry i dead-lettered (and appended) at t0 + i×every,
// in batches of 50.
func writeMany(t *testing.T, eng Engine, n int, every time.Duration, mk func(i int) dl) {
	t.Helper()
	var recs []engine.Record
	for i := range n {
		d := mk(i)
		d.group, d.topic = group, topic
		if d.reason == "" {
			d.reason = "max_attempts_exceeded"
		}
		recs = append(recs, dlRecordAt(d, i, t0.Add(time.Duration(i)*every)))
		if len(recs) == 50 || i == n-1 {
			produce(t, eng, dlqTopic, 0, recs...)
			recs = nil
		}
	}
}

// peekAll pages through with limit entries per call and returns the ids in
// the order read, and the number of calls.
func peekAll(t *testing.T, eng Engine, q Query, limit int) (ids []string, calls int) {
	t.Helper()
	for {
		calls++
		page, err := Peek(eng, q, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Entries) > limit {
			t.Fatalf("a page of %d entries, limit %d", len(page.Entries), limit)
		}
		for _, e := range page.Entries {
			ids = append(ids, e.GetMessage().GetMessageId())
		}
		if page.NextCursor == "" {
			if page.Progress.GetRead() != page.Progress.GetTotal() {
				t.Fatalf("the last page says %d of %d read", page.Progress.GetRead(), page.Progress.GetTotal())
			}
			return ids, calls
		}
		q.Cursor = page.NextCursor
		if calls > 10_000 {
			t.Fatal("paging does not end")
		}
	}
}

// Paging with the cursor returns every matching entry once, in order, and
// ends; entries appended after the first page are not part of that read.
func TestPeekPagesWithACursor(t *testing.T) {
	n := newNode(t)
	writeMany(t, n, 95, time.Second, func(i int) dl { return dl{id: fmt.Sprint("m", i), key: fmt.Sprint("k", i%3)} })
	var want []string
	for i := range 95 {
		want = append(want, fmt.Sprint("m", i))
	}
	got, calls := peekAll(t, n, Query{Group: group, DLQTopic: dlqTopic}, 10)
	if !slices.Equal(got, want) || calls != 10 {
		t.Fatalf("paged read: %d calls, ids %v; want 10 calls, m0..m94 in order", calls, got)
	}

	// A filter that matches a third: pages still bounded, nothing twice.
	got, _ = peekAll(t, n, Query{Group: group, DLQTopic: dlqTopic, Filter: &spoolv1.DeadLetterFilter{Key: []byte("k1")}}, 7)
	if len(got) != 32 || got[0] != "m1" || got[31] != "m94" {
		t.Fatalf("key k1: %v", got)
	}

	// The first page pins the end: what arrives later is for the next read.
	page, err := Peek(n, Query{Group: group, DLQTopic: dlqTopic}, 50)
	if err != nil {
		t.Fatal(err)
	}
	produce(t, n, dlqTopic, 0, dlRecord(dl{id: "late", group: group, topic: topic, reason: "r"}, 200))
	rest, _ := peekAll(t, n, Query{Group: group, DLQTopic: dlqTopic, Cursor: page.NextCursor}, 50)
	if len(page.Entries)+len(rest) != 95 || slices.Contains(rest, "late") {
		t.Fatalf("after the first page, %d more entries (late one included: %v); want 45 and not it", len(rest), slices.Contains(rest, "late"))
	}
	if all, _ := peekAll(t, n, Query{Group: group, DLQTopic: dlqTopic}, 1000); len(all) != 96 {
		t.Fatalf("a new read sees %d entries, want 96", len(all))
	}
}

// A cursor that this code did not make, or made for another dead-letter
// topic, is refused with ErrBadCursor.
func TestPeekRefusesBadCursors(t *testing.T) {
	n := newNode(t)
	writeDLQ(t, n, fiveEntries()...)
	page, err := Peek(n, Query{Group: group, DLQTopic: dlqTopic}, 1)
	if err != nil || page.NextCursor == "" {
		t.Fatalf("first page: %v, cursor %q", err, page.NextCursor)
	}
	other := cursor{next: []int64{0, 0, 0}, stop: []int64{1, 1, 1}}.String() // 3 partitions, the topic has 2
	damaged := page.NextCursor[:len(page.NextCursor)-2] + "AA"
	for _, c := range []string{"nope", "c1.!!", damaged, other, cursorPrefix} {
		if _, err := Peek(n, Query{Group: group, DLQTopic: dlqTopic, Cursor: c}, 1); !errors.Is(err, ErrBadCursor) {
			t.Errorf("Peek with cursor %q: %v, want ErrBadCursor", c, err)
		}
	}
}

// fetchCounter counts the records reads of the dead-letter topic return
// and the lowest offset asked for.
type fetchCounter struct {
	Engine
	mu      sync.Mutex
	records int
	lowest  int64
}

func (c *fetchCounter) Fetch(tp string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error) {
	recs, err := c.Engine.Fetch(tp, p, offset, maxBytes, dst)
	if tp == dlqTopic {
		c.mu.Lock()
		c.records += len(recs) - len(dst)
		c.lowest = min(c.lowest, offset)
		c.mu.Unlock()
	}
	return recs, err
}

// One call reads a bounded part of the topic, whatever it holds: a filter
// that matches nothing returns an empty page with a cursor after its
// budget, and a time range starts at the time index's offset instead of
// the log start.
func TestPeekCostIsBoundedByThePage(t *testing.T) {
	n := newNode(t)
	const entries = 2000
	// Entries two minutes apart (more than IndexSlack), with 2 KiB
	// payloads so that one read from the log returns a few hundred.
	writeMany(t, n, entries, 2*time.Minute, func(i int) dl {
		return dl{id: fmt.Sprint("m", i), key: "k", value: []byte(strings.Repeat("x", 2048))}
	})
	c := &fetchCounter{Engine: n, lowest: 1 << 62}
	page, err := Peek(c, Query{Group: group, DLQTopic: dlqTopic, Filter: &spoolv1.DeadLetterFilter{Reason: "none"}, ScanRecords: 100}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 0 || page.NextCursor == "" || page.Progress.GetRead() != 100 || page.Progress.GetTotal() != entries {
		t.Fatalf("page: %d entries, cursor %q, progress %v; want none, a cursor, 100 of %d", len(page.Entries), page.NextCursor, page.Progress, entries)
	}
	if c.records >= entries/2 {
		t.Fatalf("one call with a budget of 100 records read %d of %d", c.records, entries)
	}
	readWhole := c.records

	// The last 10 entries by time: the index finds them.
	c = &fetchCounter{Engine: n, lowest: 1 << 62}
	from := t0.Add((entries - 10) * 2 * time.Minute)
	page, err = Peek(c, Query{Group: group, DLQTopic: dlqTopic, Filter: &spoolv1.DeadLetterFilter{FromTimeMs: from.UnixMilli()}}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 10 || page.Entries[0].GetMessage().GetMessageId() != fmt.Sprint("m", entries-10) || page.NextCursor != "" {
		t.Fatalf("from time: %d entries (first %v), cursor %q; want the last 10", len(page.Entries), page.Entries, page.NextCursor)
	}
	lastTen := c.records
	if c.lowest < entries-11 || c.records > 11 {
		t.Fatalf("from time: read %d records from offset %d; want at most 11 from offset %d on (the time index)", c.records, c.lowest, entries-11)
	}
	// And a closed time range in the middle.
	c = &fetchCounter{Engine: n, lowest: 1 << 62}
	page, err = Peek(c, Query{Group: group, DLQTopic: dlqTopic, Filter: &spoolv1.DeadLetterFilter{
		FromTimeMs: t0.Add(1000 * 2 * time.Minute).UnixMilli(), ToTimeMs: t0.Add(1005 * 2 * time.Minute).UnixMilli()}}, 100)
	if err != nil || len(page.Entries) != 5 || page.Progress.GetTotal() > 7 {
		t.Fatalf("time range: %d entries, progress %v, %v; want 5 within a range of about 5 records", len(page.Entries), page.Progress, err)
	}
	t.Logf("records returned by the log: %d for a budget of 100, %d for the last 10 by time, %d for a range of 5 (one read of FetchBytes)", readWhole, lastTen, c.records)
}

// A purge hides the entries below its mark from peek, summaries and
// redrive; the mark never moves back; a dry run writes nothing.
func TestPurge(t *testing.T) {
	n := newNode(t)
	writeMany(t, n, 10, time.Minute*2, func(i int) dl { return dl{id: fmt.Sprint("m", i), key: "k"} })
	count := func() int {
		ids, _ := peekAll(t, n, Query{Group: group, DLQTopic: dlqTopic}, 100)
		return len(ids)
	}
	res, err := Purge(n, group, dlqTopic, t0.Add(4*2*time.Minute), true)
	if err != nil || res.Purged != 4 || count() != 10 {
		t.Fatalf("dry run: %v, %v; %d left; want 4 would be purged and 10 left", res, err, count())
	}
	if res, err = Purge(n, group, dlqTopic, t0.Add(4*2*time.Minute), false); err != nil || res.Purged != 4 {
		t.Fatalf("purge before m4: %v, %v", res, err)
	}
	if p0 := res.Partitions[0]; p0.PurgedBefore != 0 || p0.PurgedUpTo != 4 || p0.EndOffset != 10 {
		t.Fatalf("partition 0 after the purge: %v", p0)
	}
	ids, _ := peekAll(t, n, Query{Group: group, DLQTopic: dlqTopic}, 100)
	if len(ids) != 6 || ids[0] != "m4" {
		t.Fatalf("after purging before m4: %v", ids)
	}
	// An earlier time does not move the mark back.
	if res, err = Purge(n, group, dlqTopic, t0, false); err != nil || res.Purged != 0 || res.Partitions[0].PurgedUpTo != 4 {
		t.Fatalf("purge before an earlier time: %v, %v; want nothing purged, mark still 4", res, err)
	}
	sum, err := Summarize(n, Query{Group: group, DLQTopic: dlqTopic}, 0)
	if err != nil || sum.Matched != 6 {
		t.Fatalf("summary after the purge: %v, %v", sum, err)
	}
	rr, err := Redrive(context.Background(), n, nil, Request{Group: group, Topic: topic, DLQTopic: dlqTopic, RatePerS: MaxRatePerS}, Counters{})
	if err != nil || rr.Redriven != 6 {
		t.Fatalf("redrive after the purge: %+v, %v; want the 6 not purged", rr, err)
	}
	// Everything.
	if res, err = Purge(n, group, dlqTopic, time.Time{}, false); err != nil || res.Purged != 6 || count() != 0 {
		t.Fatalf("purge all: %v, %v, %d left", res, err, count())
	}
	// Other groups' marks are their own.
	if page, err := Peek(n, Query{Group: "audit", DLQTopic: dlqTopic}, 10); err != nil || page.Progress.GetTotal() != 10 {
		t.Fatalf("another group's view after the purge: %v, %v; want the whole topic", page.Progress, err)
	}
}

// A summary counts by reason, key and hour, and counts of successive pages
// add up to those of one call.
func TestSummarize(t *testing.T) {
	n := newNode(t)
	writeMany(t, n, 120, time.Minute, func(i int) dl {
		reason := "timeout"
		if i%4 == 0 {
			reason = "invalid email address"
		}
		return dl{id: fmt.Sprint("m", i), key: fmt.Sprint("user-", i%5), reason: reason}
	})
	s, err := Summarize(n, Query{Group: group, DLQTopic: dlqTopic}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if s.Matched != 120 || s.NextCursor != "" || len(s.ByReason) != 2 || s.ByReason[0].Reason != "timeout" || s.ByReason[0].Count != 90 || s.ByReason[1].Count != 30 {
		t.Fatalf("summary: %v", s)
	}
	if len(s.ByKey) != 2 || s.ByKey[0].Count != 24 || string(s.ByKey[0].Key) != "user-0" || s.OtherKeys != 3 {
		t.Fatalf("keys: %v, other %d", s.ByKey, s.OtherKeys)
	}
	if len(s.ByHour) != 2 || s.ByHour[0].Count != 60 || s.ByHour[0].HourStartMs != t0.UnixMilli() || s.OldestMs != t0.UnixMilli() || s.NewestMs != t0.Add(119*time.Minute).UnixMilli() {
		t.Fatalf("hours: %v, oldest %d newest %d", s.ByHour, s.OldestMs, s.NewestMs)
	}
	var matched, calls uint64
	q := Query{Group: group, DLQTopic: dlqTopic, Filter: &spoolv1.DeadLetterFilter{Reason: "timeout"}, ScanRecords: 25}
	for {
		calls++
		s, err := Summarize(n, q, 0)
		if err != nil {
			t.Fatal(err)
		}
		matched += s.Matched
		if q.Cursor = s.NextCursor; q.Cursor == "" {
			break
		}
	}
	if matched != 90 || calls != 5 {
		t.Fatalf("paged summary: %d matched in %d calls, want 90 in 5", matched, calls)
	}
}

// A redrive in calls of Limit entries, each going on from the previous
// cursor, moves every entry once and ends.
func TestRedriveWithACursor(t *testing.T) {
	n := newNode(t)
	writeMany(t, n, 23, time.Second, func(i int) dl { return dl{id: fmt.Sprint("m", i), key: fmt.Sprint("k", i)} })
	var cur string
	var moved uint64
	for calls := 1; ; calls++ {
		res, err := Redrive(context.Background(), n, nil, Request{Group: group, Topic: topic, DLQTopic: dlqTopic, RatePerS: MaxRatePerS, Limit: 5, Cursor: cur}, Counters{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Matched > 5 {
			t.Fatalf("a call with limit 5 matched %d", res.Matched)
		}
		moved += res.Redriven
		if res.Progress.GetTotal() != 23 {
			t.Fatalf("progress %v, want a total of 23", res.Progress)
		}
		if cur = res.NextCursor; cur == "" {
			break
		}
		if calls > 10 {
			t.Fatal("the redrive does not end")
		}
	}
	if got := redrivenIDs(t, n); moved != 23 || len(got) != 23 || len(slices.Compact(got)) != 23 {
		t.Fatalf("moved %d, topic holds %d (%d distinct); want 23 once each", moved, len(got), len(slices.Compact(got)))
	}
}
