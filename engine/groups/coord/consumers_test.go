package coord

import (
	"testing"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
	"google.golang.org/protobuf/proto"
)

// Each member's count of connected apps is what its last Join or
// Heartbeat said, kept through EncodeState/DecodeState; a change of the
// count alone moves nothing and keeps the generation.
func TestMemberConsumers(t *testing.T) {
	f := newFlow(t)
	topics := []Topic{{Name: "orders", Partitions: 4}}
	f.apply(Command{Join: &Join{Member: "a", Session: "sa", Node: 1, Topics: topics, Consumers: 1}})
	f.apply(Command{Join: &Join{Member: "b", Session: "sb", Node: 2, Topics: topics, Consumers: 2}})
	f.settle()
	counts := func(s *State) map[string]uint32 {
		out := map[string]uint32{}
		for _, m := range s.Members(f.group) {
			out[m.ID] = m.Consumers
		}
		return out
	}
	if got := counts(f.s); got["a"] != 1 || got["b"] != 2 {
		t.Fatalf("consumers after the joins: %v, want a:1 b:2", got)
	}
	gen := f.s.Generation(f.group)
	f.mark()
	if r := f.apply(Command{Heartbeat: &Heartbeat{Member: "b", Session: "sb", Consumers: 5}}); r.Rebalanced {
		t.Fatal("a heartbeat changing only the count of consumers rebalanced the group")
	}
	if got := counts(f.s); got["a"] != 1 || got["b"] != 5 {
		t.Fatalf("consumers after b's heartbeat: %v, want a:1 b:5", got)
	}
	if g := f.s.Generation(f.group); g != gen || len(f.revoked) > 0 {
		t.Fatalf("generation %d → %d, revoked %v: the count of consumers moved partitions", gen, g, f.revoked)
	}
	b, err := EncodeState(f.s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := counts(d); got["a"] != 1 || got["b"] != 5 {
		t.Fatalf("consumers after EncodeState/DecodeState: %v, want a:1 b:5", got)
	}
	// Yielding (no app connected) says none.
	f.apply(Command{Heartbeat: &Heartbeat{Member: "b", Session: "sb", Yield: true}})
	if got := counts(f.s); got["b"] != 0 {
		t.Fatalf("consumers of a yielding member: %d, want 0", got["b"])
	}
}

// Records written by a release before the count (no consumers field)
// decode with a count of 0, commands and states alike; and a command with
// the count round-trips.
func TestConsumersAbsentInOldRecords(t *testing.T) {
	old := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hb, err := DecodeCommand(old(&clusterv1.GroupsCommand{Group: "g", AtMs: 5,
		Command: &clusterv1.GroupsCommand_Heartbeat{Heartbeat: &clusterv1.GroupsHeartbeat{MemberId: "a", Session: "sa", Degraded: true}}}))
	if err != nil || hb.Heartbeat == nil || hb.Heartbeat.Consumers != 0 || !hb.Heartbeat.Degraded {
		t.Fatalf("an old heartbeat: %+v, %v; want it decoded with 0 consumers", hb.Heartbeat, err)
	}
	j, err := DecodeCommand(old(&clusterv1.GroupsCommand{Group: "g", AtMs: 5,
		Command: &clusterv1.GroupsCommand_Join{Join: &clusterv1.GroupsJoin{MemberId: "a", Session: "sa", NodeId: 1,
			Topics: []*clusterv1.GroupsTopic{{Name: "orders", Partitions: 1}}}}}))
	if err != nil || j.Join == nil || j.Join.Consumers != 0 {
		t.Fatalf("an old join: %+v, %v; want it decoded with 0 consumers", j.Join, err)
	}
	s := NewState()
	if r := s.Apply(j); r.Err != nil {
		t.Fatal(r.Err)
	}
	enc, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeState(enc)
	if err != nil || d.Members("g")[0].Consumers != 0 {
		t.Fatalf("a state without counts: %v, %v", d.Members("g"), err)
	}

	want := Command{Group: "g", AtMs: 7, Heartbeat: &Heartbeat{Member: "a", Session: "sa", Consumers: 3}}
	b, err := EncodeCommand(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCommand(b)
	if err != nil || got.Heartbeat == nil || *got.Heartbeat != *want.Heartbeat {
		t.Fatalf("heartbeat round trip: %+v, %v; want %+v", got.Heartbeat, err, *want.Heartbeat)
	}
}
