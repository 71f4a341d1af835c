package raft

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// outcome records what a proposal's done was called with.
type outcome struct {
	calls       int
	base        int64
	err         error
	index, term uint64
}

func trackRecords(t *tracker, term uint64, now time.Time, o *outcome) *proposal {
	p := &proposal{kind: kindRecords, term: term, deadline: now.Add(time.Second), done: func(r Proposed, err error) { o.calls++; o.base, o.err = r.Base, err }}
	t.proposed(p)
	return p
}

// trackDurable is trackRecords with AtLeaderDurable (acks=leader); o.index
// gets the entry's index.
func trackDurable(t *tracker, term uint64, now time.Time, o *outcome) *proposal {
	p := &proposal{kind: kindRecords, term: term, atDurable: true, deadline: now.Add(time.Second), done: func(r Proposed, err error) {
		o.calls++
		o.base, o.err, o.index, o.term = r.Base, err, r.Index, r.Term
	}}
	t.proposed(p)
	return p
}

func trackConf(t *tracker, term uint64, now time.Time, o *outcome) *proposal {
	p := &proposal{kind: kindConfChange, term: term, deadline: now.Add(time.Second), ccDone: func(err error) { o.calls++; o.err = err }}
	t.proposed(p)
	return p
}

func completeAll(t *tracker) {
	for _, p := range t.take() {
		p.complete()
	}
}

func recEntry(index, term uint64) raftpb.Entry {
	data := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: []byte("v")}}, 1)
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryNormal, Data: data}
}
func emptyEntry(index, term uint64) raftpb.Entry {
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryNormal}
}
func ccEntry(index, term uint64) raftpb.Entry {
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryConfChangeV2, Data: []byte{1}}
}

func readyOf(ents ...[]raftpb.Entry) *Work {
	w := &Work{}
	for _, e := range ents {
		w.Appends = append(w.Appends, Append{Entries: e})
	}
	return w
}

// TestTrackerMatchesFIFO: the proposals of a term get the indexes of that
// term's record and conf-change entries in order, skipping the leader's
// first empty entry; a refused conf change (an empty entry in its place)
// completes with ErrConfChangeRefused; each resolves at apply: same term
// → success with its base, another term → lost.
func TestTrackerMatchesFIFO(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a, b, c, d outcome
	trackRecords(tr, 5, now, &a)
	trackConf(tr, 5, now, &b)
	trackConf(tr, 5, now, &c) // refused by raft: an empty entry
	trackRecords(tr, 5, now, &d)
	// An entry of an older term from another leader first, then this
	// node's term 5: its empty entry, then the proposals.
	tr.ready(readyOf([]raftpb.Entry{recEntry(9, 4)}, []raftpb.Entry{emptyEntry(10, 5), recEntry(11, 5), ccEntry(12, 5)}, []raftpb.Entry{emptyEntry(13, 5), recEntry(14, 5)}))
	completeAll(tr)
	if c.calls != 1 || !errors.Is(c.err, ErrConfChangeRefused) {
		t.Fatalf("refused conf change: %+v", c)
	}
	if a.calls+b.calls+d.calls != 0 || tr.pending() != 3 {
		t.Fatalf("completed before apply: %+v %+v %+v, pending %d", a, b, d, tr.pending())
	}
	tr.applied(emptyEntry(10, 5), 100)
	tr.applied(recEntry(11, 5), 100)
	tr.applied(ccEntry(12, 5), 101)
	tr.applied(emptyEntry(13, 5), 101)
	tr.applied(recEntry(14, 6), 101) // another leader's entry committed at 14
	completeAll(tr)
	if a.calls != 1 || a.err != nil || a.base != 100 {
		t.Fatalf("records at 11: %+v", a)
	}
	if b.calls != 1 || b.err != nil {
		t.Fatalf("conf change at 12: %+v", b)
	}
	if d.calls != 1 || !errors.Is(d.err, ErrProposalLost) {
		t.Fatalf("records at 14, overwritten by term 6: %+v", d)
	}
	if tr.pending() != 0 {
		t.Fatalf("pending %d", tr.pending())
	}
}

// TestTrackerLeadershipChangeBeforeReady: proposals of term 5 whose entries
// were truncated from the unstable log before the Ready (a newer leader's
// append) are unknown, never matched to the newer leader's entries of
// another term; proposals dropped by raft are lost.
func TestTrackerLeadershipChangeBeforeReady(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a, b outcome
	trackRecords(tr, 5, now, &a)
	trackRecords(tr, 5, now, &b)
	tr.ready(readyOf([]raftpb.Entry{recEntry(10, 6), recEntry(11, 6)}))
	tr.reject(&proposal{kind: kindRecords, done: func(Proposed, error) {}}, ErrProposalLost)
	completeAll(tr)
	for _, o := range []outcome{a, b} {
		if o.calls != 1 || !errors.Is(o.err, ErrOutcomeUnknown) {
			t.Fatalf("truncated before the Ready: %+v", o)
		}
	}
	// Applying the newer leader's entries later resolves nothing twice.
	tr.applied(recEntry(10, 6), 0)
	if len(tr.take()) != 0 || tr.pending() != 0 {
		t.Fatalf("resolved twice")
	}
}

// TestTrackerPartialMatchAndTimeout: one proposal matched, the next not
// (its entry never came): the second is unknown at once; the first, never
// applied, is unknown at its deadline and not before.
func TestTrackerPartialMatchAndTimeout(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a, b outcome
	trackRecords(tr, 3, now, &a)
	trackRecords(tr, 3, now, &b)
	tr.ready(readyOf([]raftpb.Entry{emptyEntry(1, 3), recEntry(2, 3)}))
	completeAll(tr)
	if a.calls != 0 || b.calls != 1 || !errors.Is(b.err, ErrOutcomeUnknown) {
		t.Fatalf("a %+v b %+v", a, b)
	}
	tr.expire(now.Add(999 * time.Millisecond))
	completeAll(tr)
	if a.calls != 0 {
		t.Fatalf("expired early: %+v", a)
	}
	tr.expire(now.Add(time.Second))
	completeAll(tr)
	if a.calls != 1 || !errors.Is(a.err, ErrOutcomeUnknown) {
		t.Fatalf("at the deadline: %+v", a)
	}
	tr.applied(recEntry(2, 3), 7) // too late: resolved already
	completeAll(tr)
	if a.calls != 1 || tr.pending() != 0 {
		t.Fatalf("resolved twice: %+v", a)
	}
}

// TestTrackerMismatchIsUnknown: an entry of the proposals' term that is
// not the next proposal's kind (the reasoning broken) makes the unmatched
// proposals unknown instead of guessing.
func TestTrackerMismatchIsUnknown(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a outcome
	trackConf(tr, 2, now, &a)
	tr.ready(readyOf([]raftpb.Entry{emptyEntry(1, 2), recEntry(2, 2)}))
	completeAll(tr)
	if a.calls != 1 || !errors.Is(a.err, ErrOutcomeUnknown) {
		t.Fatalf("%+v", a)
	}
}

// TestTrackerTwoTermsSameIndex: a proposal of term 2 at index 5 lost to a
// truncation, and one of term 4 at the same index: applying (5, 4)
// resolves the first as lost and the second as committed.
func TestTrackerTwoTermsSameIndex(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a, b outcome
	trackRecords(tr, 2, now, &a)
	tr.ready(readyOf([]raftpb.Entry{emptyEntry(4, 2), recEntry(5, 2)}))
	trackRecords(tr, 4, now, &b)
	tr.ready(readyOf([]raftpb.Entry{emptyEntry(4, 4), recEntry(5, 4)}))
	tr.applied(emptyEntry(4, 4), 40)
	tr.applied(recEntry(5, 4), 40)
	completeAll(tr)
	if a.calls != 1 || !errors.Is(a.err, ErrProposalLost) || b.calls != 1 || b.err != nil || b.base != 40 {
		t.Fatalf("a %+v b %+v", a, b)
	}
}

// bases gives the data offset of entry i as 10*i (the log's, in the
// replica: Replica.entryBase).
func bases(i uint64) (int64, bool) { return int64(10 * i), true }

// TestTrackerAtDurable: an AtLeaderDurable proposal completes when the
// append carrying its entry is durable — not at the match (the Ready,
// before the fsync), and never again at the commit; a commit-mode
// proposal beside it still waits for the commit.
func TestTrackerAtDurable(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a, b outcome
	trackDurable(tr, 5, now, &a)
	trackRecords(tr, 5, now, &b)
	appended := []raftpb.Entry{emptyEntry(10, 5), recEntry(11, 5), recEntry(12, 5)}
	tr.ready(readyOf(appended))
	completeAll(tr)
	if a.calls != 0 || b.calls != 0 {
		t.Fatalf("completed at the match, before the entry is durable: a %+v b %+v", a, b)
	}
	tr.durable(appended, bases)
	completeAll(tr)
	if a.calls != 1 || a.err != nil || a.base != 110 || a.index != 11 || a.term != 5 {
		t.Fatalf("acks=leader at durability: %+v", a)
	}
	if b.calls != 0 {
		t.Fatalf("acks=all completed at durability: %+v", b)
	}
	tr.durable(appended, bases) // the same entries again (a conflicting rewrite): nothing twice
	tr.applied(emptyEntry(10, 5), 110)
	tr.applied(recEntry(11, 5), 110)
	tr.applied(recEntry(12, 5), 111)
	tr.expire(now.Add(time.Hour))
	completeAll(tr)
	if a.calls != 1 || b.calls != 1 || b.err != nil || b.base != 111 {
		t.Fatalf("after the commit: a %+v b %+v", a, b)
	}
	if tr.pending() != 0 || tr.early != 0 {
		t.Fatalf("pending %d, early %d", tr.pending(), tr.early)
	}
}

// TestTrackerAtDurableLaterLost: once an acks=leader proposal succeeded,
// a new leader's entry committed at its index does not complete it again
// (the lossy part of acks=leader: docs/semantics.md).
func TestTrackerAtDurableLaterLost(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a outcome
	trackDurable(tr, 3, now, &a)
	ents := []raftpb.Entry{emptyEntry(4, 3), recEntry(5, 3)}
	tr.ready(readyOf(ents))
	tr.durable(ents, bases)
	tr.applied(emptyEntry(4, 4), 40)
	tr.applied(recEntry(5, 4), 40) // term 4's entry committed at 5
	completeAll(tr)
	if a.calls != 1 || a.err != nil || a.base != 50 {
		t.Fatalf("%+v", a)
	}
}

// TestTrackerAtDurableMismatch: durability of an entry of another term at
// the proposal's index is no success (the proposal then resolves as any
// other: lost when the other entry commits); nor is a durable append that
// does not hold its index; a proposal never matched is unknown, and one
// whose replica stopped is unknown too, never a success.
func TestTrackerAtDurableMismatch(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a, b, c outcome
	trackDurable(tr, 2, now, &a)
	tr.ready(readyOf([]raftpb.Entry{emptyEntry(7, 2), recEntry(8, 2)}))
	tr.durable([]raftpb.Entry{recEntry(8, 3)}, bases)                   // term 3 at index 8
	tr.durable([]raftpb.Entry{emptyEntry(7, 2), recEntry(9, 2)}, bases) // not index 8
	completeAll(tr)
	if a.calls != 0 {
		t.Fatalf("success on another entry's durability: %+v", a)
	}
	tr.applied(emptyEntry(7, 2), 70)
	tr.applied(recEntry(8, 3), 70)
	completeAll(tr)
	if a.calls != 1 || !errors.Is(a.err, ErrProposalLost) {
		t.Fatalf("index 8 committed with term 3: %+v", a)
	}

	trackDurable(tr, 4, now, &b) // its entry never comes: truncated before the Ready
	tr.ready(readyOf([]raftpb.Entry{recEntry(9, 5)}))
	completeAll(tr)
	if b.calls != 1 || !errors.Is(b.err, ErrOutcomeUnknown) {
		t.Fatalf("never handed to storage: %+v", b)
	}

	trackDurable(tr, 6, now, &c) // matched, then the replica stops before the fsync
	tr.ready(readyOf([]raftpb.Entry{emptyEntry(10, 6), recEntry(11, 6)}))
	tr.failAll(ErrOutcomeUnknown)
	tr.durable([]raftpb.Entry{recEntry(11, 6)}, bases)
	completeAll(tr)
	if c.calls != 1 || !errors.Is(c.err, ErrOutcomeUnknown) {
		t.Fatalf("replica stopped before durability: %+v", c)
	}
	if tr.pending() != 0 || tr.early != 0 {
		t.Fatalf("pending %d, early %d", tr.pending(), tr.early)
	}
}

// TestTrackerAtDurableUnknownBase: without the entry's base (not written
// by this replica) an AtLeaderDurable proposal is not answered at
// durability; it completes at its commit like any other.
func TestTrackerAtDurableUnknownBase(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a outcome
	trackDurable(tr, 2, now, &a)
	ents := []raftpb.Entry{emptyEntry(1, 2), recEntry(2, 2)}
	tr.ready(readyOf(ents))
	tr.durable(ents, func(uint64) (int64, bool) { return 0, false })
	completeAll(tr)
	if a.calls != 0 {
		t.Fatalf("%+v", a)
	}
	tr.applied(recEntry(2, 2), 20)
	completeAll(tr)
	if a.calls != 1 || a.err != nil || a.base != 20 {
		t.Fatalf("%+v", a)
	}
	if tr.early != 0 {
		t.Fatalf("early %d", tr.early)
	}
}

// TestTrackerSkipsRaftsAutoLeave: once a joint configuration applies, raft
// itself appends an empty ConfChangeV2 to leave it (AutoLeave). That entry
// is raft's, not a proposal's: the records proposed around it are matched
// and commit as usual. (Before: every proposal after it was failed with
// ErrOutcomeUnknown, "does not match the proposals made in that term" —
// publishes failing OUTCOME_UNKNOWN while replicas moved onto a joining
// node.) A leave this Host proposed itself is still matched to it.
func TestTrackerSkipsRaftsAutoLeave(t *testing.T) {
	now := time.Unix(0, 0)
	tr := newTracker()
	var a, b, c outcome
	trackRecords(tr, 5, now, &a)
	trackRecords(tr, 5, now, &b)
	leave := func(index uint64) raftpb.Entry {
		return raftpb.Entry{Index: index, Term: 5, Type: raftpb.EntryConfChangeV2} // raft's: ConfChangeV2{} marshals to nothing
	}
	tr.ready(readyOf([]raftpb.Entry{recEntry(10, 5), leave(11), recEntry(12, 5)}))
	p := &proposal{kind: kindConfChange, term: 5, deadline: now.Add(time.Second), cc: raftpb.ConfChangeV2{}, ccDone: func(err error) { c.calls++; c.err = err }}
	tr.proposed(p)
	tr.ready(readyOf([]raftpb.Entry{leave(13)}))
	for _, e := range []raftpb.Entry{recEntry(10, 5), leave(11), recEntry(12, 5), leave(13)} {
		tr.applied(e, 100)
	}
	completeAll(tr)
	for name, o := range map[string]outcome{"records before the leave": a, "records after it": b, "the Host's own leave": c} {
		if o.calls != 1 || o.err != nil {
			t.Errorf("%s: %+v, want committed", name, o)
		}
	}
}
