package check

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func pub(v string, seq int, off int64) Publish {
	return Publish{Value: v, Key: "k", Producer: 1, Seq: seq, Acked: true, Partition: 0, Offset: off, Invoked: t0, Done: t0.Add(time.Duration(seq) * time.Millisecond)}
}

func recs(vs ...string) []Record {
	out := make([]Record, len(vs))
	for i, v := range vs {
		out[i] = Record{Partition: 0, Offset: int64(i), Value: v}
	}
	return out
}

func both(rs []Record) map[int][]Record { return map[int][]Record{1: rs, 2: rs} }

// Each rule passes a clean history and fails one that breaks it, saying so.
func TestRules(t *testing.T) {
	a, b, c := pub("a", 0, 0), pub("b", 1, 1), pub("c", 2, 2)
	unknownA := a
	unknownA.Unknown = true
	failedX := Publish{Value: "x", Key: "k", Producer: 1, Seq: 9}
	cases := []struct {
		name string
		h    History
		want string // "" passes; else a violation containing it
	}{
		{"clean", History{Publishes: []Publish{a, b, c}, Logs: both(recs("a", "b", "c"))}, ""},
		{"lost", History{Publishes: []Publish{a, b, c}, Logs: both(recs("a", "b"))}, "LOST: \"c\""},
		{"acked offset holds another", History{Publishes: []Publish{a, b, c}, Logs: both(recs("a", "c", "b"))}, "LOST: \"b\" acknowledged at 0/1"},
		{"replicas differ", History{Publishes: []Publish{a, b}, Logs: map[int][]Record{1: recs("a", "b"), 2: recs("a")}}, "replicas differ"},
		{"duplicate of a known outcome", History{Publishes: []Publish{a, b}, Logs: both(recs("a", "b", "a"))}, "stored 2 times"},
		{"duplicate of an unknown outcome", History{Publishes: []Publish{unknownA}, Logs: both(recs("a", "a"))}, ""},
		{"a failed publish stored", History{Publishes: []Publish{a, failedX}, Logs: both(recs("a", "x"))}, "definitely failed"},
		{"nobody published it", History{Publishes: []Publish{a}, Logs: both(recs("a", "z"))}, "nobody published"},
		{"stale copy after a later message", History{Publishes: []Publish{{Value: "a", Key: "k", Producer: 1, Seq: 0, Acked: true, Offset: 0, Unknown: true}, pub("b", 1, 1)}, Logs: both(recs("a", "b", "a"))}, "REORDERED"},
		{"acked out of order", History{Publishes: []Publish{pub("a", 0, 1), pub("b", 1, 0)}, Logs: both(recs("b", "a"))}, "REORDERED"},
		{"completed twice", History{Publishes: []Publish{a}, Logs: both(recs("a")),
			Completions: []Completion{{Value: "a", Node: 1, Token: 1, At: t0}, {Value: "a", Node: 2, Token: 2, At: t0.Add(time.Second)}}}, "COMPLETED TWICE"},
		{"completed twice across a kill -9", History{Publishes: []Publish{a}, Logs: both(recs("a")),
			Completions: []Completion{{Value: "a", Node: 1, Token: 1, At: t0}, {Value: "a", Node: 2, Token: 2, At: t0.Add(3 * time.Second)}},
			Faults:      []Fault{{Node: 1, From: t0.Add(100 * time.Millisecond), To: t0.Add(4 * time.Second)}}}, ""},
		{"completed during a pause, then again", History{Publishes: []Publish{a}, Logs: both(recs("a")),
			Completions: []Completion{{Value: "a", Node: 1, Token: 1, At: t0.Add(2 * time.Second)}, {Value: "a", Node: 2, Token: 2, At: t0.Add(3 * time.Second)}},
			Faults:      []Fault{{Node: 1, From: t0, To: t0.Add(4 * time.Second)}}}, ""},
		{"completed twice, the fault long after", History{Publishes: []Publish{a}, Logs: both(recs("a")),
			Completions: []Completion{{Value: "a", Node: 1, Token: 1, At: t0}, {Value: "a", Node: 2, Token: 2, At: t0.Add(3 * time.Second)}},
			Faults:      []Fault{{Node: 1, From: t0.Add(2 * time.Second), To: t0.Add(4 * time.Second)}}}, "COMPLETED TWICE"},
		{"completed after the heal by the old owner", History{Publishes: []Publish{a}, Logs: both(recs("a")),
			Completions: []Completion{{Value: "a", Node: 2, Token: 2, At: t0.Add(3 * time.Second)}, {Value: "a", Node: 1, Token: 1, At: t0.Add(5 * time.Second)}},
			Faults:      []Fault{{Node: 1, From: t0, To: t0.Add(4 * time.Second)}}}, "COMPLETED TWICE"},
		{"no log read", History{Publishes: []Publish{a}}, "no node's log"},
		{"real-time order across producers", History{Publishes: []Publish{
			{Value: "a", Key: "k1", Producer: 1, Acked: true, Offset: 1, Invoked: t0, Done: t0.Add(time.Millisecond)},
			{Value: "b", Key: "k2", Producer: 2, Acked: true, Offset: 0, Invoked: t0.Add(2 * time.Millisecond), Done: t0.Add(3 * time.Millisecond)},
		}, Logs: both(recs("b", "a"))}, "NOT LINEARIZABLE"},
		{"concurrent publishes in either order", History{Publishes: []Publish{
			{Value: "a", Key: "k1", Producer: 1, Acked: true, Offset: 1, Invoked: t0, Done: t0.Add(3 * time.Millisecond)},
			{Value: "b", Key: "k2", Producer: 2, Acked: true, Offset: 0, Invoked: t0.Add(time.Millisecond), Done: t0.Add(2 * time.Millisecond)},
		}, Logs: both(recs("b", "a"))}, ""},
	}
	for _, tc := range cases {
		r := Check(tc.h)
		got := strings.Join(r.Violations, "\n")
		switch {
		case tc.want == "" && !r.OK():
			t.Errorf("%s: want no violation, got:\n%s", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: want a violation with %q, got:\n%s", tc.name, tc.want, got)
		}
	}
}

// The figures: acknowledged, lost, duplicated, the longest gap between
// acknowledgements and from a heal to the next acknowledgement.
func TestFigures(t *testing.T) {
	a := pub("a", 0, 0)
	a.Unknown = true
	b, c := pub("b", 1, 2), pub("c", 2, 3)
	c.Done = b.Done.Add(5 * time.Second)
	healed := b.Done.Add(2 * time.Second)
	r := Check(History{Publishes: []Publish{a, b, c, pub("d", 3, 9)}, Logs: both(recs("a", "a", "b", "c")), Faults: []Fault{{Node: 1, From: b.Done, To: healed}}})
	if r.Acked != 4 || r.Lost != 1 || r.Duplicated != 1 || r.LongestPublishGap < 4900*time.Millisecond || r.LongestRecovery != c.Done.Sub(healed) {
		t.Fatalf("got %+v; want 4 acknowledged, 1 lost (d), 1 duplicated (a), a 5 s gap, 3 s from the heal to c", r)
	}
}
