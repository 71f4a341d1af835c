package raft

import (
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"pgregory.net/rapid"
)

// One move, step by step: 3 → another 3 sharing two, the leader being the
// one replaced: learner, catch-up, promotion first, transfer, removal.
func TestNextMoveReplacesTheLeader(t *testing.T) {
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	target := []uint64{2, 3, 4}
	up := map[uint64]bool{1: true, 2: true, 3: true}
	caught := func(id uint64) bool { return up[id] }

	s := nextMove(cs, target, 1, caught)
	if !s.propose || len(s.cc.Changes) != 1 || s.cc.Changes[0] != (raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: 4}) {
		t.Fatalf("first step %+v, want node 4 added as a learner", s)
	}
	cs.Learners = []uint64{4}
	if s := nextMove(cs, target, 1, caught); s.propose || s.transfer != 0 || s.done {
		t.Fatalf("with node 4 behind: %+v, want to wait", s)
	}
	up[4] = true
	if s := nextMove(cs, target, 1, caught); s.transfer != 2 {
		t.Fatalf("leader 1 not in the target: %+v, want the leadership handed to node 2", s)
	}
	// Node 2 leads: promote 4 and remove 1 in one joint change.
	s = nextMove(cs, target, 2, caught)
	want := []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddNode, NodeID: 4}, {Type: raftpb.ConfChangeRemoveNode, NodeID: 1}}
	if !s.propose || !slices.Equal(s.cc.Changes, want) {
		t.Fatalf("leader 2: %+v, want %v", s, want)
	}
	cs = raftpb.ConfState{Voters: []uint64{2, 3, 4}, VotersOutgoing: []uint64{1, 2, 3}, AutoLeave: true}
	if s := nextMove(cs, target, 2, caught); !s.propose || len(s.cc.Changes) != 0 {
		t.Fatalf("joint: %+v, want the leave (an empty change)", s)
	}
	cs = raftpb.ConfState{Voters: []uint64{2, 3, 4}}
	if s := nextMove(cs, target, 2, caught); !s.done {
		t.Fatalf("at the target: %+v, want done", s)
	}
}

// Any membership reaches any target through steps raft accepts (its own
// confchange package applies each one, refusing what raft refuses), a
// learner is promoted only once it has caught up, the group never loses
// its last voter, and the walk ends at the target's voters with no
// learners — whatever the order in which replicas catch up, leaders move
// and raft leaves joint configurations by itself.
func TestNextMoveReachesAnyTarget(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOfNDistinct(rapid.Uint64Range(1, 7), 1, 7, rapid.ID[uint64]).Draw(t, "ids")
		nv := rapid.IntRange(1, len(ids)).Draw(t, "voters")
		cs := raftpb.ConfState{Voters: slices.Clone(ids[:nv])}
		for _, id := range ids[nv:] {
			if rapid.Bool().Draw(t, "learner") {
				cs.Learners = append(cs.Learners, id)
			}
		}
		target := rapid.SliceOfNDistinct(rapid.Uint64Range(1, 7), 1, 5, rapid.ID[uint64]).Draw(t, "target")
		leader := rapid.SampledFrom(cs.Voters).Draw(t, "leader")
		rep, err := newConfReplay(cs, 1)
		if err != nil {
			t.Fatal(err)
		}
		index := uint64(1)
		caughtUp := map[uint64]bool{}
		for step := 0; ; step++ {
			if step > 200 {
				t.Fatalf("no end after 200 steps: %v toward %v", rep.state(), target)
			}
			cur := rep.state()
			// Replicas catch up in any order; after 40 steps all have.
			for _, id := range append(slices.Clone(cur.Voters), cur.Learners...) {
				if !caughtUp[id] && (step > 40 || rapid.Bool().Draw(t, "catches up")) {
					caughtUp[id] = true
				}
			}
			s := nextMove(cur, target, leader, func(id uint64) bool { return caughtUp[id] })
			switch {
			case s.done:
				got := sorted(cur.Voters)
				if !slices.Equal(got, sorted(target)) || len(cur.Learners) > 0 || len(cur.VotersOutgoing) > 0 {
					t.Fatalf("done at %v, want voters %v and no learners", cur, sorted(target))
				}
				return
			case s.transfer != 0:
				if !slices.Contains(cur.Voters, s.transfer) || !slices.Contains(target, s.transfer) || !caughtUp[s.transfer] {
					t.Fatalf("transfer to %d in %v (target %v): not a caught-up target voter", s.transfer, cur, target)
				}
				leader = s.transfer
			case s.propose:
				for _, c := range s.cc.Changes {
					if c.Type == raftpb.ConfChangeAddNode && slices.Contains(cur.Learners, c.NodeID) && !caughtUp[c.NodeID] {
						t.Fatalf("learner %d promoted before it caught up", c.NodeID)
					}
				}
				index++
				data, err := s.cc.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				if err := rep.apply(raftpb.Entry{Type: raftpb.EntryConfChangeV2, Index: index, Data: data}); err != nil {
					t.Fatalf("raft refuses step %v from %v: %v", s.cc, cur, err)
				}
				next := rep.state()
				if len(next.Voters) == 0 {
					t.Fatalf("step %v from %v leaves no voter", s.cc, cur)
				}
				if !slices.Contains(next.Voters, leader) && !slices.Contains(next.VotersOutgoing, leader) {
					// Removed: it steps down and a remaining voter is elected.
					leader = rapid.SampledFrom(next.Voters).Draw(t, "elected")
				}
				// Raft may leave a joint configuration by itself (AutoLeave).
				if next.AutoLeave && rapid.Bool().Draw(t, "auto leave") {
					index++
					if err := rep.apply(raftpb.Entry{Type: raftpb.EntryConfChangeV2, Index: index}); err != nil {
						t.Fatal(err)
					}
				}
			default:
				if step > 60 {
					t.Fatalf("waiting at %v toward %v with every replica caught up", cur, target)
				}
			}
		}
	})
}
