package scheduled

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/schedule"
)

// memLog is a topic "t" held in memory: what the Engine interface needs.
type memLog struct{ parts [][]engine.Record }

func (l *memLog) Partitions(topic string) (int32, error) {
	if topic != "t" {
		return 0, apierr.New(apierr.UnknownTopic, "no topic %q", topic)
	}
	return int32(len(l.parts)), nil
}

func (l *memLog) Offsets(_ string, p int32) (int64, int64, error) {
	return 0, int64(len(l.parts[p])), nil
}

func (l *memLog) Fetch(_ string, p int32, offset int64, _ int, dst []engine.Record) ([]engine.Record, error) {
	recs := l.parts[p]
	end := min(int(offset)+1000, len(recs)) // a read returns a bounded run
	return append(dst, recs[offset:end]...), nil
}

func (l *memLog) Produce(_ string, p int32, recs []engine.Record, done func(int64, error)) {
	base := int64(len(l.parts[p]))
	for _, r := range recs {
		r.Offset = int64(len(l.parts[p]))
		l.parts[p] = append(l.parts[p], r)
	}
	done(base, nil)
}

var now = time.UnixMilli(1_800_000_000_000)

func (l *memLog) add(p int32, id string, at time.Time) {
	r := engine.Record{Offset: int64(len(l.parts[p])), ID: []byte(id), Key: []byte("k-" + id), Value: []byte("payload")}
	if !at.IsZero() {
		r.Headers = []engine.Header{{Key: schedule.Header, Value: schedule.Format(at)}}
	}
	l.parts[p] = append(l.parts[p], r)
}

func newServer(l *memLog) *Server {
	s := New(l)
	s.now = func() time.Time { return now }
	return s
}

func listAll(t *testing.T, s *Server, limit uint32) (ids []string, pages int) {
	t.Helper()
	cur := ""
	for {
		resp, err := s.List(context.Background(), &spoolv1.ListScheduledRequest{Topic: "t", Limit: limit, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, m := range resp.GetMessages() {
			ids = append(ids, m.GetId())
		}
		if cur = resp.GetNextCursor(); cur == "" {
			return ids, pages
		}
	}
}

// Pages cover every scheduled message not yet due exactly once, in
// partition and offset order; plain, due and cancelled ones are left out.
func TestListPages(t *testing.T) {
	l := &memLog{parts: make([][]engine.Record, 3)}
	l.add(0, "a", now.Add(time.Hour))
	l.add(0, "plain", time.Time{})
	l.add(0, "due", now.Add(-time.Second))
	l.add(0, "b", now.Add(time.Minute))
	l.add(2, "c", now.Add(time.Hour))
	l.add(2, "gone", now.Add(time.Hour))
	l.add(2, "d", now.Add(time.Hour))
	s := newServer(l)
	if _, err := s.Cancel(context.Background(), &spoolv1.CancelScheduledRequest{Topic: "t", Id: "gone"}); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []uint32{1, 2, 3, 100} {
		ids, pages := listAll(t, s, limit)
		if !slices.Equal(ids, []string{"a", "b", "c", "d"}) {
			t.Errorf("limit %d: listed %v in %d pages, want a b c d", limit, ids, pages)
		}
	}
	if _, err := s.List(context.Background(), &spoolv1.ListScheduledRequest{Topic: "t", Cursor: "3:0"}); apierr.Classify(err) != apierr.InvalidCursor {
		t.Errorf("cursor of a partition the topic lacks: %v, want INVALID_CURSOR", err)
	}
}

// One call reads at most ScanRecordsPerCall records: past a long run of
// plain messages the page is empty, with a cursor that goes on.
func TestListStopsAtTheScanBudget(t *testing.T) {
	l := &memLog{parts: make([][]engine.Record, 1)}
	for i := range ScanRecordsPerCall + 10 {
		l.add(0, fmt.Sprint("p", i), time.Time{})
	}
	l.add(0, "late", now.Add(time.Hour))
	s := newServer(l)
	resp, err := s.List(context.Background(), &spoolv1.ListScheduledRequest{Topic: "t"})
	if err != nil || len(resp.GetMessages()) != 0 || resp.GetNextCursor() != fmt.Sprintf("0:%d", ScanRecordsPerCall) {
		t.Fatalf("first page %v, %v; want empty with cursor 0:%d", resp, err, ScanRecordsPerCall)
	}
	if ids, _ := listAll(t, s, 0); !slices.Equal(ids, []string{"late"}) {
		t.Fatalf("listed %v, want late", ids)
	}
}

// Cancel finds the message (by position, key or search), refuses what it
// cannot cancel, and appends a cancel record beside it.
func TestCancel(t *testing.T) {
	l := &memLog{parts: make([][]engine.Record, 2)}
	l.add(1, "plain", time.Time{})
	l.add(1, "s", now.Add(time.Hour))
	l.add(1, "due", now)
	s := newServer(l)
	ctx := context.Background()
	off := func(o int64) *int64 { return &o }
	part := func(p int32) *int32 { return &p }
	for _, tc := range []struct {
		name   string
		req    *spoolv1.CancelScheduledRequest
		reason apierr.Reason
	}{
		{"unknown", &spoolv1.CancelScheduledRequest{Topic: "t", Id: "nope"}, apierr.UnknownScheduled},
		{"plain", &spoolv1.CancelScheduledRequest{Topic: "t", Id: "plain"}, apierr.UnknownScheduled},
		{"due", &spoolv1.CancelScheduledRequest{Topic: "t", Id: "due"}, apierr.ScheduleDue},
		{"wrong position", &spoolv1.CancelScheduledRequest{Topic: "t", Id: "s", Partition: part(1), Offset: off(0)}, apierr.UnknownScheduled},
		{"half a position", &spoolv1.CancelScheduledRequest{Topic: "t", Id: "s", Partition: part(1)}, apierr.InvalidRequest},
		{"no such partition", &spoolv1.CancelScheduledRequest{Topic: "t", Id: "s", Partition: part(5), Offset: off(0)}, apierr.BadPartition},
		{"no id", &spoolv1.CancelScheduledRequest{Topic: "t"}, apierr.InvalidRequest},
		{"unknown topic", &spoolv1.CancelScheduledRequest{Topic: "u", Id: "s"}, apierr.UnknownTopic},
	} {
		if _, err := s.Cancel(ctx, tc.req); apierr.Classify(err) != tc.reason {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.reason)
		}
	}
	if len(l.parts[1]) != 3 {
		t.Fatalf("refused cancels wrote %d records", len(l.parts[1])-3)
	}
	resp, err := s.Cancel(ctx, &spoolv1.CancelScheduledRequest{Topic: "t", Id: "s", Partition: part(1), Offset: off(1)})
	if err != nil || resp.GetPartition() != 1 || resp.GetOffset() != 1 || resp.GetDeliverAtMs() != now.Add(time.Hour).UnixMilli() {
		t.Fatalf("cancel = %v, %v", resp, err)
	}
	c := l.parts[1][3]
	if id, ok := schedule.CancelOf(&c); !ok || id != "s" || string(c.Key) != "k-s" || len(c.Value) != 0 {
		t.Fatalf("cancel record %+v: want header for s, the message's key, no payload", c)
	}
	if _, err := s.Cancel(ctx, &spoolv1.CancelScheduledRequest{Topic: "t", Id: "s"}); err != nil {
		t.Fatalf("cancel again, by a search of every partition: %v (cancelling twice is not an error)", err)
	}
}
