package check

import (
	"cmp"
	"fmt"
	"slices"
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
		{"completed twice around a graceful restart", History{Publishes: []Publish{a}, Logs: both(recs("a")),
			Completions: []Completion{{Value: "a", Node: 1, Token: 1, At: t0.Add(2 * time.Second)}, {Value: "a", Node: 2, Token: 2, At: t0.Add(3 * time.Second)}},
			Faults:      []Fault{{Node: 1, From: t0, To: t0.Add(4 * time.Second), Graceful: true}}}, "COMPLETED TWICE"},
		{"completed while the ledger was down, then again", History{Publishes: []Publish{a}, Logs: both(recs("a")),
			Completions: []Completion{{Value: "a", Node: 1, Token: 1, At: t0.Add(time.Second)}, {Value: "a", Node: 2, Token: 2, At: t0.Add(5 * time.Second)}},
			Faults:      []Fault{{Node: -1, Ledger: true, From: t0, To: t0.Add(3 * time.Second)}}}, ""},
		{"completed twice after the ledger came back", History{Publishes: []Publish{a}, Logs: both(recs("a")),
			Completions: []Completion{{Value: "a", Node: 1, Token: 1, At: t0.Add(4 * time.Second)}, {Value: "a", Node: 2, Token: 2, At: t0.Add(5 * time.Second)}},
			Faults:      []Fault{{Node: -1, Ledger: true, From: t0, To: t0.Add(3 * time.Second)}}}, "COMPLETED TWICE"},
		{"acknowledged while a majority was down", History{Publishes: []Publish{at("a", 0, 0, 1500, 1600)}, Logs: both(recs("a")),
			Faults: []Fault{{Node: 0, From: t0.Add(time.Second), QuorumLost: t0.Add(1100 * time.Millisecond), To: t0.Add(4 * time.Second)}}}, "ACKNOWLEDGED WITHOUT A QUORUM"},
		{"invoked before the majority went down", History{Publishes: []Publish{at("a", 0, 0, 1050, 1600)}, Logs: both(recs("a")),
			Faults: []Fault{{Node: 0, From: t0.Add(time.Second), QuorumLost: t0.Add(1100 * time.Millisecond), To: t0.Add(4 * time.Second)}}}, ""},
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

// probes builds a history of acknowledged probes, one per (sidecar,
// partition, delay after t0): its log holds each at its offset.
type probeAt struct {
	sidecar   int
	partition int32
	invoked   time.Duration // after t0
	done      time.Duration
}

func probeHistory(faults []Fault, ps ...probeAt) History {
	h := History{Logs: map[int][]Record{}, Faults: faults, Sidecars: 2, Partitions: 2}
	next := map[int32]int64{}
	var log []Record
	for i, p := range ps {
		v := fmt.Sprintf("probe-%d", i)
		off := next[p.partition]
		next[p.partition]++
		h.Publishes = append(h.Publishes, Publish{Value: v, Key: v, Producer: 100 + i, Acked: true, Partition: p.partition, Offset: off,
			Invoked: t0.Add(p.invoked), Done: t0.Add(p.done), Probe: true, Sidecar: p.sidecar})
		log = append(log, Record{Partition: p.partition, Offset: off, Value: v})
	}
	slices.SortFunc(log, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	h.Logs[0], h.Logs[1] = log, log
	return h
}

// After every network heal each sidecar publishes to every partition
// within HealPublishBound: a crafted history per way to break it.
func TestHealPublish(t *testing.T) {
	s := time.Second
	healed := []Fault{{Node: 0, From: t0, To: t0.Add(10 * s), Network: true}}
	degraded := []Fault{{Node: 0, From: t0, To: t0.Add(10 * s), Degraded: true}}
	all := func(done time.Duration) []probeAt { // invoked 1 s before done
		return []probeAt{{0, 0, done - s, done}, {0, 1, done - s, done}, {1, 0, done - s, done}, {1, 1, done - s, done}}
	}
	slowOne := append(all(11*s), probeAt{1, 1, 10 * s, 15 * s})
	slowOne = slices.Delete(slowOne, 3, 4)
	cases := []struct {
		name    string
		h       History
		want    string        // "" passes; else a violation containing it
		longest time.Duration // LongestHealPublish
		unjudge int
	}{
		{"every pair within the bound", probeHistory(healed, all(11*s)...), "", s, 0},
		{"one pair late", probeHistory(healed, slowOne...), "SLOW PUBLISH AFTER HEAL: sidecar 1, partition 1: first probe acknowledged 5s", 5 * s, 0},
		{"one pair never", probeHistory(healed, all(11 * s)[:3]...), "NO PUBLISH AFTER HEAL: sidecar 1, partition 1", s, 0},
		{"only a probe invoked before the heal", probeHistory(healed, append(all(11 * s)[:3], probeAt{1, 1, 9 * s, 10*s + 100*time.Millisecond})...), "NO PUBLISH AFTER HEAL: sidecar 1, partition 1", s, 0},
		{"a kill -9: figure, no rule", probeHistory([]Fault{{Node: 0, From: t0, To: t0.Add(10 * s)}}, slowOne...), "", 5 * s, 0},
		{"the next fault first", probeHistory(append(slices.Clone(healed), Fault{Node: 1, From: t0.Add(12 * s), To: t0.Add(20 * s), Network: true}), append(slowOne, all(21*s)...)...), "", s, 1},
		// A full disk: judged from its start (the probes at 1 s) and from its
		// end (those at 11 s).
		{"a full disk: every pair during and after", probeHistory(degraded, append(all(s), all(11*s)...)...), "", s, 0},
		{"a full disk: one pair stuck during it", probeHistory(degraded, append(all(s)[:3], all(11*s)...)...), "SLOW PUBLISH AFTER FAULT: sidecar 1, partition 1: first probe acknowledged 11s after node 0's fault", 11 * s, 0},
		{"the next fault after the bound", probeHistory(append(slices.Clone(healed), Fault{Node: 1, From: t0.Add(15 * s), To: t0.Add(20 * s), Network: true}), append(slowOne, all(21*s)...)...), "SLOW PUBLISH AFTER HEAL", 5 * s, 0},
	}
	for _, tc := range cases {
		r := Check(tc.h)
		got := strings.Join(r.Violations, "\n")
		switch {
		case tc.want == "" && !r.OK():
			t.Errorf("%s: want no violation, got:\n%s", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: want a violation with %q, got:\n%s", tc.name, tc.want, got)
		case r.LongestHealPublish != tc.longest || r.UnjudgedHeals != tc.unjudge:
			t.Errorf("%s: longest %v, unjudged %d; want %v, %d", tc.name, r.LongestHealPublish, r.UnjudgedHeals, tc.longest, tc.unjudge)
		}
	}
}

// The consumers' pause: the longest wait from an acknowledgement to the
// first completion of that message.
func TestLongestToCompletion(t *testing.T) {
	a, b := pub("a", 0, 0), pub("b", 1, 1)
	r := Check(History{Publishes: []Publish{a, b}, Logs: both(recs("a", "b")), Completions: []Completion{
		{Value: "a", Node: 1, Token: 1, At: a.Done.Add(time.Second)},
		{Value: "b", Node: 1, Token: 1, At: b.Done.Add(3 * time.Second)},
		{Value: "b", Node: 2, Token: 2, At: b.Done.Add(9 * time.Second)}, // a second completion: not the wait
	}})
	if r.LongestToCompletion != 3*time.Second || r.LongestToCompletionValue != "b" {
		t.Fatalf("longest to completion %v (%q), want 3s (b)", r.LongestToCompletion, r.LongestToCompletionValue)
	}
}
