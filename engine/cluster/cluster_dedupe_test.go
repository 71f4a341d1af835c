package cluster

import (
	"bytes"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

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
		if got := dst.last[id]; got != l {
			t.Errorf("producer %d: %+v, want %+v", id, got, l)
		}
	}
	var bad producerTable
	bad.restore(b[:len(b)-1], quietLogger(), "orders-0")
	if len(bad.last) != 0 {
		t.Fatalf("a damaged table restored %d producers", len(bad.last))
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
		if len(tab.order) == len(ids) && !bytes.Equal(tab.snapshot(), b) {
			t.Fatalf("decoded %d producers re-encode differently", len(ids))
		}
	})
}
