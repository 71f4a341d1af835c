package raft

import (
	"context"
	stdslog "log/slog"
	"testing"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
)

// fuzzHost is node 1 of a group of voters 1, 2 and 3 whose leader (node 2,
// term 2) has appended entries 4 to 6 and committed up to 5 on it: a
// follower with a committed prefix, an uncommitted tail and a leader, what
// a hostile peer's messages meet.
type fuzzHost struct {
	t      testing.TB
	h      *Host
	p      *slog.Partition
	stop   func()
	sent   int
	terms  []uint64 // terms of the committed entries 1..commit
	commit uint64
}

const fuzzGroup = 7

func newFuzzHost(t testing.TB) *fuzzHost {
	t.Helper()
	fs := slog.NewMemFS()
	s, err := slog.OpenStore("/data", slog.Options{FS: fs, MaintenanceInterval: time.Hour, Logger: stdslog.New(stdslog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	storeDone := make(chan error, 1)
	go func() { storeDone <- s.Run(ctx) }()
	fh := &fuzzHost{t: t}
	h, err := NewHost(HostConfig{NodeID: 1, TickInterval: -1, Workers: 2, Send: func(ms []transport.Message) { fh.sent += len(ms) }})
	if err != nil {
		t.Fatal(err)
	}
	hostDone := make(chan error, 1)
	go func() { hostDone <- h.Run(ctx) }()
	fh.stop = func() {
		cancel()
		<-hostDone
		for _, g := range h.Groups() {
			_ = h.Remove(g)
		}
		<-storeDone
		_ = s.Close()
	}
	p, err := s.Partition("p")
	if err != nil {
		fh.stop()
		t.Fatal(err)
	}
	if err := h.Add(fuzzGroup, ReplicaConfig{Partition: p, FS: fs, Dir: "/raft/p", Voters: []uint64{1, 2, 3}}); err != nil {
		fh.stop()
		t.Fatal(err)
	}
	fh.h, fh.p = h, p
	rec := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: []byte("v")}}, 1_700_000_000_000)
	fh.deliver(raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Term: 2, LogTerm: 1, Index: 3, Commit: 5,
		Entries: []raftpb.Entry{{Term: 2, Index: 4}, {Term: 2, Index: 5, Data: rec}, {Term: 2, Index: 6, Data: rec}}})
	st := fh.status()
	if st.CommitIndex != 5 || st.Err != nil {
		fh.stop()
		t.Fatalf("set-up: %+v", st)
	}
	fh.commit = 5
	for i := uint64(1); i <= 5; i++ {
		term, err := p.Term(i)
		if err != nil {
			fh.stop()
			t.Fatal(err)
		}
		fh.terms = append(fh.terms, term)
	}
	return fh
}

// lead makes node 1 the leader at term 3: it campaigns, node 2 grants its
// pre-vote and vote, and node 2 acknowledges the new leader's empty entry
// (index 7, committed). A hostile peer's messages then meet a leader.
func (fh *fuzzHost) lead() {
	fh.t.Helper()
	if err := fh.h.Campaign(fuzzGroup); err != nil {
		fh.t.Fatal(err)
	}
	fh.h.sched.waitIdle()
	fh.deliver(raftpb.Message{Type: raftpb.MsgPreVoteResp, From: 2, To: 1, Term: 3})
	fh.deliver(raftpb.Message{Type: raftpb.MsgVoteResp, From: 2, To: 1, Term: 3})
	fh.deliver(raftpb.Message{Type: raftpb.MsgAppResp, From: 2, To: 1, Term: 3, Index: 7})
	if st := fh.status(); !st.IsLeader || st.Term != 3 || st.CommitIndex != 7 || st.Err != nil {
		fh.t.Fatalf("set-up: node 1 does not lead with its entry committed: %+v", st)
	}
	fh.commit = 7
	fh.terms = append(fh.terms, 2, 3)
}

// elapse ticks the host n times, waiting for the work of each visit (a
// visit takes up to maxTicksPerVisit ticks).
func (fh *fuzzHost) elapse(n int) {
	for i := range n {
		fh.h.Tick()
		if (i+1)%maxTicksPerVisit == 0 || i == n-1 {
			fh.h.sched.waitIdle()
		}
	}
}

// deliver hands m to the host as the transport would (MsgSnap on the
// snapshot path) and waits until the host has processed it.
func (fh *fuzzHost) deliver(m raftpb.Message) {
	tm := transport.Message{Group: fuzzGroup, Msg: m}
	if m.Type == raftpb.MsgSnap {
		_ = fh.h.HandleSnapshot(context.Background(), tm)
	} else {
		_ = fh.h.HandleMessage(tm)
	}
	fh.h.sched.waitIdle()
}

func (fh *fuzzHost) status() GroupStatus {
	st, _ := fh.h.Status(fuzzGroup)
	return st
}

// check: the replica runs, nothing committed was lost or replaced, and the
// saved commit index lies within the log.
func (fh *fuzzHost) check(after []raftpb.Message) {
	fh.t.Helper()
	st := fh.status()
	if st.Err != nil {
		fh.t.Fatalf("after %v: the replica stopped: %v", describeMsgs(after), st.Err)
	}
	if st.CommitIndex < fh.commit {
		fh.t.Fatalf("after %v: commit index went back from %d to %d", describeMsgs(after), fh.commit, st.CommitIndex)
	}
	for i, want := range fh.terms {
		idx := uint64(i + 1)
		if idx < fh.p.FirstIndex() {
			continue // compacted to a snapshot past it
		}
		if got, err := fh.p.Term(idx); err != nil || got != want {
			fh.t.Fatalf("after %v: committed entry %d has term %d (%v), was %d", describeMsgs(after), idx, got, err, want)
		}
	}
	if last := fh.p.LastIndex(); st.CommitIndex > last {
		fh.t.Fatalf("after %v: commit index %d past the log's last index %d", describeMsgs(after), st.CommitIndex, last)
	}
}

func describeMsgs(ms []raftpb.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, etcdraft.DescribeMessage(m, nil))
	}
	return out
}

// asFromPeer makes m pass what the transport checks of every message
// (checkMessage): from a member of the group on another node, to this
// replica, of a type a peer may send. ok is false for a message the
// transport never delivers.
func asFromPeer(m *raftpb.Message) bool {
	if n := transport.NodeOf(m.From); n != 2 && n != 3 {
		m.From = 2 + m.From%2
	}
	m.To = 1
	return raftpb.MessageType_name[int32(m.Type)] != "" && !etcdraft.IsLocalMsg(m.Type)
}

// FuzzHostStep feeds two raft messages a peer could send (any bytes that
// decode as a raftpb.Message, made to pass the transport's checks) to a
// Host's follower replica. No message may panic the node, stop the
// replica, lose or replace a committed entry, or leave a commit index past
// the log: what raft would panic on is refused before raft sees it and
// counted (HostStats.Malformed). Seeds: testdata/fuzz/FuzzHostStep.
func FuzzHostStep(f *testing.F) {
	f.Fuzz(func(t *testing.T, b1, b2 []byte) { fuzzHostStep(t, false, b1, b2) })
}

// FuzzHostStepLeader is FuzzHostStep against a Host that leads the group
// (acknowledgements, votes and forwarded requests from followers meet a
// leader's raft). Seeds: testdata/fuzz/FuzzHostStepLeader.
func FuzzHostStepLeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b1, b2 []byte) { fuzzHostStep(t, true, b1, b2) })
}

func fuzzHostStep(t *testing.T, lead bool, b1, b2 []byte) {
	var ms []raftpb.Message
	for _, b := range [][]byte{b1, b2} {
		var m raftpb.Message
		if m.Unmarshal(b) != nil || !asFromPeer(&m) {
			continue
		}
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		return
	}
	fh := newFuzzHost(t)
	defer fh.stop()
	if lead {
		fh.lead()
	}
	for i, m := range ms {
		fh.deliver(m)
		fh.check(ms[:i+1])
	}
	fh.elapse(2 * DefaultElectionTicks) // what the messages left for later: an election, heartbeats
	fh.check(ms)
}

// hostileSeeds are the messages raft would panic on or a replica would stop
// at, each with an honest message after it.
type hostileSeed struct {
	name string
	msgs [2]raftpb.Message
}

func (s hostileSeed) encode(t testing.TB) (b1, b2 []byte) {
	b1, err := s.msgs[0].Marshal()
	if err == nil {
		b2, err = s.msgs[1].Marshal()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b1, b2
}

func hostileSeeds() []hostileSeed {
	rec := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: []byte("w")}}, 1_700_000_000_000)
	hb := raftpb.Message{Type: raftpb.MsgHeartbeat, From: 2, To: 1, Term: 2, Commit: 6}
	app := func(index, logTerm, commit uint64, ents ...raftpb.Entry) raftpb.Message {
		return raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Term: 2, LogTerm: logTerm, Index: index, Commit: commit, Entries: ents}
	}
	cc, _ := (&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode, NodeID: 1}).Marshal()
	var many raftpb.ConfChangeV2
	for id := uint64(10); id < 10+MaxConfStateIDs; id++ {
		many.Changes = append(many.Changes, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id})
	}
	ccMany, _ := many.Marshal()
	ccAll, _ := (&raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode, NodeID: 1}, {Type: raftpb.ConfChangeRemoveNode, NodeID: 2}, {Type: raftpb.ConfChangeRemoveNode, NodeID: 3}}}).Marshal()
	return []hostileSeed{
		{"honest-append", [2]raftpb.Message{app(6, 2, 6, raftpb.Entry{Term: 2, Index: 7, Data: rec}), hb}},
		{"heartbeat-commit-past-log", [2]raftpb.Message{{Type: raftpb.MsgHeartbeat, From: 2, To: 1, Term: 2, Commit: 999_999_999}, hb}},
		{"append-commit-past-log", [2]raftpb.Message{app(6, 2, 999_999_999, raftpb.Entry{Term: 2, Index: 7}), hb}},
		// Entries whose indexes do not follow the message's.
		{"entry-index-below-commit", [2]raftpb.Message{app(6, 2, 6, raftpb.Entry{Term: 2, Index: 2}), hb}},
		{"entry-indexes-out-of-order", [2]raftpb.Message{app(6, 2, 6, raftpb.Entry{Term: 2, Index: 9}, raftpb.Entry{Term: 2, Index: 8}), hb}},
		// Entries whose terms go back, or past the message's.
		{"entry-term-below-prev", [2]raftpb.Message{app(6, 2, 6, raftpb.Entry{Term: 1, Index: 7}), hb}},
		{"entry-term-past-message", [2]raftpb.Message{app(6, 2, 6, raftpb.Entry{Term: 3, Index: 7}, raftpb.Entry{Term: 2, Index: 8}), hb}},
		{"entry-term-zero", [2]raftpb.Message{app(6, 2, 6, raftpb.Entry{Term: 0, Index: 7}), hb}},
		// Payloads the log refuses, unknown entry types, conf changes that
		// do not decode or that raft refuses to apply.
		{"records-bad-crc", [2]raftpb.Message{app(6, 2, 7, raftpb.Entry{Term: 2, Index: 7, Data: append(append([]byte(nil), rec[:len(rec)-1]...), rec[len(rec)-1]^1)}), hb}},
		{"entry-type-unknown", [2]raftpb.Message{app(6, 2, 7, raftpb.Entry{Term: 2, Index: 7, Type: 9}), hb}},
		{"confchange-undecodable", [2]raftpb.Message{app(6, 2, 7, raftpb.Entry{Term: 2, Index: 7, Type: raftpb.EntryConfChange, Data: []byte{0xff}}), hb}},
		{"confchange-remove-self", [2]raftpb.Message{app(6, 2, 7, raftpb.Entry{Term: 2, Index: 7, Type: raftpb.EntryConfChange, Data: cc}), hb}},
		{"confchange-too-many-learners", [2]raftpb.Message{app(6, 2, 7, raftpb.Entry{Term: 2, Index: 7, Type: raftpb.EntryConfChangeV2, Data: ccMany}), hb}},
		{"confchange-remove-all-voters", [2]raftpb.Message{app(6, 2, 7, raftpb.Entry{Term: 2, Index: 7, Type: raftpb.EntryConfChangeV2, Data: ccAll}), hb}},
		// A huge term, an unknown type.
		{"huge-term", [2]raftpb.Message{{Type: raftpb.MsgApp, From: 3, To: 1, Term: 1 << 63, LogTerm: 2, Index: 6, Commit: 6}, hb}},
		{"last-term", [2]raftpb.Message{{Type: raftpb.MsgHeartbeat, From: 3, To: 1, Term: 1<<64 - 1, Commit: 5}, hb}},
		{"message-type-unknown", [2]raftpb.Message{{Type: raftpb.MessageType(99), From: 2, To: 1, Term: 2}, hb}},
		// Snapshots with bogus metadata.
		{"snapshot-voter-and-learner", [2]raftpb.Message{{Type: raftpb.MsgSnap, From: 2, To: 1, Term: 2, Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 2,
			ConfState: raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{2}}}, Data: encodeSnapshotData(snapshotData{Offset: 10})}}, hb}},
		{"snapshot-negative-offset", [2]raftpb.Message{{Type: raftpb.MsgSnap, From: 2, To: 1, Term: 2, Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 1,
			ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: encodeSnapshotData(snapshotData{Offset: -5})}}, hb}},
		{"snapshot-below-commit", [2]raftpb.Message{{Type: raftpb.MsgSnap, From: 2, To: 1, Term: 2, Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 3, Term: 2,
			ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: encodeSnapshotData(snapshotData{Offset: 0})}}, hb}},
		// Responses and votes with nonsense indexes.
		{"appresp-huge-index", [2]raftpb.Message{{Type: raftpb.MsgAppResp, From: 2, To: 1, Term: 2, Index: 1 << 60, RejectHint: 1 << 60, Reject: true}, hb}},
		{"vote-huge-index", [2]raftpb.Message{{Type: raftpb.MsgVote, From: 3, To: 1, Term: 3, LogTerm: 1 << 40, Index: 1 << 60}, hb}},
		{"timeout-now", [2]raftpb.Message{{Type: raftpb.MsgTimeoutNow, From: 2, To: 1, Term: 2}, hb}},
	}
}

// leaderSeeds are messages a follower could send a leader that raft would
// panic on, each with an honest acknowledgement after it.
func leaderSeeds() []hostileSeed {
	ack := raftpb.Message{Type: raftpb.MsgAppResp, From: 3, To: 1, Term: 3, Index: 7}
	ctx := []raftpb.Entry{{Data: []byte("read-1")}}
	return []hostileSeed{
		{"honest-ack", [2]raftpb.Message{{Type: raftpb.MsgHeartbeatResp, From: 2, To: 1, Term: 3}, ack}},
		{"ack-past-log", [2]raftpb.Message{{Type: raftpb.MsgAppResp, From: 2, To: 1, Term: 3, Index: 1 << 40}, ack}},
		{"reject-hint-past-log", [2]raftpb.Message{{Type: raftpb.MsgAppResp, From: 2, To: 1, Term: 3, Index: 7, Reject: true, RejectHint: 1 << 40, LogTerm: 9}, ack}},
		{"read-index-no-context", [2]raftpb.Message{{Type: raftpb.MsgReadIndex, From: 2, To: 1}, ack}},
		{"read-index-with-term", [2]raftpb.Message{{Type: raftpb.MsgReadIndex, From: 2, To: 1, Term: 3, Entries: ctx}, ack}},
		{"read-index-resp-no-context", [2]raftpb.Message{{Type: raftpb.MsgReadIndexResp, From: 2, To: 1, Term: 3}, ack}},
		{"transfer-leader-with-term", [2]raftpb.Message{{Type: raftpb.MsgTransferLeader, From: 2, To: 1, Term: 3}, ack}},
		{"transfer-leader-to-self", [2]raftpb.Message{{Type: raftpb.MsgTransferLeader, From: 1, To: 1}, ack}},
		{"proposal", [2]raftpb.Message{{Type: raftpb.MsgProp, From: 2, To: 1, Entries: []raftpb.Entry{{Data: []byte{1, 2, 3}}}}, ack}},
		{"heartbeat-resp-context", [2]raftpb.Message{{Type: raftpb.MsgHeartbeatResp, From: 2, To: 1, Term: 3, Context: []byte("read-1")}, ack}},
		{"term-zero-heartbeat", [2]raftpb.Message{{Type: raftpb.MsgHeartbeat, From: 2, To: 1, Commit: 1}, ack}},
		{"term-zero-append", [2]raftpb.Message{{Type: raftpb.MsgApp, From: 2, To: 1, Index: 7, LogTerm: 0, Commit: 7}, ack}},
	}
}
