package check

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// at is a publish of v by producer, acknowledged at partition 0, offset
// off, invoked and answered at the given milliseconds after t0.
func at(v string, producer int, off int64, from, to int) Publish {
	return Publish{Value: v, Key: v, Producer: producer, Acked: true, Offset: off,
		Invoked: t0.Add(time.Duration(from) * time.Millisecond), Done: t0.Add(time.Duration(to) * time.Millisecond)}
}

func TestLinearizableAppends(t *testing.T) {
	unknown := func(p Publish) Publish { p.Acked, p.Unknown = false, true; return p }
	cases := []struct {
		name string
		pubs []Publish
		log  []string
		ok   bool
	}{
		{"sequential", []Publish{at("a", 0, 0, 0, 1), at("b", 1, 1, 2, 3)}, []string{"a", "b"}, true},
		// Answered in the other order, but both were in flight together.
		{"concurrent, answered out of offset order", []Publish{at("a", 0, 1, 0, 10), at("b", 1, 0, 1, 2)}, []string{"b", "a"}, true},
		{"acknowledged before the other was invoked, higher offset", []Publish{at("a", 0, 1, 0, 1), at("b", 1, 0, 2, 3)}, []string{"b", "a"}, false},
		// A copy stored by an attempt whose answer was lost may take effect
		// any time after its call ...
		{"unknown copy after an acknowledged one", []Publish{unknown(at("u", 0, 0, 0, 0)), at("b", 1, 0, 5, 6)}, []string{"b", "u"}, true},
		// ... but not before it: u was invoked after b was acknowledged at
		// offset 1, so it cannot sit at offset 0.
		{"unknown copy before an append acknowledged before its call", []Publish{at("b", 1, 1, 0, 1), unknown(at("u", 0, 0, 5, 5))}, []string{"u", "b"}, false},
		// Two copies of one publish (a retry after an unknown outcome): the
		// acknowledged one closes at the answer, the other stays open.
		{"retried copy", []Publish{unknown(at("a", 0, 2, 0, 10)), at("b", 1, 1, 1, 2)}, []string{"a", "b", "a"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(History{Publishes: c.pubs, Logs: both(recs(c.log...))})
			lin := !strings.Contains(strings.Join(r.Violations, "\n"), "NOT LINEARIZABLE")
			if lin != c.ok {
				t.Fatalf("linearizable = %v, want %v; violations: %q", lin, c.ok, r.Violations)
			}
			var page bytes.Buffer
			wrote, err := r.Visualize(&page)
			if err != nil || wrote == c.ok || (wrote && !strings.Contains(page.String(), "<html")) {
				t.Fatalf("Visualize wrote %v (%d bytes), err %v; want a page only for a violation", wrote, page.Len(), err)
			}
		})
	}
}

// A history of a real run's size (tens of thousands of acknowledged
// appends, eight producers, some retried after unknown outcomes) passes;
// the model leaves porcupine one candidate per step (40,000 appends: 0.5 s
// on the 2-core VM).
func TestLinearizableAtScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const producers, perProducer, partitions = 8, 2000, 3
	var pubs []Publish
	logs := map[int32][]string{}
	now := 0
	for seq := range perProducer {
		// Each round every producer is in flight at once; they are stored in
		// a random order and answered in another.
		order := rng.Perm(producers)
		for _, pr := range order {
			part := int32(rng.IntN(partitions))
			v := fmt.Sprintf("p%d-%d", pr, seq)
			p := Publish{Value: v, Key: v, Producer: pr, Seq: seq, Acked: true, Partition: part, Offset: int64(len(logs[part])),
				Invoked: t0.Add(time.Duration(now) * time.Microsecond), Done: t0.Add(time.Duration(now+50+rng.IntN(50)) * time.Microsecond)}
			logs[part] = append(logs[part], v)
			if rng.IntN(500) == 0 { // retried after an unknown outcome: stored twice
				p.Unknown = true
				logs[part] = append(logs[part], v)
			}
			pubs = append(pubs, p)
		}
		now += 100
	}
	var rs []Record
	for part := range int32(partitions) {
		for off, v := range logs[part] {
			rs = append(rs, Record{Partition: part, Offset: int64(off), Value: v})
		}
	}
	start := time.Now()
	r := Check(History{Publishes: pubs, Logs: both(rs)})
	if !r.OK() || r.Acked != producers*perProducer {
		t.Fatalf("acked %d, violations %q", r.Acked, r.Violations)
	}
	t.Logf("%d appends checked in %v", len(pubs), time.Since(start))
}
