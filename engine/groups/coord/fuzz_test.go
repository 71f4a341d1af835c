package coord

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// Seeds beyond the ones added here live in testdata/fuzz.

func seedCommands() []Command {
	return []Command{
		{Group: "g", AtMs: 1, Join: &Join{Member: "node-1/orders", Session: "5f1c", Node: 1, Topics: topicsOf("orders"), SessionTimeoutMs: 10_000, RevokeTimeoutMs: 15_000}},
		{Group: "g", AtMs: 2, Heartbeat: &Heartbeat{Member: "node-1/orders", Session: "5f1c", Yield: true}},
		{Group: "g", AtMs: 3, Leave: &Leave{Member: "node-1/orders", Session: "5f1c"}},
		{Group: "g", AtMs: 4, Expire: &Expire{Member: "node-1/orders"}},
		{Group: "g", AtMs: 5, RevokeDone: &RevokeDone{Member: "node-1/orders", Generation: 2, Partitions: []TopicPartition{{"orders", 3}, {"orders", 7}}}},
		{Group: "g", AtMs: 6, Commit: &Commit{Member: "node-1/orders", Generation: 1, TopicPartition: TopicPartition{"orders", 0}, Position: Position{Next: 10, Done: []int64{12, 15}}}},
		{Group: "g", AtMs: 7, Reset: &ResetPositions{Topic: "orders", Next: []PartitionNext{{0, 0}, {3, 120}}}},
		{AtMs: 8, DropTopic: &DropTopic{Topic: "orders"}},
		{Checkpoint: &Checkpoint{AsOf: 41, Chunk: 1, Chunks: 3, Sum: make([]byte, 32), Data: []byte("part of a state")}},
	}
}

// seedState: a group of three members, one of them yielding, with
// revocations under way and committed positions, and a second group.
func seedState(t testing.TB) *State {
	f := newFlow(t)
	f.join("m1", 1)
	f.join("m2", 2)
	f.settle()
	f.join("m3", 3, "orders", "audit")
	a, _ := f.s.Assignment(f.group, "m1")
	f.apply(Command{Commit: &Commit{Member: "m1", Generation: a.Generation, TopicPartition: a.Owned[0], Position: Position{Next: 10, Done: []int64{12, 15}}}})
	f.apply(Command{Heartbeat: &Heartbeat{Member: "m2", Session: "s0", Yield: true}})
	f.group = "other"
	f.join("m1", 1)
	return f.s
}

// FuzzDecodeCommand: any bytes decode without panicking; a decoded command
// encodes again and decodes to the same command, with the same bytes; and
// applying it to a state (applyEverywhere) does not panic, keeps every
// invariant, gives the same state on every node, and changes nothing when
// the command does not validate.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range seedCommands() {
		b, err := EncodeCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	base := seedState(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			return
		}
		enc, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("re-encode %s: %v", describe(c), err)
		}
		again, err := DecodeCommand(enc)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("%s re-decodes as %s (%v)", describe(c), describe(again), err)
		}
		if enc2, _ := EncodeCommand(again); !bytes.Equal(enc2, enc) {
			t.Fatalf("%s encodes two ways", describe(c))
		}
		applyEverywhere(t, base, c)
	})
}

// applyEverywhere applies c as every node's applier does (Validate first:
// one that does not validate is skipped, rsm) to two copies of base: the
// same result and the same state on both (no two nodes diverge), every
// invariant kept, and a command that does not validate refused by Apply
// too, changing nothing.
func applyEverywhere(t *testing.T, base *State, c Command) {
	t.Helper()
	before, err := EncodeState(base)
	if err != nil {
		t.Fatal(err)
	}
	a, b := base.Clone(), base.Clone()
	ra, rb := a.Apply(c), b.Apply(c)
	if err := a.check(); err != nil {
		t.Fatalf("after %s: %v", describe(c), err)
	}
	ea, erra := EncodeState(a)
	eb, errb := EncodeState(b)
	if erra != nil || errb != nil || !bytes.Equal(ea, eb) || fmt.Sprint(ra) != fmt.Sprint(rb) {
		t.Fatalf("%s applied to two copies of a state: results %v and %v (%v, %v)", describe(c), ra, rb, erra, errb)
	}
	if c.Validate() == nil {
		return
	}
	if ra.Err == nil || !bytes.Equal(ea, before) {
		t.Fatalf("%s does not validate, yet Apply took it (%v)", describe(c), ra.Err)
	}
}

// FuzzDecodeState: any bytes decode without panicking; a decoded state
// holds every invariant, encodes again and decodes to the same bytes, and
// takes a command.
func FuzzDecodeState(f *testing.F) {
	for _, s := range []*State{NewState(), seedState(f)} {
		b, err := EncodeState(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeState(b)
		if err != nil {
			return
		}
		if err := s.check(); err != nil {
			t.Fatalf("decoded a state breaking an invariant: %v", err)
		}
		enc, err := EncodeState(s)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeState(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if enc2, _ := EncodeState(again); !bytes.Equal(enc2, enc) {
			t.Fatalf("a decoded state encodes two ways")
		}
		s.Apply(Command{Group: "g", AtMs: 1 << 40, Join: &Join{Member: "fuzz", Session: "fuzz", Node: 1, Topics: []Topic{{Name: "fuzz", Partitions: 3}}}})
		if err := s.check(); err != nil {
			t.Fatalf("after a join to a decoded state: %v", err)
		}
	})
}
