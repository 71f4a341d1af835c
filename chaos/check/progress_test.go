package check

import (
	"strings"
	"testing"
	"time"
)

// What clients read of offsets never goes back: a crafted history per way
// to break each rule, and the ones that must pass.
func TestProgressNeverGoesBack(t *testing.T) {
	ms := time.Millisecond
	a := pub("a", 0, 0)
	base := History{Publishes: []Publish{a}, Logs: both(recs("a"))}
	off := func(obs int, at time.Duration, start, end int64) OffsetsSeen {
		return OffsetsSeen{Observer: obs, Partition: 0, At: t0.Add(at), Start: start, End: end}
	}
	com := func(obs int, at time.Duration, o int64) CommittedSeen {
		return CommittedSeen{Observer: obs, Group: "g", Partition: 0, At: t0.Add(at), Offset: o}
	}
	cases := []struct {
		name      string
		offsets   []OffsetsSeen
		committed []CommittedSeen
		resets    []Reset
		want      string // "" passes
		restarts  int    // BackAfterRestart
	}{
		{"offsets move forward", []OffsetsSeen{off(0, 0, 0, 5), off(0, 100*ms, 0, 5), off(0, 200*ms, 2, 9)}, nil, nil, "", 0},
		{"a lagging follower is another sidecar", []OffsetsSeen{off(0, 0, 0, 9), off(1, 100*ms, 0, 5)}, nil, nil, "", 0},
		{"high watermark back", []OffsetsSeen{off(0, 0, 0, 9), off(0, 100*ms, 0, 5)}, nil, nil, "HIGH WATERMARK WENT BACK: sidecar 0, partition 0: 9 at", 0},
		{"high watermark back, answers out of order", []OffsetsSeen{off(0, 100*ms, 0, 5), off(0, 0, 0, 9)}, nil, nil, "HIGH WATERMARK WENT BACK", 0},
		{"log start back", []OffsetsSeen{off(0, 0, 3, 9), off(0, 100*ms, 0, 9)}, nil, nil, "LOG START WENT BACK: sidecar 0, partition 0: 3 at", 0},
		{"committed moves forward", nil, []CommittedSeen{com(0, 0, 1), com(0, 100*ms, 1), com(0, 200*ms, 4)}, nil, "", 0},
		{"committed back", nil, []CommittedSeen{com(0, 0, 4), com(0, 100*ms, 2)}, nil, "COMMITTED OFFSET WENT BACK: group \"g\", partition 0, through sidecar 0: 4 at", 0},
		{"committed back by a reset", nil, []CommittedSeen{com(0, 0, 4), com(0, 100*ms, 2)}, []Reset{{Group: "g", From: t0.Add(40 * ms), To: t0.Add(60 * ms)}}, "", 0},
		{"a reset of another group", nil, []CommittedSeen{com(0, 0, 4), com(0, 100*ms, 2)}, []Reset{{Group: "h", From: t0.Add(40 * ms), To: t0.Add(60 * ms)}}, "COMMITTED OFFSET WENT BACK", 0},
		{"a reset after both reads", nil, []CommittedSeen{com(0, 0, 4), com(0, 100*ms, 2)}, []Reset{{Group: "g", From: t0.Add(140 * ms), To: t0.Add(160 * ms)}}, "COMMITTED OFFSET WENT BACK", 0},
		{"back across the sidecar's restart: counted", []OffsetsSeen{off(0, 0, 0, 9), {Observer: 0, Run: 1, At: t0.Add(100 * ms), End: 5}}, []CommittedSeen{com(0, 0, 4), {Observer: 0, Run: 1, Group: "g", At: t0.Add(100 * ms), Offset: 2}}, nil, "", 2},
		{"back after the restart", []OffsetsSeen{{Observer: 0, Run: 1, At: t0, End: 9}, {Observer: 0, Run: 1, At: t0.Add(100 * ms), End: 5}}, nil, nil, "HIGH WATERMARK WENT BACK", 0},
	}
	for _, tc := range cases {
		h := base
		h.Offsets, h.Committed, h.Resets = tc.offsets, tc.committed, tc.resets
		r := Check(h)
		got := strings.Join(r.Violations, "\n")
		switch {
		case tc.want == "" && !r.OK():
			t.Errorf("%s: want no violation, got:\n%s", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: want a violation with %q, got:\n%s", tc.name, tc.want, got)
		case r.BackAfterRestart != tc.restarts:
			t.Errorf("%s: %d back after a restart, want %d (%v)", tc.name, r.BackAfterRestart, tc.restarts, r.BackAfterRestartExamples)
		}
	}
}

// Each fault's pause per partition: the longest gap between
// acknowledgements (completions) on it reaching into the fault, counted
// from the fault's start.
func TestPartitionPauses(t *testing.T) {
	s := time.Second
	at := func(v string, p int32, off int64, done time.Duration) Publish {
		return Publish{Value: v, Key: v, Producer: 1, Seq: int(off), Acked: true, Partition: p, Offset: off, Invoked: t0.Add(done - 10*time.Millisecond), Done: t0.Add(done)}
	}
	// Partition 0: acks at 0, 9 s (the fault at 5-7 s: a pause of 4 s from
	// its start), 10 s. Partition 1: acks every second: 1 s.
	pubs := []Publish{at("a", 0, 0, 0), at("b", 0, 1, 9*s), at("c", 0, 2, 10*s)}
	var log []Record
	log = append(log, Record{0, 0, "a"}, Record{0, 1, "b"}, Record{0, 2, "c"})
	for i := range 11 {
		v := string(rune('m' + i))
		pubs = append(pubs, at(v, 1, int64(i), time.Duration(i)*s))
		log = append(log, Record{1, int64(i), v})
	}
	comps := []Completion{{Value: "a", Partition: 0, At: t0.Add(s)}, {Value: "b", Partition: 0, At: t0.Add(12 * s)}}
	h := History{Publishes: pubs, Logs: map[int][]Record{0: log}, Completions: comps, Partitions: 2,
		Faults: []Fault{{Node: 2, From: t0.Add(5 * s), To: t0.Add(7 * s)}, {Node: 1, From: t0.Add(20 * s), To: t0.Add(21 * s)}}}
	r := Check(h)
	if !r.OK() {
		t.Fatalf("violations: %v", r.Violations)
	}
	want := []PartitionPause{
		{Fault: 0, Node: 2, Partition: 0, Publish: 4 * s, Completion: 7 * s},
		{Fault: 0, Node: 2, Partition: 1, Publish: s},
		{Fault: 1, Node: 1, Partition: 0},
		{Fault: 1, Node: 1, Partition: 1},
	}
	if len(r.Pauses) != len(want) {
		t.Fatalf("pauses %+v, want %+v", r.Pauses, want)
	}
	for i := range want {
		if r.Pauses[i] != want[i] {
			t.Errorf("pause %d: %+v, want %+v", i, r.Pauses[i], want[i])
		}
	}
	if r.LongestPartitionPause != 4*s {
		t.Errorf("longest partition pause %v, want 4s", r.LongestPartitionPause)
	}
}
