package raft

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// openTestPartition opens a partition on a fresh MemFS with its store's
// appender running until the test ends.
func openTestPartition(t *testing.T, opts slog.Options) (*slog.MemFS, *slog.Store, *slog.Partition) {
	t.Helper()
	fs := slog.NewMemFS()
	opts.FS = fs
	s, err := slog.OpenStore(wireData, opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Partition(wirePart)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	return fs, s, p
}

func appendSync(t *testing.T, p *slog.Partition, ents []slog.Entry) {
	t.Helper()
	done := make(chan error, 1)
	p.AppendEntries(ents, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatalf("AppendEntries: %v", err)
	}
}

func recordPayload(vals ...string) []byte {
	recs := make([]slog.Record, len(vals))
	for i, v := range vals {
		recs[i] = slog.Record{Value: []byte(v)}
	}
	return slog.EncodeRecords(nil, slog.BatchHeader{}, recs, 1_700_000_000_000)
}

// Entries of every type go into the log and come back as raft wrote them;
// raft's sentinels come back unwrapped (raft compares with ==).
func TestPartitionLogConversionAndErrors(t *testing.T) {
	_, _, p := openTestPartition(t, slog.Options{})
	cc, _ := (&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: 4}).Marshal()
	cc2, _ := (&raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: 5}}}).Marshal()
	in := []raftpb.Entry{
		{Index: 1, Term: 1, Type: raftpb.EntryNormal},                                // a new leader's empty entry
		{Index: 2, Term: 1, Type: raftpb.EntryNormal, Data: recordPayload("a", "b")}, // records
		{Index: 3, Term: 2, Type: raftpb.EntryConfChange, Data: cc},
		{Index: 4, Term: 2, Type: raftpb.EntryConfChangeV2, Data: cc2},
		{Index: 5, Term: 2, Type: raftpb.EntryNormal, Data: []byte("short cmd")}, // an opaque normal command
	}
	wantTypes := []slog.EntryType{slog.EntryNormal, slog.EntryData, slog.EntryConfChange, slog.EntryConfChangeV2, slog.EntryNormal}
	var ents []slog.Entry
	for i, e := range in {
		le, err := LogEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		if le.Type != wantTypes[i] {
			t.Fatalf("entry %d: log type %v, want %v", e.Index, le.Type, wantTypes[i])
		}
		ents = append(ents, le)
	}
	appendSync(t, p, ents)
	l := NewPartitionLog(p)
	got, err := l.Entries(1, 6, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("%d entries back, want %d", len(got), len(in))
	}
	for i := range in {
		if got[i].Index != in[i].Index || got[i].Term != in[i].Term || got[i].Type != in[i].Type || string(got[i].Data) != string(in[i].Data) {
			t.Fatalf("entry %d back as %+v, want %+v", i+1, got[i], in[i])
		}
	}
	if recs, err := p.Read(0, 1<<20, 10, nil); err != nil || len(recs) != 2 || string(recs[1].Value) != "b" {
		t.Fatalf("records: %v, %v", recs, err)
	}
	if _, err := l.Term(6); err != etcdraft.ErrUnavailable {
		t.Fatalf("Term past the end: %v, want raft.ErrUnavailable itself", err)
	}
	if _, err := l.Entries(2, 7, 1<<20); err != etcdraft.ErrUnavailable {
		t.Fatalf("Entries past the end: %v, want raft.ErrUnavailable itself", err)
	}
	if tm, err := l.Term(0); err != nil || tm != 0 {
		t.Fatalf("Term(0) = %d, %v; want the empty log start's 0", tm, err)
	}
	if l.Failure() != nil {
		t.Fatalf("Failure after sentinel errors: %v", l.Failure())
	}
	if _, err := LogEntry(raftpb.Entry{Index: 6, Term: 2, Type: 7}); err == nil {
		t.Fatalf("unknown raft entry type accepted")
	}
}

// A read that fails a CRC is recorded and never passed to raft as a
// sentinel: the replica stops with ErrLogCorrupt.
func TestPartitionLogCorruptionIsRecorded(t *testing.T) {
	fs, _, p := openTestPartition(t, slog.Options{})
	appendSync(t, p, []slog.Entry{{Index: 1, Term: 1, Type: slog.EntryData, Data: recordPayload("x")}})
	if err := fs.Corrupt(wireData+"/"+wirePart+"/00000000000000000000.log", func(b []byte) []byte {
		b[len(b)-2] ^= 0xff
		return b
	}); err != nil {
		t.Fatal(err)
	}
	l := NewPartitionLog(p)
	_, err := l.Entries(1, 2, 1<<20)
	var ce *slog.CorruptionError
	if !errors.Is(err, ErrLogCorrupt) || !errors.As(err, &ce) || err == etcdraft.ErrCompacted || err == etcdraft.ErrUnavailable {
		t.Fatalf("Entries over a damaged frame: %v; want ErrLogCorrupt wrapping a *log.CorruptionError", err)
	}
	if !errors.Is(l.Failure(), ErrLogCorrupt) {
		t.Fatalf("Failure = %v", l.Failure())
	}
}

// A replica on a store that acknowledges before fsync (FsyncInterval)
// refuses to bootstrap on it, and (bootstrapped on a durable store) to
// release the responses of its appends.
func TestReplicaRefusesUndurableAppends(t *testing.T) {
	fs, _, p := openTestPartition(t, slog.Options{Fsync: slog.FsyncInterval, FsyncInterval: time.Hour})
	_, err := OpenReplica(ReplicaConfig{Partition: p, FS: fs, Dir: wireRaft, Voters: []uint64{1}, Group: GroupConfig{ID: 1}})
	if err == nil || !strings.Contains(err.Error(), "FsyncAlways") {
		t.Fatalf("bootstrap on an FsyncInterval store: %v; want a refusal naming FsyncAlways", err)
	}
	// The same group bootstrapped while the store was durable, reopened on
	// a store that is not.
	fs = slog.NewMemFS()
	for i, opts := range []slog.Options{{}, {Fsync: slog.FsyncInterval, FsyncInterval: time.Hour}} {
		opts.FS = fs
		s, err := slog.OpenStore(wireData, opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		defer func() { cancel(); <-done; s.Close() }()
		if p, err = s.Partition(wirePart); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			r, err := OpenReplica(ReplicaConfig{Partition: p, FS: fs, Dir: wireRaft, Voters: []uint64{1}, Group: GroupConfig{ID: 1}})
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
			cancel()
			<-done
			s.Close()
			done <- nil // for the deferred wait
		}
	}
	r, err := OpenReplica(ReplicaConfig{Partition: p, FS: fs, Dir: wireRaft, Voters: []uint64{1}, Group: GroupConfig{ID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Campaign(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r.HasReady() && err == nil {
		err = r.Process(ctx, func([]raftpb.Message) {})
	}
	if !errors.Is(err, ErrReplicaStopped) || r.Err() == nil {
		t.Fatalf("Process on an FsyncInterval store: %v; want the replica stopped", err)
	}
}

// A leader whose log is damaged under an entry a follower needs stops with
// ErrLogCorrupt and quarantines its partition, instead of raft panicking
// the node; the others elect a new leader and carry on.
func TestReplicaStopsOnCorruptLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newWCluster(t, ctx, 7, slog.Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 512}, false)
	defer c.close()
	l := c.waitLeader(50)
	var lag *wnode
	for _, n := range c.nodes {
		if n != l {
			lag = n
		}
	}
	c.crash(lag)
	for range 10 {
		if err := c.propose(l, 2); err != nil {
			t.Fatal(err)
		}
		c.round()
	}
	// Damage the leader's first data entry, which the lagging node needs.
	ents := entriesOf(t, l.r.Partition(), 3)
	if err := l.fs.Corrupt(wireData+"/"+wirePart+"/00000000000000000000.log", func(b []byte) []byte {
		b[74+len(ents[0].Data)+36+10] ^= 0xff // inside the second frame's records
		return b
	}); err != nil {
		t.Fatal(err)
	}
	l.faulty = true
	c.start(lag)
	for range 30 {
		if !l.up {
			break
		}
		c.round()
	}
	if l.up {
		t.Fatalf("the leader kept running over a damaged log")
	}
	if !errors.Is(l.stopErr, ErrLogCorrupt) || !errors.Is(l.stopErr, ErrReplicaStopped) || !l.quarantined {
		t.Fatalf("leader stopped with %v (quarantined %v); want ErrReplicaStopped wrapping ErrLogCorrupt, partition quarantined", l.stopErr, l.quarantined)
	}
}
