package raft

import (
	"bytes"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	raftracker "go.etcd.io/raft/v3/tracker"

	"github.com/spoolmq/spool/engine/transport"
)

// Quiescence (docs/replication.md, "Quiet idle groups"): a group with
// nothing to do stops ticking on every replica, so 1,000 idle partitions
// cost a node neither ticks nor heartbeats. Like CockroachDB's, the leader
// decides: when every follower holds its whole log, everything is
// committed and applied, nothing is proposed, read or transferred and
// every follower's node is live, it sends each follower one quiesce
// message (a MsgHeartbeat carrying quiesceContext) instead of ticking. A
// follower that agrees (same term and leader, its log ends at the leader's
// commit, the leader's node live) stops ticking without answering; one
// that does not answers the heartbeat with the context kept, which wakes
// the leader. Ticks only pace elections and heartbeats: raft's safety does
// not depend on them, so quiescence can cost liveness only. That is what
// the wake-ups are for: a proposal, a read, a transfer or a campaign, any
// raft message but the two quiesce ones (and a late heartbeat answer), and
// node liveness — a peer's node declared dead (Host.PeerUnreachable) wakes
// every group with a member there, and a follower whose leader's node is
// dead elects as a non-quiesced one does (leaderUnreachable).
//
// The decisions are the pure functions leaderQuiesce and followerQuiesce;
// the Host drives them (process, quiesceStep).

// quiesceContext marks the quiesce heartbeat and a follower's refusal of
// it. Nine bytes: never a read-index context, which is eight (readIndex).
// raft echoes it in the heartbeat's answer and, on the leader, finds no
// read waiting for it: a peer that does not know it only answers.
var quiesceContext = []byte("quiesce/1")

func isQuiesce(m *raftpb.Message) bool {
	return (m.Type == raftpb.MsgHeartbeat || m.Type == raftpb.MsgHeartbeatResp) && bytes.Equal(m.Context, quiesceContext)
}

// leaderView is what a leader's quiescence depends on.
type leaderView struct {
	Leader       bool // this replica leads
	Transferring bool // a leadership transfer is in flight
	Joint        bool // a joint configuration to leave
	Moving       bool // a configuration change of a replica move is in flight
	// Busy: this visit had work besides ticks and heartbeats, or raft has
	// a Ready waiting.
	Busy bool
	// Pending is the proposals and reads not resolved yet.
	Pending int
	// Last is the last index of the leader's log; Commit its commit index;
	// Applied the last index applied here.
	Last, Commit, Applied uint64
	Followers             []followerView
}

// followerView is one follower's progress as the leader sees it.
type followerView struct {
	ID, Match    uint64
	Replicating  bool // raft's StateReplicate: neither probed nor sent a snapshot
	RecentActive bool // heard from since the last quorum check
	Live         bool // its node is live (node-level liveness)
}

// leaderQuiesce says why the leader of v must keep ticking, or "" when it
// may quiesce. RecentActive is required so that a woken leader's next
// quorum check, which counts what it heard since the previous one, does
// not depose it for the silence it asked for.
func leaderQuiesce(v leaderView) string {
	switch {
	case !v.Leader:
		return "not the leader"
	case v.Busy:
		return "work in this visit"
	case v.Pending > 0:
		return "proposals or reads in flight"
	case v.Transferring:
		return "a leadership transfer in flight"
	case v.Joint, v.Moving:
		return "a configuration change in flight"
	case v.Commit != v.Last:
		return "entries not committed"
	case v.Applied != v.Commit:
		return "entries not applied"
	}
	for _, f := range v.Followers {
		switch {
		case f.Match != v.Last:
			return "a follower lacks entries"
		case !f.Replicating:
			return "a follower is probed or sent a snapshot"
		case !f.RecentActive:
			return "a follower not heard from since the last quorum check"
		case !f.Live:
			return "a follower's node is not live"
		}
	}
	return ""
}

// followerState is what a follower's quiescence depends on, before it
// steps the quiesce heartbeat m.
type followerState struct {
	Follower   bool // raft's StateFollower
	Term, Lead uint64
	Last       uint64 // the last index of its log
	LeaderLive bool   // the node of m's sender is live
}

// followerQuiesce says why a follower refuses the quiesce heartbeat m, or
// "" when it quiesces. The heartbeat, stepped without its context, then
// commits up to m.Commit, which is its last index.
func followerQuiesce(s followerState, m raftpb.Message) string {
	switch {
	case !s.Follower:
		return "not a follower"
	case m.Term != s.Term || m.From != s.Lead:
		return "not from this follower's leader of this term"
	case s.Last != m.Commit:
		return "its log does not end at the leader's commit"
	case !s.LeaderLive:
		return "the leader's node is not live"
	}
	return ""
}

// live says whether node is live (HostConfig.NodeLive; this node always).
func (h *Host) live(node uint64) bool {
	return node == h.cfg.NodeID || h.cfg.NodeLive == nil || h.cfg.NodeLive(node)
}

// leaderView reads g's replica for leaderQuiesce; on g's worker.
func (h *Host) leaderView(g *hostGroup, busy bool) leaderView {
	r := g.r
	st := r.Status()
	cs := r.ConfState()
	v := leaderView{Leader: st.RaftState == etcdraft.StateLeader, Transferring: st.LeadTransferee != 0,
		Joint: len(cs.VotersOutgoing) > 0 || len(cs.LearnersNext) > 0, Moving: g.moving.Load(),
		Busy: busy || r.HasReady(), Pending: g.track.pending(),
		Last: r.p.LastIndex(), Commit: st.Commit, Applied: r.CommitIndex()}
	for id, pr := range st.Progress {
		if id == st.ID {
			continue
		}
		v.Followers = append(v.Followers, followerView{ID: id, Match: pr.Match, Replicating: pr.State == raftracker.StateReplicate,
			RecentActive: pr.RecentActive, Live: h.live(transport.NodeOf(id))})
	}
	return v
}

// quiesce sends the quiesce heartbeat to every follower of v; on g's worker.
func (g *hostGroup) quiesce(v leaderView, term uint64) {
	msgs := make([]raftpb.Message, 0, len(v.Followers))
	for _, f := range v.Followers {
		msgs = append(msgs, raftpb.Message{Type: raftpb.MsgHeartbeat, From: g.r.ID(), To: f.ID, Term: term, Commit: v.Commit, Context: quiesceContext})
	}
	if len(msgs) > 0 {
		g.send(msgs)
	}
}

// quiesceStep steps one received message of a visit and says whether the
// group is quiet after it. A quiet leader stays quiet on a heartbeat's
// late answer; a follower quiesces on an agreed quiesce heartbeat (whose
// answer is then not sent: dropAnswer); anything else wakes the group.
func (h *Host) quiesceStep(g *hostGroup, m raftpb.Message, quiet bool) bool {
	r := g.r
	switch {
	case m.Type == raftpb.MsgHeartbeat && isQuiesce(&m):
		bs := r.BasicStatus()
		s := followerState{Follower: bs.RaftState == etcdraft.StateFollower, Term: bs.Term, Lead: bs.Lead,
			Last: r.p.LastIndex(), LeaderLive: h.live(transport.NodeOf(m.From))}
		if why := followerQuiesce(s, m); why != "" {
			h.stepOne(g, m) // answered with the context kept: the leader wakes
			return false
		}
		m.Context = nil
		h.stepOne(g, m)
		return true
	case m.Type == raftpb.MsgHeartbeatResp && !isQuiesce(&m):
		h.stepOne(g, m)
		return quiet
	default:
		h.stepOne(g, m)
		return false
	}
}

// nudge tells g's leader that this follower woke for a reason of its own
// (a quiesce refusal's answer): the leader wakes and heartbeats again
// before this follower's election timer runs out. On g's worker.
func (g *hostGroup) nudge() {
	bs := g.r.BasicStatus()
	if bs.RaftState != etcdraft.StateFollower || bs.Lead == 0 || !g.h.live(transport.NodeOf(bs.Lead)) {
		return
	}
	g.send([]raftpb.Message{{Type: raftpb.MsgHeartbeatResp, From: g.r.ID(), To: bs.Lead, Term: bs.Term, Context: quiesceContext}})
}

// hasMemberOn says whether g has a replica on node, as of its last status.
func (g *hostGroup) hasMemberOn(node uint64) bool {
	st := g.status.Load()
	if st == nil {
		return true
	}
	for _, ids := range [][]uint64{st.Voters, st.Learners} {
		for _, id := range ids {
			if transport.NodeOf(id) == node {
				return true
			}
		}
	}
	return st.Leader == node
}
