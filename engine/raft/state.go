package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// stateFileName is the name of a group's state file inside its directory.
const stateFileName = "raft.state"

// Limits of the state file format.
const (
	// StateSlotBytes is the size of one slot; the file holds two.
	StateSlotBytes = 4096
	// MaxConfStateIDs bounds the node ids of a ConfState (all four lists
	// together): a group has a handful of replicas, so this is generous and
	// keeps a state inside one slot.
	MaxConfStateIDs = 256
)

const (
	stateMagic = "SPRS"
	// StateVersion is the format of the state file (the hard state and
	// membership of each replica); internal/buildinfo reports it.
	StateVersion      = 1
	slotHeaderBytes   = 20 // magic 4, version 1, reserved 3, seq 8, payload length 4
	slotTrailerBytes  = 4  // CRC32C
	statePayloadFixed = 41 // term, vote, commit, applied (8 each), the smallest ConfState (9)
	maxStatePayload   = StateSlotBytes - slotHeaderBytes - slotTrailerBytes
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// State is what a raft group must find again after a restart besides its
// log: the HardState (term, vote, commit), and the ConfState as of the
// applied index Applied (committed entries after Applied are applied again
// on restart, configuration changes included).
type State struct {
	HardState raftpb.HardState
	ConfState raftpb.ConfState
	Applied   uint64
}

// ErrStateDamaged means neither slot of a state file holds a valid state
// although at least one was written: the file was damaged outside a crash
// (a crash tears at most the slot being written). The replica must not vote
// or lead; rebuild it from its peers.
var ErrStateDamaged = errors.New("raft state damaged")

// ErrStateTooLarge is returned by Save for a ConfState with more than
// MaxConfStateIDs node ids.
var ErrStateTooLarge = errors.New("raft state too large")

// encodeStateSlot returns the StateSlotBytes bytes of a slot holding st with
// sequence number seq.
func encodeStateSlot(seq uint64, st State) ([]byte, error) {
	cs := st.ConfState
	if ids := confStateIDs(cs); ids > MaxConfStateIDs {
		return nil, fmt.Errorf("%w: ConfState has %d node ids, the limit is %d", ErrStateTooLarge, ids, MaxConfStateIDs)
	}
	p := make([]byte, 32, 32+confStateBytes(cs)) // term, vote, commit, applied; then the ConfState
	binary.LittleEndian.PutUint64(p[0:], st.HardState.Term)
	binary.LittleEndian.PutUint64(p[8:], st.HardState.Vote)
	binary.LittleEndian.PutUint64(p[16:], st.HardState.Commit)
	binary.LittleEndian.PutUint64(p[24:], st.Applied)
	p = appendConfState(p, cs)
	n := len(p)
	b := make([]byte, StateSlotBytes)
	copy(b, stateMagic)
	b[4] = StateVersion
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(n))
	copy(b[slotHeaderBytes:], p)
	end := slotHeaderBytes + n
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	return b, nil
}

type slotStatus int

const (
	slotEmpty   slotStatus = iota // never written: all zero
	slotValid                     // a state that passed every check
	slotDamaged                   // anything else (a torn write, or damage)
)

// decodeStateSlot decodes one slot. It never panics on any input; a slot
// that is not all zeros and fails a check is slotDamaged with the reason.
func decodeStateSlot(b []byte) (seq uint64, st State, status slotStatus, err error) {
	if len(b) != StateSlotBytes {
		return 0, State{}, slotDamaged, fmt.Errorf("slot is %d bytes, want %d", len(b), StateSlotBytes)
	}
	if allZero(b) {
		return 0, State{}, slotEmpty, nil
	}
	damaged := func(format string, a ...any) (uint64, State, slotStatus, error) {
		return 0, State{}, slotDamaged, fmt.Errorf(format, a...)
	}
	if string(b[:4]) != stateMagic {
		return damaged("bad magic %q", b[:4])
	}
	if b[4] != StateVersion {
		return damaged("unknown version %d (this build reads %d)", b[4], StateVersion)
	}
	n := int(binary.LittleEndian.Uint32(b[16:]))
	if n < statePayloadFixed || n > maxStatePayload {
		return damaged("payload length %d out of range [%d, %d]", n, statePayloadFixed, maxStatePayload)
	}
	end := slotHeaderBytes + n
	if got, want := crc32.Checksum(b[:end], castagnoli), binary.LittleEndian.Uint32(b[end:]); got != want {
		return damaged("CRC32C %08x, stored %08x", got, want)
	}
	if b[5]|b[6]|b[7] != 0 {
		return damaged("reserved header bytes are not zero")
	}
	if !allZero(b[end+slotTrailerBytes:]) {
		return damaged("bytes after the record are not zero") // a save writes the whole slot
	}
	seq = binary.LittleEndian.Uint64(b[8:])
	if seq == 0 {
		return damaged("sequence number 0")
	}
	p := b[slotHeaderBytes:end]
	st.HardState.Term = binary.LittleEndian.Uint64(p[0:])
	st.HardState.Vote = binary.LittleEndian.Uint64(p[8:])
	st.HardState.Commit = binary.LittleEndian.Uint64(p[16:])
	st.Applied = binary.LittleEndian.Uint64(p[24:])
	cs, rest, err := readConfState(p[32:])
	if err != nil {
		return damaged("%v", err)
	}
	if len(rest) != 0 {
		return damaged("%d unexpected bytes after the ConfState", len(rest))
	}
	st.ConfState = cs
	return seq, st, slotValid, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// StateStore persists one raft group's State in a file of two slots. Save
// writes the slot that does not hold the current state and fsyncs it, so a
// crash at any point leaves the previous state intact in the other slot;
// Load takes the valid slot with the highest sequence number.
//
// A StateStore is not safe for concurrent use: the group's append path owns
// it (docs/replication.md, "Raft state and storage adapter").
type StateStore struct {
	path string
	f    slog.File
	seq  uint64 // sequence number of the current state (0: none saved)
	st   State
}

// OpenStateStore opens (creating if needed) the state file of the group
// whose directory is dir, and returns it with the last saved state (the
// zero State for a new group). The directory and the file's entry in it are
// made durable before it returns.
func OpenStateStore(fsys slog.FS, dir string) (*StateStore, State, error) {
	if err := slog.MkdirAllSynced(fsys, dir); err != nil {
		return nil, State{}, fmt.Errorf("raft state: create directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, stateFileName)
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, State{}, fmt.Errorf("raft state: open %s: %w", path, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		f.Close()
		return nil, State{}, fmt.Errorf("raft state: sync directory %s: %w", dir, err)
	}
	s := &StateStore{path: path, f: f}
	if err := s.load(); err != nil {
		f.Close()
		return nil, State{}, err
	}
	return s, s.st, nil
}

func (s *StateStore) load() error {
	var slots [2]struct {
		seq    uint64
		st     State
		status slotStatus
		err    error
	}
	for i := range slots {
		b := make([]byte, StateSlotBytes)
		n, err := s.f.ReadAt(b, int64(i)*StateSlotBytes)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("raft state: read %s slot %d: %w", s.path, i, err)
		}
		_ = n // bytes past the end of the file read as zero: a slot never written
		sl := &slots[i]
		sl.seq, sl.st, sl.status, sl.err = decodeStateSlot(b)
		if sl.status == slotValid && sl.seq%2 != uint64(i) {
			sl.status, sl.err = slotDamaged, fmt.Errorf("sequence %d does not belong in slot %d", sl.seq, i)
		}
	}
	best := -1
	for i, sl := range slots {
		if sl.status == slotValid && (best < 0 || sl.seq > slots[best].seq) {
			best = i
		}
	}
	switch {
	case best >= 0:
		s.seq, s.st = slots[best].seq, slots[best].st
	case slots[0].status == slotDamaged && slots[1].status == slotDamaged:
		return fmt.Errorf("%w: %s: slot 0: %v; slot 1: %v; this replica must not vote or lead: remove the group's directory and let it be rebuilt from its peers",
			ErrStateDamaged, s.path, slots[0].err, slots[1].err)
	default:
		// Nothing valid and at most one slot damaged: the first save into a
		// new file was torn by a crash before it returned. The state before
		// it is the empty one.
		s.seq, s.st = 0, State{}
	}
	return nil
}

// State returns the last state saved (or loaded).
func (s *StateStore) State() State { return s.st }

// Save makes st durable: it returns nil only once st is fsynced. A failed
// Save leaves the previous state intact on disk and may be retried (it
// rewrites the whole slot). If st.Applied is above st.HardState.Commit the
// commit saved is raised to Applied: an applied entry is committed and,
// with AsyncStorageWrites, already durable in the local log.
func (s *StateStore) Save(st State) error {
	if st.Applied > st.HardState.Commit {
		st.HardState.Commit = st.Applied
	}
	seq := s.seq + 1
	b, err := encodeStateSlot(seq, st)
	if err != nil {
		return fmt.Errorf("raft state: save %s: %w", s.path, err)
	}
	if _, err := s.f.WriteAt(b, int64(seq%2)*StateSlotBytes); err != nil {
		return fmt.Errorf("raft state: write %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("raft state: fsync %s: %w", s.path, err)
	}
	s.seq, s.st = seq, cloneState(st)
	return nil
}

// Close closes the file.
func (s *StateStore) Close() error { return s.f.Close() }

func cloneState(st State) State {
	c := st
	cs := &c.ConfState
	for _, l := range []*[]uint64{&cs.Voters, &cs.Learners, &cs.VotersOutgoing, &cs.LearnersNext} {
		if *l != nil {
			*l = append([]uint64(nil), *l...)
		}
	}
	return c
}
