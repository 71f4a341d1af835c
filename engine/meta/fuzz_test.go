package meta

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// Seeds beyond the ones added here live in testdata/fuzz: every kind of
// command, states from empty to placed with pending topics, and damaged
// ones (truncated, unknown fields, broken invariants).

func seedCommands() []Command {
	return []Command{
		{Init: &Init{ClusterID: "prod"}},
		{AddNode: &AddNode{Addr: "10.0.0.1:7946", Token: "550e8400-e29b-41d4-a716-446655440000"}},
		{SetNodeAddr: &SetNodeAddr{ID: 2, Addr: "[::1]:7946"}},
		{CreateTopic: &CreateTopic{Spec: TopicSpec{Name: "orders", Partitions: 12, ReplicationFactor: 3, RetentionAgeMs: 604_800_000, RetentionBytes: 1 << 30}}},
		{AlterTopic: &AlterTopic{Name: "orders", RetentionAgeMs: 1, RetentionBytes: 2}},
		{MoveReplicas: &MoveReplicas{Group: 1, Replicas: []NodeID{3, 2, 1}, Pin: true}},
		{DeleteTopic: &DeleteTopic{Name: "orders"}},
	}
}

// seedState: three nodes, a placed topic with a partition an operator
// moved (pinned), a pending one.
func seedState(t testing.TB) *State {
	s := stateWithNodes(t, 3)
	mustApply(t, s, create("orders", 4, 3))
	mustApply(t, s, Command{MoveReplicas: &MoveReplicas{Group: 2, Replicas: []NodeID{3, 1, 2}, Pin: true}})
	mustApply(t, s, create("wide", 1, 5))
	return s
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
			t.Fatalf("re-encode %+v: %v", c, err)
		}
		again, err := DecodeCommand(enc)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("%+v re-decodes as %+v (%v)", c, again, err)
		}
		if enc2, _ := EncodeCommand(again); !bytes.Equal(enc2, enc) {
			t.Fatalf("%+v encodes two ways", c)
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
		t.Fatalf("after %+v: %v", c, err)
	}
	ea, erra := EncodeState(a)
	eb, errb := EncodeState(b)
	if erra != nil || errb != nil || !bytes.Equal(ea, eb) || fmt.Sprint(ra) != fmt.Sprint(rb) {
		t.Fatalf("%+v applied to two copies of a state: results %v and %v (%v, %v)", c, ra, rb, erra, errb)
	}
	if c.Validate() == nil {
		return
	}
	if ra.Err == nil || !bytes.Equal(ea, before) {
		t.Fatalf("%+v does not validate, yet Apply took it (%v)", c, ra.Err)
	}
}

// FuzzDecodeState: any bytes decode without panicking; a decoded state
// holds every invariant, encodes again and decodes to the same bytes.
func FuzzDecodeState(f *testing.F) {
	for _, s := range []*State{NewState(), stateWithNodes(f, 0), seedState(f)} {
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
		s.Apply(Command{AddNode: &AddNode{Addr: "fuzz:1", Token: "fuzz"}})
		if err := s.check(); err != nil {
			t.Fatalf("after adding a node to a decoded state: %v", err)
		}
	})
}
