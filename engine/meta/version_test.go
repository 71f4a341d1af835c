package meta

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

var (
	upgraded = VersionRange{Min: 1, Max: 2}
	// futureOnly is a release that can no longer join a version 1 cluster.
	futureOnly = VersionRange{Min: 2, Max: 3}
)

// TestClusterVersionStartsAtOne: a new cluster is at version 1, gates
// nothing of version 2, and writes its state without the version field,
// byte for byte as before cluster versions existed.
func TestClusterVersionStartsAtOne(t *testing.T) {
	s := seedState(t)
	if v := s.ClusterVersion(); v != 1 {
		t.Fatalf("cluster version %d, want 1", v)
	}
	if s.Enabled(VersionedState) {
		t.Fatal("VersionedState is on at cluster version 1")
	}
	b, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	s.version = 1 // the same version, set explicitly
	b1, _ := EncodeState(s)
	if !bytes.Equal(b, b1) {
		t.Fatal("a state at version 1 encodes differently with the version set")
	}
}

// TestFinalize: PlanFinalize picks the highest version every node speaks and
// Apply raises the cluster to it; the gate turns on; the state carries the
// version through its codec and a snapshot (Clone).
func TestFinalize(t *testing.T) {
	s := seedState(t)
	f, err := PlanFinalize(s, map[NodeID]VersionRange{1: upgraded, 2: upgraded, 3: {Min: 1, Max: 5}})
	if err != nil {
		t.Fatal(err)
	}
	want := FinalizeVersion{Version: 2, Members: []MemberVersions{{1, upgraded}, {2, upgraded}, {3, VersionRange{Min: 1, Max: 5}}}}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("plan %+v, want %+v", f, want)
	}
	c := Command{FinalizeVersion: &f}
	b, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeCommand(b); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("decode: %+v, %v", got, err)
	}
	mustApply(t, s, c)
	if s.ClusterVersion() != 2 || !s.Enabled(VersionedState) || !s.Clone().Enabled(VersionedState) {
		t.Fatalf("after finalizing: version %d, VersionedState %v", s.ClusterVersion(), s.Enabled(VersionedState))
	}
	sb, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeState(sb)
	if err != nil || back.ClusterVersion() != 2 {
		t.Fatalf("decoded state: %v, version %d", err, back.ClusterVersion())
	}
	if _, err := PlanFinalize(s, map[NodeID]VersionRange{1: upgraded, 2: upgraded, 3: upgraded}); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "nothing to finalize") {
		t.Fatalf("a second finalization: %v", err)
	}
	if r := s.Apply(c); !errors.Is(r.Err, ErrVersion) {
		t.Fatalf("the same command again: %v", r.Err)
	}
}

// TestFinalizeRefused: no finalization while a node speaks only the
// cluster's version or has advertised nothing, and Apply refuses a command
// whose members are stale: a node joined after the plan, or one whose range
// does not hold the version. A refused command changes nothing.
func TestFinalizeRefused(t *testing.T) {
	s := seedState(t)
	for _, tc := range []struct {
		name   string
		speaks map[NodeID]VersionRange
		want   string
	}{
		{"a 0.1.0 node", map[NodeID]VersionRange{1: upgraded, 2: Unadvertised, 3: upgraded}, "node 2 speaks cluster versions 1..1 only"},
		{"a node not heard from", map[NodeID]VersionRange{1: upgraded, 3: upgraded}, "node 2 has not said"},
	} {
		if _, err := PlanFinalize(s, tc.speaks); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	f, err := PlanFinalize(s, map[NodeID]VersionRange{1: upgraded, 2: upgraded, 3: upgraded})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := EncodeState(s)
	joined := s.Clone()
	mustApply(t, joined, Command{AddNode: &AddNode{Addr: "10.0.0.9:7946", Token: "late-joiner"}})
	for _, tc := range []struct {
		name string
		s    *State
		f    FinalizeVersion
		want string
	}{
		{"a node joined since", joined, f, "node 4 has not said"},
		{"a member rolled back", s, FinalizeVersion{Version: 2, Members: []MemberVersions{{1, upgraded}, {2, Unadvertised}, {3, upgraded}}}, "node 2 speaks cluster versions 1..1"},
		{"a member too new", s, FinalizeVersion{Version: 2, Members: []MemberVersions{{1, upgraded}, {2, VersionRange{Min: 3, Max: 4}}, {3, upgraded}}}, "node 2 speaks cluster versions 3..4"},
	} {
		if r := tc.s.Apply(Command{FinalizeVersion: &tc.f}); !errors.Is(r.Err, ErrVersion) || !strings.Contains(r.Err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, r.Err, tc.want)
		}
	}
	if after, _ := EncodeState(s); !bytes.Equal(before, after) || s.ClusterVersion() != 1 {
		t.Fatal("a refused finalization changed the state")
	}
	for _, bad := range []FinalizeVersion{
		{Version: 1},
		{Version: 2, Members: []MemberVersions{{2, upgraded}, {1, upgraded}}},
		{Version: 2, Members: []MemberVersions{{1, VersionRange{Min: 2, Max: 1}}}},
		{Version: 2, Members: []MemberVersions{{0, upgraded}}},
	} {
		if err := (Command{FinalizeVersion: &bad}).Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}

// TestCheckSpeaks: a node joins or starts only in a cluster whose version
// its release speaks, and the refusal names both.
func TestCheckSpeaks(t *testing.T) {
	if err := CheckSpeaks(1, upgraded); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v    uint32
		r    VersionRange
		want string
	}{
		{2, Unadvertised, "the cluster is at cluster version 2, and the node's release speaks cluster versions 1..1: it is too old"},
		{1, futureOnly, "the cluster is at cluster version 1, and the node's release speaks cluster versions 2..3: it is too new"},
	} {
		if err := CheckSpeaks(tc.v, tc.r); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckSpeaks(%d, %s): %v, want %q", tc.v, tc.r, err, tc.want)
		}
	}
}

// TestDecodeStateFromNewerVersion: a state at a cluster version this
// release does not know is refused with a message naming both.
func TestDecodeStateFromNewerVersion(t *testing.T) {
	s := seedState(t)
	s.version = MaxClusterVersion + 1
	m, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeState(m); !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "too old") {
		t.Fatalf("decode: %v", err)
	}
}
