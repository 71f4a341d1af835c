package raft

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// Each hostile message to a follower is refused before raft sees it and
// counted as malformed (or, for those raft handles itself, not counted),
// the replica runs on, and an honest append from the leader after it
// commits: a single message can neither crash the node nor halt its group.
func TestHostRefusesHostileMessages(t *testing.T) {
	handled := map[string]bool{ // raft answers these itself: nothing to refuse
		"honest-append": true, "append-commit-past-log": true, "confchange-remove-self": true,
		"confchange-remove-all-voters": true, "confchange-too-many-learners": true, "appresp-huge-index": true,
		"vote-huge-index": true, "timeout-now": true, "message-type-unknown": true, "snapshot-below-commit": true,
	}
	for _, s := range hostileSeeds() {
		t.Run(s.name, func(t *testing.T) {
			fh := refuses(t, false, s.msgs[0], !handled[s.name])
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

// The same for what a follower could send its leader: the leader refuses
// and counts what raft would panic on and goes on leading and committing.
func TestHostLeaderRefusesHostileMessages(t *testing.T) {
	handled := map[string]bool{
		"honest-ack": true, "reject-hint-past-log": true, "transfer-leader-to-self": true, "heartbeat-resp-context": true,
	}
	for _, s := range leaderSeeds() {
		t.Run(s.name, func(t *testing.T) {
			fh := refuses(t, true, s.msgs[0], !handled[s.name])
			if handled[s.name] {
				return
			}
			done := make(chan error, 1)
			rec := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: []byte("after")}}, 1_700_000_000_000)
			fh.h.Propose(fuzzGroup, rec, func(_ int64, err error) { done <- err })
			fh.h.sched.waitIdle()
			fh.deliver(raftpb.Message{Type: raftpb.MsgAppResp, From: 2, To: 1, Term: 3, Index: 8})
			if err := <-done; err != nil {
				t.Fatalf("a proposal after the refused message: %v", err)
			}
		})
	}
}

// refuses delivers m, as from a peer, to a Host's follower (or leader)
// and checks that the replica runs on with its committed entries, and
// that m was counted as malformed or not.
func refuses(t *testing.T, lead bool, m raftpb.Message, malformed bool) *fuzzHost {
	t.Helper()
	fh := newFuzzHost(t)
	t.Cleanup(fh.stop)
	if lead {
		fh.lead()
	}
	_ = asFromPeer(&m) // a Host survives what the transport refuses, too
	fh.deliver(m)
	fh.check([]raftpb.Message{m})
	want := uint64(0)
	if malformed {
		want = 1
	}
	if got := fh.h.Stats().Malformed; got != want {
		t.Fatalf("Malformed = %d after %s, want %d", got, etcdraft.DescribeMessage(m, nil), want)
	}
	return fh
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

// The hostile messages are in the fuzz targets' corpora as they are
// written here (go test runs the corpora): a seed changed here and not
// there, or removed there, fails.
func TestHostileSeedsAreInTheCorpora(t *testing.T) {
	for dir, seeds := range map[string][]hostileSeed{
		"FuzzHostStep":       append(hostileSeeds(), leaderSeeds()...),
		"FuzzHostStepLeader": append(leaderSeeds(), hostileSeeds()...),
	} {
		for _, s := range seeds {
			b1, b2 := s.encode(t)
			want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\n", b1, b2)
			path := filepath.Join("testdata", "fuzz", dir, s.name)
			if got, err := os.ReadFile(path); err != nil || string(got) != want {
				t.Errorf("%s (%v) differs from the seed; write it as:\n%s", path, err, want)
			}
		}
	}
}
