package tracker

import (
	"slices"
	"testing"
	"time"
)

// TestScheduledDelivery: the delivery decision for scheduled messages
// (Record.NotBefore), one table row per rule of docs/scheduling.md.
func TestScheduledDelivery(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		tick time.Duration // advance the clock to t0+tick, then Tick and Next
		want []int64       // offsets delivered at that step
	}
	for _, tc := range []struct {
		name     string
		ordering Ordering
		recs     []Record[string]
		ackFirst bool // ack each delivery as soon as it is made
		steps    []step
		// committed after the last step (offsets acked as delivered when ackFirst)
		wantNext int64
	}{
		{
			name: "not before its time, at its time",
			recs: []Record[string]{{Offset: 0, Key: "a", NotBefore: at(2 * time.Second)}},
			steps: []step{
				{0, nil}, {time.Second, nil}, {2*time.Second - 1, nil}, {2 * time.Second, []int64{0}},
			},
		},
		{
			name: "does not hold back its key's later messages",
			recs: []Record[string]{
				{Offset: 0, Key: "a", NotBefore: at(time.Second)},
				{Offset: 1, Key: "a"}, {Offset: 2, Key: "a"},
			},
			ackFirst: true,
			steps:    []step{{0, []int64{1}}, {0, []int64{2}}, {time.Second, []int64{0}}},
			wantNext: 3,
		},
		{
			name: "is not held back by its key's in-flight message",
			recs: []Record[string]{
				{Offset: 0, Key: "a"},
				{Offset: 1, Key: "a", NotBefore: at(time.Second)},
			},
			steps:    []step{{0, []int64{0}}, {time.Second, []int64{1}}},
			wantNext: 0,
		},
		{
			name: "due on arrival: at once, still outside its key's order",
			recs: []Record[string]{
				{Offset: 0, Key: "a"},
				{Offset: 1, Key: "a", NotBefore: at(-time.Hour)},
				{Offset: 2, Key: "a"},
			},
			steps: []step{{0, []int64{0, 1}}},
		},
		{
			name: "two of one key due at the same time: offset order",
			recs: []Record[string]{
				{Offset: 0, Key: "a", NotBefore: at(time.Second)},
				{Offset: 1, Key: "b", NotBefore: at(time.Second)},
				{Offset: 2, Key: "a", NotBefore: at(time.Second)},
			},
			steps: []step{{0, nil}, {time.Second, []int64{0, 1, 2}}},
		},
		{
			name: "due order, not offset order",
			recs: []Record[string]{
				{Offset: 0, Key: "a", NotBefore: at(3 * time.Second)},
				{Offset: 1, Key: "a", NotBefore: at(time.Second)},
			},
			ackFirst: true,
			steps:    []step{{time.Second, []int64{1}}, {2 * time.Second, nil}, {3 * time.Second, []int64{0}}},
			wantNext: 2,
		},
		{
			name: "the committed offset does not pass a pending scheduled message",
			recs: []Record[string]{
				{Offset: 0, Key: "a"},
				{Offset: 1, Key: "b", NotBefore: at(time.Hour)},
				{Offset: 2, Key: "c"},
			},
			ackFirst: true,
			steps:    []step{{0, []int64{0, 2}}},
			wantNext: 1,
		},
		{
			name: "in its key's order when asked: waits for the key, then for its time, holding the key",
			recs: []Record[string]{
				{Offset: 0, Key: "a"},
				{Offset: 1, Key: "a", NotBefore: at(time.Second), InKeyOrder: true},
				{Offset: 2, Key: "a"},
				{Offset: 3, Key: "b"},
			},
			ackFirst: true,
			steps:    []step{{0, []int64{0, 3}}, {0, nil}, {time.Second, []int64{1}}, {time.Second, []int64{2}}},
			wantNext: 4,
		},
		{
			name:     "partition ordering: outside it too",
			ordering: OrderPartition,
			recs: []Record[string]{
				{Offset: 0, Key: "a", NotBefore: at(time.Second)},
				{Offset: 1, Key: "b"},
				{Offset: 2, Key: "c"},
			},
			ackFirst: true,
			steps:    []step{{0, []int64{1}}, {0, []int64{2}}, {time.Second, []int64{0}}},
			wantNext: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(t, Config{Ordering: tc.ordering})
			must(t, tr.Add(t0, tc.recs...))
			mustCheck(t, tr)
			for i, st := range tc.steps {
				now := t0.Add(st.tick)
				tr.Tick(now, nil)
				ds := tr.Next(now, 100, nil)
				if got := offsets(ds); !slices.Equal(got, st.want) {
					t.Fatalf("step %d (t0+%v): delivered %v, want %v", i, st.tick, got, st.want)
				}
				for _, d := range ds {
					if d.Attempt != 1 {
						t.Fatalf("offset %d: attempt %d, want 1 (waiting for its time is not an attempt)", d.Offset, d.Attempt)
					}
					if tc.ackFirst {
						must(t, tr.Ack(now, d.Offset, d.Token))
					}
				}
				mustCheck(t, tr)
			}
			if next, _ := tr.Committed(nil); next != tc.wantNext {
				t.Fatalf("committed next = %d, want %d", next, tc.wantNext)
			}
		})
	}
}

func TestScheduledCount(t *testing.T) {
	tr := newTracker(t, Config{})
	must(t, tr.Add(t0,
		Record[string]{Offset: 0, Key: "a", NotBefore: t0.Add(time.Second)},
		Record[string]{Offset: 1, Key: "a", NotBefore: t0.Add(-time.Second)},
		Record[string]{Offset: 2, Key: "a", NotBefore: t0.Add(2 * time.Second)},
	))
	if got := tr.Scheduled(); got != 2 {
		t.Fatalf("Scheduled = %d, want 2 (the one due on arrival is not waiting)", got)
	}
	if d, ok := tr.NextDeadline(); !ok || !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextDeadline = %v, %v; want t0+1s", d, ok)
	}
	tr.Tick(t0.Add(time.Second), nil)
	if got := tr.Scheduled(); got != 1 {
		t.Fatalf("Scheduled after the first is due = %d, want 1", got)
	}
	mustCheck(t, tr)
}

// A scheduled message cancelled while it waits is finished without
// delivery (the committed offset passes it); one already due is not
// touched; a record added as cancelled is finished on arrival.
func TestScheduledCancel(t *testing.T) {
	tr := newTracker(t, Config{})
	must(t, tr.Add(t0,
		Record[string]{Offset: 0, Key: "a", Value: "s0", NotBefore: t0.Add(time.Hour)},
		Record[string]{Offset: 1, Key: "a", Value: "s1", NotBefore: t0.Add(time.Second)},
		Record[string]{Offset: 2, Key: "b", Value: "s0", NotBefore: t0.Add(time.Hour)},
		Record[string]{Offset: 3, Key: "c", Value: "x", NotBefore: t0.Add(time.Hour), Cancelled: true},
	))
	mustCheck(t, tr)
	now := t0.Add(time.Second)
	tr.Tick(now, nil)
	ds := tr.Next(now, 10, nil)
	if got := offsets(ds); !slices.Equal(got, []int64{1}) {
		t.Fatalf("delivered %v, want [1]", got)
	}
	is := func(v string) func(*string) bool { return func(x *string) bool { return *x == v } }
	if got := tr.CancelScheduled(now, is("s1"), nil); len(got) != 0 {
		t.Fatalf("cancelled %v: offset 1 was already due and delivered", got)
	}
	if got := tr.CancelScheduled(now, is("s0"), nil); !slices.Equal(got, []int64{0, 2}) {
		t.Fatalf("cancelled %v, want [0 2]", got)
	}
	mustCheck(t, tr)
	if tr.Scheduled() != 0 || tr.Pending() != 0 {
		t.Fatalf("after cancel: scheduled %d pending %d, want 0 0", tr.Scheduled(), tr.Pending())
	}
	if next, done := tr.Committed(nil); next != 1 || !slices.Equal(done, []int64{2, 3}) {
		t.Fatalf("committed %d %v, want 1 [2 3]", next, done)
	}
	must(t, tr.Ack(now, 1, ds[0].Token))
	if next, _ := tr.Committed(nil); next != 4 {
		t.Fatalf("committed %d after the ack, want 4", next)
	}
	tr.Tick(t0.Add(2*time.Hour), nil)
	if ds := tr.Next(t0.Add(2*time.Hour), 10, nil); len(ds) != 0 {
		t.Fatalf("delivered %v after the cancelled messages' time", offsets(ds))
	}
}

// A waiting scheduled message holds the window at its offset, as a parked
// key does: window_messages − 1 later records are taken, then Wants is 0
// until it is due and finished.
func TestScheduledHoldsTheWindowAtItsOffset(t *testing.T) {
	tr := newTracker(t, Config{WindowMessages: 3, MaxInFlight: 3})
	must(t, tr.Add(t0, Record[string]{Offset: 0, Key: "a", NotBefore: t0.Add(time.Hour)}, Record[string]{Offset: 1, Key: "b"}, Record[string]{Offset: 2, Key: "c"}))
	for _, d := range tr.Next(t0, 10, nil) {
		must(t, tr.Ack(t0, d.Offset, d.Token))
	}
	if w := tr.Wants(); w != 0 {
		t.Fatalf("Wants = %d with offsets 1 and 2 finished behind a waiting offset 0, want 0", w)
	}
	later := t0.Add(time.Hour)
	tr.Tick(later, nil)
	ds := tr.Next(later, 10, nil)
	if got := offsets(ds); !slices.Equal(got, []int64{0}) {
		t.Fatalf("delivered %v at its time, want [0]", got)
	}
	must(t, tr.Ack(later, 0, ds[0].Token))
	if w, _ := tr.Committed(nil); tr.Wants() != 3 || w != 3 {
		t.Fatalf("after it finished: Wants %d, committed %d; want 3, 3", tr.Wants(), w)
	}
}
