package raft

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// Seeds beyond these live in testdata/fuzz (valid encodings written by the
// encoders, and damaged ones).

// FuzzDecodeStateSlot: any bytes decode without panicking; a valid slot
// re-encodes to exactly the same bytes (one encoding per state).
func FuzzDecodeStateSlot(f *testing.F) {
	for _, st := range []State{
		{},
		{HardState: raftpb.HardState{Term: 7, Vote: 2, Commit: 41}, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}, Applied: 40},
		{ConfState: raftpb.ConfState{Voters: []uint64{1, 2}, VotersOutgoing: []uint64{1, 2, 3}, LearnersNext: []uint64{3}, AutoLeave: true}},
	} {
		b, err := encodeStateSlot(3, st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		slot := make([]byte, StateSlotBytes)
		copy(slot, b)
		seq, st, status, err := decodeStateSlot(slot)
		if (status == slotDamaged) != (err != nil) {
			t.Fatalf("status %d with error %v", status, err)
		}
		if status != slotValid {
			return
		}
		again, err := encodeStateSlot(seq, st)
		if err != nil {
			t.Fatalf("re-encode a decoded state: %v", err)
		}
		if !bytes.Equal(again, slot) {
			t.Fatalf("decoded %+v (seq %d) re-encodes differently", st, seq)
		}
	})
}

// FuzzDecodeSnapshotMeta: any bytes decode without panicking; a valid
// encoding re-encodes to the same bytes.
func FuzzDecodeSnapshotMeta(f *testing.F) {
	for _, m := range []SnapshotMeta{
		{},
		{Index: 10, Term: 5, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}, Data: []byte("dedupe table")},
	} {
		b, err := encodeSnapshotMeta(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeSnapshotMeta(b)
		if err != nil {
			return
		}
		again, err := encodeSnapshotMeta(m)
		if err != nil {
			t.Fatalf("re-encode a decoded snapshot: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v re-encodes differently", m)
		}
	})
}

// FuzzDecodeLogStart: any bytes decode without panicking; a valid command
// re-encodes to the same bytes, and anything isLogStart refuses is never a
// record payload's prefix mistaken for a command (and vice versa).
func FuzzDecodeLogStart(f *testing.F) {
	f.Add(encodeLogStart(logStart{Index: 2, Offset: 0}))
	f.Add(encodeLogStart(logStart{Index: 1 << 40, Offset: 1 << 50}))
	f.Add([]byte("SPLS\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeLogStart(b)
		if isLogStart(b) && slog.PayloadType(b) == slog.EntryData {
			t.Fatalf("%x is both a log-start command and a record payload", b)
		}
		if err != nil {
			return
		}
		if again := encodeLogStart(c); !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v re-encodes differently", c)
		}
	})
}

// FuzzDecodeSnapshotData: any bytes decode without panicking; valid data
// re-encodes to the same bytes.
func FuzzDecodeSnapshotData(f *testing.F) {
	f.Add(encodeSnapshotData(snapshotData{}))
	f.Add(encodeSnapshotData(snapshotData{Offset: 123456}))
	f.Add(encodeSnapshotData(snapshotData{Offset: 7, App: []byte("producers")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeSnapshotData(b)
		if err != nil {
			return
		}
		if again := encodeSnapshotData(d); !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v re-encodes differently", d)
		}
	})
}
