package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
)

// Outcomes of a proposal other than success (docs/replication.md, "The
// node's replicas: Host").
var (
	// ErrOutcomeUnknown: the entry may or may not commit (the proposal timed
	// out, leadership changed with it uncommitted, the replica or the host
	// stopped). Retrying may write it twice; an idempotent producer's retry
	// does not.
	ErrOutcomeUnknown = errors.New("raft: proposal outcome unknown")
	// ErrProposalLost: the entry will certainly never commit (raft dropped
	// it, another entry was committed at its index, or it was never handed
	// to raft). Safe to retry.
	ErrProposalLost = errors.New("raft: proposal lost")
	// ErrConfChangeRefused: raft refused the membership change (another one
	// is not applied yet, or a joint configuration must be left first); it
	// committed as an empty entry. Retry once the previous change is done.
	ErrConfChangeRefused = errors.New("raft: configuration change refused")
)

// NotLeaderError: this node does not lead the group, nothing was proposed.
// Send the proposal to Leader (0: unknown, try again shortly).
type NotLeaderError struct{ Group, Leader uint64 }

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("raft group %d: this node is not the leader and knows of none; retry shortly", e.Group)
	}
	return fmt.Sprintf("raft group %d: this node is not the leader; node %d is", e.Group, e.Leader)
}

// tracker decides the outcome of a group's proposals. It is pure: no
// goroutine, no clock (now comes in), no I/O; one goroutine (the group's
// worker) feeds it. The reasoning it rests on, checked against raft
// v3.6's raft.go:
//
//   - A successful RawNode.Propose on a leader of term T appends the entry
//     synchronously to the unstable log at lastIndex+1 with term T
//     (stepLeader MsgProp → appendEntry); a refused proposal
//     (ErrProposalDropped: no leader, a transfer in progress, the
//     uncommitted-size limit) appends nothing.
//   - Only the leader of T creates entries of term T, and the first it
//     creates is the empty entry of becomeLeader; after it come the
//     proposals in call order. A configuration change raft refuses is
//     replaced by an empty EntryNormal in its place; a record proposal
//     stays an EntryData entry (log.PayloadType).
//   - With AsyncStorageWrites each Ready's append carries every unstable
//     entry not yet handed out (nextUnstableEnts), so the proposals made
//     before a Ready appear in it, in order, unless a newer leader's append
//     truncated them from the unstable log first.
//
// So, matching FIFO the proposals of term T against the entries of term T
// in the Ready that follows them (skipping the leader's first empty entry)
// gives each its index. One not found there was truncated before being
// handed out; raft may still have sent it to a follower (r.msgs survives a
// step-down), so its outcome is unknown. A matched proposal is resolved
// when its index is applied: the same term is the entry (committed, its
// records visible), another term proves it lost (a committed entry is
// final). If neither happens before its deadline, the outcome is unknown.
//
// A proposal made with ProposeOptions.AtLeaderDurable (acks=leader)
// resolves earlier: as soon as the append that carries its entry is
// durable on this node (Replica.Process, after the leader's own fsync),
// when that append holds the entry at its index with its term. The leader
// matched it from that same append, so this comes right after the match;
// until then it is resolved as any other (unknown when never matched,
// unknown or lost when the replica stops). Once resolved it is not
// resolved again: the entry may still be replaced by a new leader's and
// never commit, which is what acks=leader accepts.
type tracker struct {
	unmatched []*proposal            // proposed since the last Ready, in call order
	byIndex   map[uint64][]*proposal // matched, by index (several terms may share one)
	queue     []*proposal            // matched, in deadline order (proposal order)
	seenTerm  uint64                 // highest term of any entry seen in an append
	out       []*proposal            // resolved, not yet taken
	live      int                    // proposals neither resolved nor dropped
	early     int                    // matched AtLeaderDurable proposals not resolved yet

	// reads are the ReadIndex requests raft has not answered, by the
	// number carried as their context; the reads of one visit go as one.
	reads    map[uint64]*readReq
	nextRead uint64
	group    uint64 // for errors
}

// readReq is one ReadIndex request: the reads it answers, the term it was
// asked in, and when it is given up.
type readReq struct {
	props    []*proposal
	term     uint64
	deadline time.Time
}

type propKind uint8

const (
	kindRecords propKind = iota
	kindConfChange
	kindRead // Host.ReadIndex: nothing is proposed
)

// proposal is one Propose or ProposeConfChange call.
type proposal struct {
	kind     propKind
	term     uint64
	index    uint64 // 0 until matched
	deadline time.Time
	data     []byte // records: checked and proposed by the worker
	cc       raftpb.ConfChangeV2

	// atDurable: resolve once the entry is durable here (acks=leader),
	// not at commit.
	atDurable bool

	resolved bool
	base     int64
	err      error
	done     func(res Proposed, err error)
	ccDone   func(err error)
}

// complete calls the proposal's callback with its outcome.
func (p *proposal) complete() {
	if p.kind == kindConfChange {
		if p.ccDone != nil {
			p.ccDone(p.err)
		}
		return
	}
	if p.done != nil {
		res := Proposed{Base: p.base, Index: p.index, Term: p.term}
		if p.err != nil {
			res = Proposed{}
		}
		p.done(res, p.err)
	}
}

func newTracker() *tracker {
	return &tracker{byIndex: map[uint64][]*proposal{}, reads: map[uint64]*readReq{}}
}

// read records reads asked of raft as one ReadIndex request of the given
// term, and returns the context number the request carries.
func (t *tracker) read(props []*proposal, term uint64, deadline time.Time) uint64 {
	t.nextRead++
	t.live += len(props)
	t.reads[t.nextRead] = &readReq{props: props, term: term, deadline: deadline}
	return t.nextRead
}

// readStates resolves the reads raft answered: each with the index up to
// which the state must be applied, and endAt's data offset after it.
func (t *tracker) readStates(rss []etcdraft.ReadState, endAt func(index uint64) (int64, bool)) {
	for _, rs := range rss {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := binary.BigEndian.Uint64(rs.RequestCtx)
		req := t.reads[id]
		if req == nil {
			continue
		}
		delete(t.reads, id)
		end, ok := endAt(rs.Index)
		for _, p := range req.props {
			if !ok {
				t.resolve(p, 0, fmt.Errorf("%w: read index %d is past this leader's log", ErrProposalLost, rs.Index))
				continue
			}
			p.index = rs.Index
			t.resolve(p, end, nil)
		}
	}
}

// dropReads resolves every read raft has not answered with err: raft
// forgets them when the leadership changes.
func (t *tracker) dropReads(err error) {
	for id, req := range t.reads {
		for _, p := range req.props {
			t.resolve(p, 0, err)
		}
		delete(t.reads, id)
	}
}

// expireReads gives up the reads not answered by their deadline (nothing
// was done: safe to ask again).
func (t *tracker) expireReads(now time.Time) {
	for id, req := range t.reads {
		if now.Before(req.deadline) {
			continue
		}
		for _, p := range req.props {
			t.resolve(p, 0, fmt.Errorf("%w: read not confirmed by a quorum within the proposal timeout (term %d)", ErrProposalLost, req.term))
		}
		delete(t.reads, id)
	}
}

// resolve sets p's outcome once; later calls are ignored.
func (t *tracker) resolve(p *proposal, base int64, err error) {
	if p.resolved {
		return
	}
	if p.atDurable && p.index != 0 {
		t.early--
	}
	p.resolved, p.base, p.err = true, base, err
	p.data = nil
	t.out = append(t.out, p)
	t.live--
}

// reject resolves a proposal that never reached raft.
func (t *tracker) reject(p *proposal, err error) {
	t.live++
	t.resolve(p, 0, err)
}

// proposed records p, accepted by raft as leader of term p.term.
func (t *tracker) proposed(p *proposal) {
	t.live++
	t.unmatched = append(t.unmatched, p)
}

// ready matches the unmatched proposals against the entries of w's
// appends; those not found are resolved as unknown.
func (t *tracker) ready(w *Work) {
	if ss := w.SoftState; ss != nil && ss.RaftState != etcdraft.StateLeader {
		t.dropReads(&NotLeaderError{Group: t.group, Leader: transport.NodeOf(ss.Lead)})
	}
	for _, a := range w.Appends {
		t.appended(a.Entries)
	}
	for _, p := range t.unmatched {
		t.resolve(p, 0, fmt.Errorf("%w: leadership changed (term %d) before the entry was handed to storage", ErrOutcomeUnknown, p.term))
	}
	clear(t.unmatched)
	t.unmatched = t.unmatched[:0]
}

func (t *tracker) appended(ents []raftpb.Entry) {
	for _, e := range ents {
		first := e.Term > t.seenTerm
		if first {
			t.seenTerm = e.Term
		}
		if len(t.unmatched) == 0 || e.Term != t.unmatched[0].term {
			continue
		}
		p := t.unmatched[0]
		switch {
		case e.Type == raftpb.EntryNormal && len(e.Data) == 0 && first:
			continue // the leader's own empty entry, first of its term
		case e.Type == raftpb.EntryNormal && isLogStart(e.Data):
			continue // proposed by the replica itself (retention), not through the Host
		case isLeaveJoint(e) && (p.kind != kindConfChange || !p.cc.LeaveJoint()):
			continue // raft's own leave of a joint configuration (AutoLeave)
		case e.Type == raftpb.EntryNormal && slog.PayloadType(e.Data) == slog.EntryData && p.kind == kindRecords,
			(e.Type == raftpb.EntryConfChange || e.Type == raftpb.EntryConfChangeV2) && p.kind == kindConfChange:
			t.match(p, e.Index)
		case e.Type == raftpb.EntryNormal && len(e.Data) == 0 && p.kind == kindConfChange:
			t.unmatched = t.unmatched[1:]
			t.resolve(p, 0, ErrConfChangeRefused)
		default:
			// An entry of our term that is not the next proposal: the
			// reasoning above does not hold. Say so rather than guess.
			for _, q := range t.unmatched {
				t.resolve(q, 0, fmt.Errorf("%w: entry %d of term %d (%v) does not match the proposals made in that term", ErrOutcomeUnknown, e.Index, e.Term, e.Type))
			}
			clear(t.unmatched)
			t.unmatched = t.unmatched[:0]
		}
	}
}

// isLeaveJoint reports whether e leaves a joint configuration: an empty
// ConfChangeV2, which raft appends by itself once a joint configuration
// applies (AutoLeave), and which a Host proposes to leave one explicitly.
func isLeaveJoint(e raftpb.Entry) bool {
	if e.Type != raftpb.EntryConfChangeV2 {
		return false
	}
	var cc raftpb.ConfChangeV2
	return cc.Unmarshal(e.Data) == nil && cc.LeaveJoint()
}

func (t *tracker) match(p *proposal, index uint64) {
	t.unmatched = t.unmatched[1:]
	p.index = index
	t.byIndex[index] = append(t.byIndex[index], p)
	t.queue = append(t.queue, p)
	if p.atDurable {
		t.early++
	}
}

// durable resolves the AtLeaderDurable proposals matched at the indexes of
// ents, which are now durable on this node (the append carrying them
// fsynced): one whose entry is there with its term succeeds, with the data
// offset of its first record (baseOf: ok false if unknown, and then the
// proposal waits for its commit like any other). Another term at its index
// proves nothing yet (that entry may be replaced in turn): the proposal is
// left to apply or its deadline.
func (t *tracker) durable(ents []raftpb.Entry, baseOf func(index uint64) (int64, bool)) {
	if t.early == 0 {
		return
	}
	for _, e := range ents {
		var done []*proposal
		for _, p := range t.byIndex[e.Index] {
			if !p.atDurable || p.resolved || p.term != e.Term {
				continue
			}
			base, ok := baseOf(e.Index)
			if !ok {
				continue
			}
			t.resolve(p, base, nil)
			done = append(done, p)
		}
		for _, p := range done {
			t.unindex(p) // applying the index later finds nothing to resolve
		}
	}
}

// applied resolves the proposals matched at e.Index: base is the data
// offset of e's first record.
func (t *tracker) applied(e raftpb.Entry, base int64) {
	ps, ok := t.byIndex[e.Index]
	if !ok {
		return
	}
	delete(t.byIndex, e.Index)
	for _, p := range ps {
		if p.term == e.Term {
			t.resolve(p, base, nil)
		} else {
			t.resolve(p, 0, fmt.Errorf("%w: index %d committed with an entry of term %d, the proposal was appended in term %d", ErrProposalLost, e.Index, e.Term, p.term))
		}
	}
}

// expire resolves as unknown the matched proposals whose deadline is past.
func (t *tracker) expire(now time.Time) {
	n := 0
	for n < len(t.queue) && (t.queue[n].resolved || !now.Before(t.queue[n].deadline)) {
		p := t.queue[n]
		if !p.resolved {
			t.resolve(p, 0, fmt.Errorf("%w: not committed within the proposal timeout (index %d, term %d)", ErrOutcomeUnknown, p.index, p.term))
			t.unindex(p)
		}
		n++
	}
	if n > 0 {
		clear(t.queue[:n])
		t.queue = t.queue[n:]
	}
}

func (t *tracker) unindex(p *proposal) {
	ps := t.byIndex[p.index]
	for i, q := range ps {
		if q == p {
			ps = append(ps[:i], ps[i+1:]...)
			break
		}
	}
	if len(ps) == 0 {
		delete(t.byIndex, p.index)
	} else {
		t.byIndex[p.index] = ps
	}
}

// failAll resolves every pending proposal with err.
func (t *tracker) failAll(err error) {
	t.dropReads(err)
	for _, p := range t.unmatched {
		t.resolve(p, 0, err)
	}
	t.unmatched = nil
	for _, p := range t.queue {
		t.resolve(p, 0, err)
	}
	t.queue = nil
	clear(t.byIndex)
	t.early = 0
}

// take returns the resolved proposals (to complete outside any lock).
func (t *tracker) take() []*proposal {
	out := t.out
	t.out = nil
	return out
}

// pending is the number of proposals not resolved yet.
func (t *tracker) pending() int { return t.live }
