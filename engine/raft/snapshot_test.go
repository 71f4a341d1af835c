package raft

import (
	"errors"
	"reflect"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// A crash at any operation of saveSnapshotMeta leaves the previous
// metadata or the new one, never a mix; once it returned, the new one.
func TestSnapshotMetaSaveCrash(t *testing.T) {
	prev := SnapshotMeta{Index: 10, Term: 2, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}, Data: []byte("old")}
	next := SnapshotMeta{Index: 20, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 4}}, Data: []byte("new table")}
	for k := 0; ; k++ {
		fsys := slog.NewMemFS()
		if err := saveSnapshotMeta(fsys, testDir, prev); err != nil {
			t.Fatal(err)
		}
		ops := 0
		fsys.SetFault(func(string, string) error {
			if ops++; ops > k {
				return errors.New("machine stopped")
			}
			return nil
		})
		err := saveSnapshotMeta(fsys, testDir, next)
		fsys.SetFault(nil)
		fsys.Crash()
		got, lerr := loadSnapshotMeta(fsys, testDir)
		if lerr != nil {
			t.Fatalf("crash at op %d: load: %v", k, lerr)
		}
		if err == nil {
			if !reflect.DeepEqual(got, next) {
				t.Fatalf("save returned but after a crash loaded %+v", got)
			}
			return
		}
		if !reflect.DeepEqual(got, prev) && !reflect.DeepEqual(got, next) {
			t.Fatalf("crash at op %d: loaded %+v, want the previous or the new metadata", k, got)
		}
	}
}

func TestSnapshotMetaNoneAndDamaged(t *testing.T) {
	fsys := slog.NewMemFS()
	if m, err := loadSnapshotMeta(fsys, testDir); err != nil || !reflect.DeepEqual(m, SnapshotMeta{}) {
		t.Fatalf("no snapshot: %+v, %v; want the zero SnapshotMeta", m, err)
	}
	if err := saveSnapshotMeta(fsys, testDir, SnapshotMeta{Index: 3, Term: 1}); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Corrupt(testDir+"/"+snapshotFileName, func(b []byte) []byte { b[9] ^= 1; return b }); err != nil {
		t.Fatal(err)
	}
	if _, err := loadSnapshotMeta(fsys, testDir); !errors.Is(err, ErrSnapshotDamaged) {
		t.Fatalf("damaged snapshot: %v, want ErrSnapshotDamaged", err)
	}
	if _, err := encodeSnapshotMeta(SnapshotMeta{Data: make([]byte, MaxSnapshotDataBytes+1)}); err == nil {
		t.Fatal("encoded data over MaxSnapshotDataBytes")
	}
}
