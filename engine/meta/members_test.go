package meta

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"pgregory.net/rapid"
)

func stateWithNodes(t interface{ Fatal(...any) }, n int) *State {
	s := NewState()
	if r := s.Apply(Command{Init: &Init{ClusterID: "c"}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for i := range n {
		if r := s.Apply(Command{AddNode: &AddNode{Addr: fmt.Sprintf("10.0.0.%d:7946", i+1), Token: fmt.Sprint("t", i)}}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return s
}

func TestControllerMembers(t *testing.T) {
	for _, tc := range []struct {
		nodes            int
		voters, learners []NodeID
	}{
		{0, nil, nil},
		{1, []NodeID{1}, nil},
		{2, []NodeID{1, 2}, nil},
		{3, []NodeID{1, 2, 3}, nil},
		{5, []NodeID{1, 2, 3}, []NodeID{4, 5}},
	} {
		v, l := ControllerMembers(stateWithNodes(t, tc.nodes))
		if !slices.Equal(v, tc.voters) || !slices.Equal(l, tc.learners) {
			t.Errorf("%d nodes: voters %v learners %v, want %v %v", tc.nodes, v, l, tc.voters, tc.learners)
		}
	}
}

// applyConfChange applies cc to cs the way raft does (raft.applyConfChange).
func applyConfChange(cs raftpb.ConfState, cc raftpb.ConfChangeV2) (raftpb.ConfState, error) {
	chg := confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: 1}
	cfg, prs, err := confchange.Restore(chg, cs)
	if err != nil {
		return cs, fmt.Errorf("restore %+v: %w", cs, err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, prs
	if cc.LeaveJoint() {
		cfg, prs, err = chg.LeaveJoint()
	} else if autoLeave, ok := cc.EnterJoint(); ok {
		cfg, prs, err = chg.EnterJoint(autoLeave, cc.Changes...)
	} else {
		cfg, prs, err = chg.Simple(cc.Changes...)
	}
	if err != nil {
		return cs, err
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, prs
	return chg.Tracker.ConfState(), nil
}

// drawConfState draws a valid ConfState over node ids 1..12: voters and
// learners, and sometimes a joint configuration entered from there with
// random changes.
func drawConfState(t *rapid.T) raftpb.ConfState {
	var cs raftpb.ConfState
	for id := uint64(1); id <= 12; id++ {
		switch rapid.IntRange(0, 2).Draw(t, fmt.Sprint("role ", id)) {
		case 1:
			cs.Voters = append(cs.Voters, id)
		case 2:
			cs.Learners = append(cs.Learners, id)
		}
	}
	if len(cs.Voters) == 0 {
		return raftpb.ConfState{} // no voter: the empty config before a bootstrap (raft refuses learners without voters)
	}
	if rapid.Bool().Draw(t, "joint") {
		var ccs []raftpb.ConfChangeSingle
		for range rapid.IntRange(1, 4).Draw(t, "changes") {
			ccs = append(ccs, raftpb.ConfChangeSingle{
				Type:   rapid.SampledFrom([]raftpb.ConfChangeType{raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeRemoveNode}).Draw(t, "type"),
				NodeID: rapid.Uint64Range(1, 12).Draw(t, "node"),
			})
		}
		cc := raftpb.ConfChangeV2{Transition: raftpb.ConfChangeTransitionJointExplicit, Changes: ccs}
		if rapid.Bool().Draw(t, "auto leave") {
			cc.Transition = raftpb.ConfChangeTransitionJointImplicit
		}
		if joint, err := applyConfChange(cs, cc); err == nil {
			cs = joint
		}
	}
	return cs
}

// TestNextConfChangeReachesMembers: from any ConfState, following
// NextConfChange (each step applied as raft applies it) reaches exactly
// ControllerMembers in a bounded number of steps; every step is accepted by
// raft, changes at most one voter, leaves at least one voter, and only the
// first step (leaving a joint configuration) may start joint: no step
// enters one, so none is left behind.
func TestNextConfChangeReachesMembers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := stateWithNodes(t, rapid.IntRange(0, 10).Draw(t, "nodes"))
		cs := drawConfState(t)
		voters, learners := ControllerMembers(s)
		start := cs
		steps := 0
		for {
			cc, ok := NextConfChange(cs, s)
			if !ok {
				break
			}
			if steps++; steps > 40 {
				t.Fatalf("no fixpoint after 40 steps from %+v", start)
			}
			wasJoint := len(cs.VotersOutgoing) > 0
			if len(cc.Changes) > 1 || wasJoint != cc.LeaveJoint() {
				t.Fatalf("step %d from %+v: %+v is not a single change or a leave of a joint config", steps, cs, cc)
			}
			next, err := applyConfChange(cs, cc)
			if err != nil {
				t.Fatalf("step %d: raft refuses %+v on %+v: %v", steps, cc, cs, err)
			}
			if len(next.Voters) == 0 {
				t.Fatalf("step %d: %+v on %+v leaves no voter", steps, cc, cs)
			}
			if len(next.VotersOutgoing) > 0 || len(next.LearnersNext) > 0 || next.AutoLeave {
				t.Fatalf("step %d: %+v on %+v leaves a joint config %+v", steps, cc, cs, next)
			}
			cs = next
		}
		if len(cs.VotersOutgoing) > 0 {
			t.Fatalf("stopped in a joint config %+v", cs)
		}
		if len(voters) == 0 {
			if !slices.Equal(sorted(cs.Voters), sorted(start.Voters)) {
				t.Fatalf("with no nodes the voters changed from %v to %v", start.Voters, cs.Voters)
			}
			return
		}
		if !slices.Equal(sorted(cs.Voters), voters) || !slices.Equal(sorted(cs.Learners), learners) {
			t.Fatalf("from %+v reached voters %v learners %v, want %v %v", start, cs.Voters, cs.Learners, voters, learners)
		}
	})
}

// TestNextConfChangeOrder pins the order of steps on one case: a joint
// config is left first, then learners added, then promotions, demotions,
// removals.
func TestNextConfChangeOrder(t *testing.T) {
	s := stateWithNodes(t, 5)
	cs := raftpb.ConfState{Voters: []uint64{3, 4, 9}, VotersOutgoing: []uint64{3, 4, 9}, Learners: []uint64{8}}
	var got []string
	for range 20 {
		cc, ok := NextConfChange(cs, s)
		if !ok {
			break
		}
		if cc.LeaveJoint() {
			got = append(got, "leave")
		} else {
			got = append(got, raftpb.ConfChangesToString(cc.Changes))
		}
		var err error
		if cs, err = applyConfChange(cs, cc); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"leave", "l1", "l2", "l5", "v1", "v2", "l4", "r9", "r8"}
	if !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
}
