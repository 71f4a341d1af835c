package raft

import (
	"testing"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// Each hostile message is refused before raft sees it and counted as
// malformed (or, for those raft handles itself, not counted), the replica
// runs on, and an honest append from the leader after it commits: a
// single message can neither crash the node nor halt its group.
func TestHostRefusesHostileMessages(t *testing.T) {
	handled := map[string]bool{ // raft answers these itself: nothing to refuse
		"honest-append": true, "append-commit-past-log": true, "confchange-remove-self": true,
		"confchange-remove-all-voters": true, "huge-term": true, "appresp-huge-index": true,
		"vote-huge-index": true, "timeout-now": true, "message-type-unknown": true, "snapshot-below-commit": true,
	}
	for _, s := range hostileSeeds() {
		t.Run(s.name, func(t *testing.T) {
			fh := newFuzzHost(t)
			defer fh.stop()
			m := s.msgs[0]
			fh.deliver(m)
			fh.check(s.msgs[:1])
			want := uint64(1)
			if handled[s.name] {
				want = 0
			}
			if got := fh.h.Stats().Malformed; got != want {
				t.Fatalf("Malformed = %d after %s, want %d", got, etcdraft.DescribeMessage(m, nil), want)
			}
			if handled[s.name] {
				return
			}
			rec := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: []byte("after")}}, 1_700_000_000_000)
			fh.deliver(raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Term: 2, LogTerm: 2, Index: 6, Commit: 7,
				Entries: []raftpb.Entry{{Term: 2, Index: 7, Data: rec}}})
			if st := fh.status(); st.CommitIndex != 7 || st.Err != nil {
				t.Fatalf("an honest append after the refused message: %+v", st)
			}
		})
	}
}

// A committed configuration change that raft refuses to apply (here one
// removing every voter, which a hostile leader could send) is skipped and
// counted, not a panic: every replica applies it to the same configuration
// and skips it alike, and the membership stays as it was.
func TestHostSkipsRefusedConfChange(t *testing.T) {
	fh := newFuzzHost(t)
	defer fh.stop()
	all, err := (&raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode, NodeID: 1},
		{Type: raftpb.ConfChangeRemoveNode, NodeID: 2}, {Type: raftpb.ConfChangeRemoveNode, NodeID: 3}}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	fh.deliver(raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Term: 2, LogTerm: 2, Index: 6, Commit: 7,
		Entries: []raftpb.Entry{{Term: 2, Index: 7, Type: raftpb.EntryConfChangeV2, Data: all}}})
	st := fh.status()
	if st.Err != nil || st.CommitIndex != 7 {
		t.Fatalf("after a refused conf change: %+v", st)
	}
	if got := fh.h.Stats().ConfChangesSkipped; got != 1 {
		t.Fatalf("ConfChangesSkipped = %d, want 1", got)
	}
	if len(st.Voters) != 3 {
		t.Fatalf("voters %v after a skipped change, want the three", st.Voters)
	}
}
