package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// snapshotFileName is the name of a group's snapshot metadata file inside
// its directory.
const snapshotFileName = "raft.snap"

// MaxSnapshotDataBytes bounds the application blob of a snapshot (the
// producer dedupe table): a decoder refuses a larger length before
// allocating.
const MaxSnapshotDataBytes = 64 << 20

const (
	snapMagic = "SPSN"
	// SnapshotVersion is the format of a snapshot file's header;
	// internal/buildinfo reports it.
	SnapshotVersion = 1
	snapHeaderBytes = 24 // magic 4, version 1, reserved 3, index 8, term 8
)

// SnapshotMeta is a raft snapshot as Spool keeps it: metadata only. The
// partition's records are not in it; Index and Term name the last entry the
// snapshot covers (the log starts at Index+1), ConfState is the membership
// as of Index, and Data is an opaque application blob (such as the producer
// dedupe table) of at most MaxSnapshotDataBytes.
type SnapshotMeta struct {
	Index     uint64
	Term      uint64
	ConfState raftpb.ConfState
	Data      []byte
}

// ErrSnapshotDamaged is returned for snapshot bytes that fail a check.
var ErrSnapshotDamaged = errors.New("raft snapshot metadata damaged")

// Raft returns the snapshot in raft's form.
func (m SnapshotMeta) Raft() raftpb.Snapshot {
	return raftpb.Snapshot{
		Data:     m.Data,
		Metadata: raftpb.SnapshotMetadata{Index: m.Index, Term: m.Term, ConfState: m.ConfState},
	}
}

// snapshotMetaFromRaft is the inverse of SnapshotMeta.Raft.
func snapshotMetaFromRaft(s raftpb.Snapshot) SnapshotMeta {
	return SnapshotMeta{Index: s.Metadata.Index, Term: s.Metadata.Term, ConfState: s.Metadata.ConfState, Data: s.Data}
}

// encodeSnapshotMeta returns the encoding of m (format in
// docs/replication.md). It fails if m exceeds MaxConfStateIDs or
// MaxSnapshotDataBytes.
func encodeSnapshotMeta(m SnapshotMeta) ([]byte, error) {
	if ids := confStateIDs(m.ConfState); ids > MaxConfStateIDs {
		return nil, fmt.Errorf("raft snapshot: ConfState has %d node ids, the limit is %d", ids, MaxConfStateIDs)
	}
	if len(m.Data) > MaxSnapshotDataBytes {
		return nil, fmt.Errorf("raft snapshot: data is %d bytes, the limit is %d", len(m.Data), MaxSnapshotDataBytes)
	}
	b := make([]byte, snapHeaderBytes, snapHeaderBytes+confStateBytes(m.ConfState)+4+len(m.Data)+4)
	copy(b, snapMagic)
	b[4] = SnapshotVersion
	binary.LittleEndian.PutUint64(b[8:], m.Index)
	binary.LittleEndian.PutUint64(b[16:], m.Term)
	b = appendConfState(b, m.ConfState)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Data)))
	b = append(b, m.Data...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// decodeSnapshotMeta decodes b, which must be exactly one encoding. It never
// panics; any failed check is an ErrSnapshotDamaged saying what was wrong.
// The returned Data is a copy.
func decodeSnapshotMeta(b []byte) (SnapshotMeta, error) {
	damaged := func(format string, a ...any) (SnapshotMeta, error) {
		return SnapshotMeta{}, fmt.Errorf("%w: %s", ErrSnapshotDamaged, fmt.Sprintf(format, a...))
	}
	if len(b) < snapHeaderBytes+9+4+4 {
		return damaged("%d bytes, shorter than the smallest snapshot", len(b))
	}
	if string(b[:4]) != snapMagic {
		return damaged("bad magic %q", b[:4])
	}
	if b[4] != SnapshotVersion {
		return damaged("unknown version %d (this build reads %d)", b[4], SnapshotVersion)
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return damaged("CRC32C %08x, stored %08x", got, want)
	}
	if b[5]|b[6]|b[7] != 0 {
		return damaged("reserved header bytes are not zero")
	}
	m := SnapshotMeta{Index: binary.LittleEndian.Uint64(b[8:]), Term: binary.LittleEndian.Uint64(b[16:])}
	cs, rest, err := readConfState(body[snapHeaderBytes:])
	if err != nil {
		return damaged("%v", err)
	}
	m.ConfState = cs
	if len(rest) < 4 {
		return damaged("ends before the data length")
	}
	d := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if d > MaxSnapshotDataBytes {
		return damaged("data length %d over the limit %d", d, MaxSnapshotDataBytes)
	}
	if uint64(len(rest)) != uint64(d) {
		return damaged("data length %d, but %d bytes follow", d, len(rest))
	}
	if (m.Index == 0) != (m.Term == 0) {
		return damaged("index %d with term %d", m.Index, m.Term)
	}
	if d > 0 {
		m.Data = append([]byte(nil), rest...)
	}
	return m, nil
}

// saveSnapshotMeta makes m the group's snapshot metadata in dir, atomically:
// it writes a temporary file, fsyncs it, renames it over snapshotFileName and
// fsyncs the directory. After a crash loadSnapshotMeta returns either the
// previous metadata or m, never a mix.
func saveSnapshotMeta(fsys slog.FS, dir string, m SnapshotMeta) error {
	b, err := encodeSnapshotMeta(m)
	if err != nil {
		return err
	}
	if err := slog.MkdirAllSynced(fsys, dir); err != nil {
		return fmt.Errorf("raft snapshot: create directory %s: %w", dir, err)
	}
	if err := slog.WriteFileAtomic(fsys, filepath.Join(dir, snapshotFileName), b); err != nil {
		return fmt.Errorf("raft snapshot: write %s: %w", filepath.Join(dir, snapshotFileName), err)
	}
	return nil
}

// loadSnapshotMeta returns the group's snapshot metadata in dir, or the zero
// SnapshotMeta (index 0: the log starts at 1) if none was saved.
func loadSnapshotMeta(fsys slog.FS, dir string) (SnapshotMeta, error) {
	path := filepath.Join(dir, snapshotFileName)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return SnapshotMeta{}, nil
	}
	if err != nil {
		return SnapshotMeta{}, fmt.Errorf("raft snapshot: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return SnapshotMeta{}, fmt.Errorf("raft snapshot: stat %s: %w", path, err)
	}
	if max := int64(snapHeaderBytes + 9 + 8*MaxConfStateIDs + 4 + MaxSnapshotDataBytes + 4); fi.Size() > max {
		return SnapshotMeta{}, fmt.Errorf("%w: %s is %d bytes, over the largest valid size %d", ErrSnapshotDamaged, path, fi.Size(), max)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && len(b) > 0 {
		return SnapshotMeta{}, fmt.Errorf("raft snapshot: read %s: %w", path, err)
	}
	m, err := decodeSnapshotMeta(b)
	if err != nil {
		return SnapshotMeta{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
