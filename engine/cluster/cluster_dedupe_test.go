package cluster

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// producerEntry is a record entry of producer id's batch seq.
func producerEntry(id int64, seq int32) raftpb.Entry {
	data := log.EncodeRecords(nil, log.BatchHeader{ProducerID: id, BaseSequence: seq}, []log.Record{{Value: []byte("v")}}, time.Now().UnixMilli())
	return raftpb.Entry{Type: raftpb.EntryNormal, Data: data}
}

// A snapshot's table restores every producer's last batch, and the entries
// applied after it again (the table may be newer than the snapshot's
// index) never take a producer back to an older batch; a table that does
// not decode is left out.
func TestProducerTableSnapshot(t *testing.T) {
	var src producerTable
	src.applied(producerEntry(1, 10), 100)
	src.applied(producerEntry(2, 3), 101)
	src.applied(producerEntry(1, 11), 102)
	b := src.snapshot()

	var dst producerTable
	dst.restore(b, quietLogger(), "orders-0")
	dst.applied(producerEntry(1, 10), 100) // applied again after the snapshot's index
	dst.applied(producerEntry(3, 0), 103)
	want := map[int64]producerLast{1: {seq: 11, base: 102}, 2: {seq: 3, base: 101}, 3: {seq: 0, base: 103}}
	for id, l := range want {
		if got, _ := dst.book.lastApplied(id); got != l {
			t.Errorf("producer %d: %+v, want %+v", id, got, l)
		}
	}
	var bad producerTable
	bad.restore(b[:len(b)-1], quietLogger(), "orders-0")
	if len(bad.book.byID) != 0 {
		t.Fatalf("a damaged table restored %d producers", len(bad.book.byID))
	}
	if (&producerTable{}).snapshot() != nil {
		t.Fatal("an empty table encodes to bytes")
	}
}

// FuzzDecodeProducerTable: any bytes decode without panicking; a decoded
// table encodes back to the same bytes.
func FuzzDecodeProducerTable(f *testing.F) {
	var t producerTable
	t.applied(producerEntry(7, 1), 5)
	t.applied(producerEntry(-9, 1<<30), 6)
	f.Add(t.snapshot())
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, lasts, err := decodeProducerTable(b)
		if err != nil || len(ids) == 0 {
			return
		}
		var tab producerTable
		for i, id := range ids {
			tab.mu.Lock()
			tab.note(id, lasts[i])
			tab.mu.Unlock()
		}
		if len(tab.book.byID) == len(ids) && !bytes.Equal(tab.snapshot(), b) {
			t.Fatalf("decoded %d producers re-encode differently", len(ids))
		}
	})
}

// The producer table's rules (producerBook), step by step: each step is an
// event (a batch arriving at the leader, an entry applied, a proposal's
// outcome) and what the book must answer.
func TestProducerBookRules(t *testing.T) {
	type step struct {
		do      string // "admit", "applied", "durable", "dropped"
		id      int64
		seq     int32
		acks    engine.Acks
		base    int64
		want    verdict // admit
		wantOff int64   // admit: the base offset answered
		lost    int     // admit and applied: batches found lost
	}
	logged := map[[2]uint64]bool{{10, 2}: true} // the leader's log: index 10 of term 2
	cases := []struct {
		name  string
		steps []step
	}{
		{"a new batch is proposed; its copy waits; once applied a copy gets its offset", []step{
			{do: "admit", id: 1, seq: 5, want: verdictPropose},
			{do: "admit", id: 1, seq: 5, want: verdictWait},
			{do: "applied", id: 1, seq: 5, base: 40},
			{do: "admit", id: 1, seq: 5, want: verdictApplied, wantOff: 40},
		}},
		{"a copy of a batch whose first copy's caller stopped waiting still waits for it", []step{
			{do: "admit", id: 1, seq: 5, want: verdictPropose},
			{do: "admit", id: 1, seq: 5, want: verdictWait},
			{do: "admit", id: 1, seq: 5, want: verdictWait},
		}},
		{"a delayed copy of batch N after N+1 is proposed, N pending: answered with N's outcome", []step{
			{do: "admit", id: 1, seq: 5, want: verdictPropose},
			{do: "admit", id: 1, seq: 6, want: verdictPropose},
			{do: "admit", id: 1, seq: 5, want: verdictWait},
			{do: "applied", id: 1, seq: 5, base: 40},
			{do: "admit", id: 1, seq: 5, want: verdictApplied, wantOff: 40},
		}},
		{"a delayed copy of batch N after N+1 applied: refused as stale", []step{
			{do: "applied", id: 1, seq: 6, base: 41},
			{do: "admit", id: 1, seq: 5, want: verdictStale},
			{do: "admit", id: 1, seq: 6, want: verdictApplied, wantOff: 41},
		}},
		{"a copy of N, pending, is lost once N+1 applies before it", []step{
			{do: "admit", id: 1, seq: 5, want: verdictPropose},
			{do: "admit", id: 1, seq: 6, want: verdictPropose},
			{do: "applied", id: 1, seq: 6, base: 41, lost: 1},
			{do: "admit", id: 1, seq: 5, want: verdictStale},
		}},
		{"a batch raft dropped (never appended) is proposed again when resent", []step{
			{do: "admit", id: 1, seq: 5, want: verdictPropose},
			{do: "dropped", id: 1, seq: 5},
			{do: "admit", id: 1, seq: 5, want: verdictPropose},
		}},
		{"acks=leader: a copy of a durable first copy gets its offset; acks=all waits", []step{
			{do: "admit", id: 1, seq: 5, acks: engine.AcksLeader, want: verdictPropose},
			{do: "durable", id: 1, seq: 5, base: 40},
			{do: "admit", id: 1, seq: 5, acks: engine.AcksLeader, want: verdictDurable, wantOff: 40},
			{do: "admit", id: 1, seq: 5, want: verdictWait},
		}},
		{"acks=leader: a durable first copy replaced by a new leader's entry is proposed again", []step{
			{do: "admit", id: 1, seq: 5, acks: engine.AcksLeader, want: verdictPropose},
			{do: "durable", id: 1, seq: 5, base: 40, acks: 1}, // acks 1: at an index the log no longer holds
			{do: "admit", id: 1, seq: 5, acks: engine.AcksLeader, want: verdictPropose, lost: 1},
		}},
		{"sequences wrap", []step{
			{do: "applied", id: 1, seq: 1<<31 - 1, base: 7},
			{do: "admit", id: 1, seq: -1 << 31, want: verdictPropose},
			{do: "admit", id: 1, seq: 1<<31 - 2, want: verdictStale},
		}},
		{"producers are independent", []step{
			{do: "applied", id: 1, seq: 9, base: 7},
			{do: "admit", id: 2, seq: 0, want: verdictPropose},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b producerBook
			pend := map[int32]*pendingBatch{}
			for i, s := range c.steps {
				switch s.do {
				case "admit":
					v, p, base, _, lost := b.admit(s.id, s.seq, s.acks, func(index, term uint64) bool { return logged[[2]uint64{index, term}] })
					if v != s.want || (v == verdictApplied || v == verdictDurable) && base != s.wantOff || len(lost) != s.lost {
						t.Fatalf("step %d %+v: verdict %d, offset %d, %d lost", i, s, v, base, len(lost))
					}
					if v == verdictPropose {
						pend[s.seq] = p
					}
				case "applied":
					_, lost := b.appliedBatch(s.id, producerLast{seq: s.seq, base: s.base})
					if len(lost) != s.lost {
						t.Fatalf("step %d %+v: %d lost", i, s, len(lost))
					}
				case "durable":
					p := pend[s.seq]
					p.durable, p.base, p.index, p.term = true, s.base, 10, 2
					if s.acks == 1 {
						p.index = 11
					}
				case "dropped":
					b.resolved(s.id, pend[s.seq])
				}
			}
		})
	}
}

// Producers are evicted by recency, not by when they were first seen: a
// producer that keeps publishing is never the one forgotten; evictions
// are counted.
func TestProducerBookEvictsLeastRecentlyUsed(t *testing.T) {
	b := producerBook{limit: 3}
	for id := int64(1); id <= 3; id++ {
		b.appliedBatch(id, producerLast{seq: 0, base: id})
	}
	b.appliedBatch(1, producerLast{seq: 1, base: 10}) // producer 1 is active
	b.appliedBatch(4, producerLast{seq: 0, base: 11}) // a new producer: 2 goes
	if _, ok := b.lastApplied(1); !ok {
		t.Fatal("the active producer was evicted")
	}
	if _, ok := b.lastApplied(2); ok {
		t.Fatal("the least recently used producer was kept")
	}
	if b.evicted != 1 || len(b.byID) != 3 {
		t.Fatalf("%d evicted, %d kept; want 1 and 3", b.evicted, len(b.byID))
	}
	var order []int64
	b.each(func(id int64, _ producerLast) { order = append(order, id) })
	if fmt.Sprint(order) != "[3 1 4]" {
		t.Fatalf("snapshot order %v, want least recently used first [3 1 4]", order)
	}
}

// The producer table, full (maxProducers), forgets the producer used least
// recently when a new one comes: a producer that keeps publishing stays,
// however long ago it was first seen.
func TestProducerTableKeepsActiveProducers(t *testing.T) {
	var tab producerTable
	tab.applied(producerEntry(1, 0), 0)
	for id := int64(2); id <= maxProducers; id++ {
		tab.applied(producerEntry(id, 0), id)
	}
	tab.applied(producerEntry(1, 1), maxProducers+1) // producer 1 is active
	tab.applied(producerEntry(maxProducers+1, 0), maxProducers+2)
	ids, lasts, err := decodeProducerTable(tab.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	known := map[int64]producerLast{}
	for i, id := range ids {
		known[id] = lasts[i]
	}
	if l, ok := known[1]; !ok || l.seq != 1 {
		t.Fatalf("the active producer 1: %+v (known: %v); want its last batch 1 kept", l, ok)
	}
	if _, ok := known[2]; ok || len(known) != maxProducers {
		t.Fatalf("%d producers kept, producer 2 (the least recently used) among them: %v; want it evicted", len(known), ok)
	}
}
