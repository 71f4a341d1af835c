package raft

import (
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	raftracker "go.etcd.io/raft/v3/tracker"

	slog "github.com/spoolmq/spool/engine/log"
)

// What a peer sends is checked here before raft sees it (docs/security.md,
// "Peers"). The transport has already refused messages from another node
// than the stream's peer, for another node, or of a type raft keeps
// local. What is left are messages of a known type whose contents no
// honest replica sends and that raft would panic on, or that would make
// this replica stop when it writes them to its log: such a message is
// refused with ErrMalformedMessage (the Host counts it,
// HostStats.Malformed), and the replica runs on. Raft sends again what an
// honest leader meant, so nothing is lost by refusing.

// local is what checkInbound needs of the replica a message is for.
type local struct {
	last          uint64 // its last log index
	term          uint64 // its term
	leads         bool   // it leads the group
	maxBatchBytes int    // its log's MaxBatchBytes
}

// MaxTerm bounds the terms a peer's message may carry: no group holds
// 2^62 elections, and raft, which adds one to the term at each campaign,
// panics once a term wraps around to 0 (a node that took a term of 2^64-1
// from a message crashed at its next election timeout).
const MaxTerm = 1 << 62

// checkInbound says why m, from a peer, must not reach raft.
func checkInbound(m *raftpb.Message, l local) error {
	if m.Term > MaxTerm || m.LogTerm > MaxTerm {
		return fmt.Errorf("a %s of term %d (log term %d), above %d (MaxTerm)", m.Type, m.Term, m.LogTerm, uint64(MaxTerm))
	}
	// Raft sends every message with its term, but for the requests a
	// follower forwards to its leader as they came (and panics when
	// forwarding one that has a term). A message of term 0 is taken for a
	// local one.
	forwarded := m.Type == raftpb.MsgReadIndex || m.Type == raftpb.MsgTransferLeader || m.Type == raftpb.MsgProp
	if forwarded != (m.Term == 0) {
		return fmt.Errorf("a %s of term %d: raft sends term 0 with a forwarded request only, and with it only", m.Type, m.Term)
	}
	switch m.Type {
	case raftpb.MsgHeartbeat:
		// A leader's heartbeat commits at most what this follower
		// acknowledged having (min of its match and the commit index), so
		// never past its log; raft panics on one that does.
		if m.Commit > l.last {
			return fmt.Errorf("a heartbeat commits index %d, past this replica's last index %d", m.Commit, l.last)
		}
	case raftpb.MsgAppResp:
		// A follower acknowledges what the leader sent it in this term:
		// never past the leader's log (raft would look for a snapshot to
		// send it, and panic finding none).
		if l.leads && m.Term == l.term && !m.Reject && m.Index > l.last {
			return fmt.Errorf("an acknowledgement of index %d, past this leader's last index %d", m.Index, l.last)
		}
	case raftpb.MsgReadIndex, raftpb.MsgReadIndexResp:
		// Both carry the request's context as their one entry; raft reads
		// it without looking.
		if len(m.Entries) != 1 {
			return fmt.Errorf("a %s with %d entries, want the request context alone", m.Type, len(m.Entries))
		}
	case raftpb.MsgProp:
		// Spool proposes on the leader only (Host.propose; forwarding is
		// off), so no peer forwards a proposal: its entries would reach the
		// leader's log unchecked.
		return fmt.Errorf("a proposal of %d entries: replicas never forward proposals", len(m.Entries))
	case raftpb.MsgApp:
		return checkAppend(m, l.maxBatchBytes)
	case raftpb.MsgSnap:
		if err := checkSnapshot(m.Snapshot); err != nil {
			return err
		}
		if t := m.Snapshot.Metadata.Term; t > m.Term {
			return fmt.Errorf("a snapshot of term %d in a message of term %d", t, m.Term)
		}
	}
	return nil
}

// checkAppend checks an append as raft and the partition log assume it
// is: entries at consecutive indexes right after the message's, with
// terms that never go back, from the message's log term up to its term,
// each one an entry the log can store (a record payload whose header, CRC
// and records are sound, another normal entry that fits a batch, or a
// conf change that decodes). Raft panics on an entry that conflicts with a
// committed one (an index out of place); the log refuses the others, which
// stops the replica.
func checkAppend(m *raftpb.Message, maxBatchBytes int) error {
	if m.LogTerm > m.Term {
		return fmt.Errorf("an append at term %d follows an entry of term %d", m.Term, m.LogTerm)
	}
	prevTerm := m.LogTerm
	for k := range m.Entries {
		e := &m.Entries[k]
		if want := m.Index + 1 + uint64(k); e.Index != want || want <= m.Index {
			return fmt.Errorf("entry %d of an append after index %d has index %d, want %d", k, m.Index, e.Index, want)
		}
		if e.Term == 0 || e.Term < prevTerm || e.Term > m.Term {
			return fmt.Errorf("entry %d has term %d, after term %d in an append of term %d", e.Index, e.Term, prevTerm, m.Term)
		}
		prevTerm = e.Term
		if err := checkEntry(e, maxBatchBytes); err != nil {
			return fmt.Errorf("entry %d: %w", e.Index, err)
		}
	}
	return nil
}

// checkEntry says why the partition log would refuse e, or raft fail to
// decode it when applying it.
func checkEntry(e *raftpb.Entry, maxBatchBytes int) error {
	switch e.Type {
	case raftpb.EntryNormal:
		if slog.PayloadType(e.Data) == slog.EntryData {
			return slog.CheckRecords(e.Data, maxBatchBytes)
		}
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		if err := cc.Unmarshal(e.Data); err != nil {
			return fmt.Errorf("conf change: %w", err)
		}
	case raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		if err := cc.Unmarshal(e.Data); err != nil {
			return fmt.Errorf("conf change: %w", err)
		}
	default:
		return fmt.Errorf("unknown entry type %d", e.Type)
	}
	if n := slog.BatchHeaderSize + len(e.Data); n > maxBatchBytes {
		return fmt.Errorf("%d bytes make a %d-byte log batch, limit %d", len(e.Data), n, maxBatchBytes)
	}
	return nil
}

// checkConfState says why raft could not restore cs (it panics on it): ids
// both voter and learner, a learner-next that is not an outgoing voter, and
// the like; raft checks that a ConfState restores to itself.
func checkConfState(cs raftpb.ConfState, index uint64) error {
	rp, err := newConfReplay(cs, index)
	if err != nil {
		return err
	}
	if err := cs.Equivalent(rp.state()); err != nil {
		return fmt.Errorf("ConfState %v does not restore to itself: %w", cs, err)
	}
	return nil
}

// confStateOf is the ConfState of a raft configuration.
func confStateOf(cfg raftracker.Config) raftpb.ConfState {
	return (&raftracker.ProgressTracker{Config: cfg}).ConfState()
}

// malformedLogEvery bounds the log lines about refused messages: a broken
// or hostile peer sending many must not flood the log. Every one is
// counted (HostStats.Malformed).
const malformedLogEvery = time.Second

// logMalformed logs a refused message, at most once per
// malformedLogEvery, saying how many went unlogged since the last line.
func (h *Host) logMalformed(group uint64, m raftpb.Message, err error) {
	now := h.now().UnixNano()
	last := h.malformedLoggedAt.Load()
	if last != 0 && now-last < int64(malformedLogEvery) || !h.malformedLoggedAt.CompareAndSwap(last, now) {
		h.malformedUnlogged.Add(1)
		return
	}
	h.cfg.Logger.Warn("spool raft: refused a malformed message from a peer before raft saw it; the replica runs on",
		"group", group, "type", m.Type.String(), "from", m.From, "term", m.Term, "err", err,
		"unlogged_since_last", h.malformedUnlogged.Swap(0))
}
