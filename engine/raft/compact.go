package raft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	raftracker "go.etcd.io/raft/v3/tracker"
)

// Retention of a replicated partition (docs/replication.md, "Snapshots,
// compaction and retention"): the leader replica decides where the log
// starts and proposes it as a log-start command, a normal raft entry; every
// replica applying it saves a snapshot of metadata only at the entry before
// the new start and gives up the log before it (log.Partition.CompactTo).

// Limits and periods of retention, in ticks of TickInterval.
const (
	// RetentionCheckTicks is how often a leader replica looks for a new log
	// start (100 ticks: every 10 s).
	RetentionCheckTicks = 100
	// RetentionLagTicks is how long a follower that is up (raft's
	// RecentActive) may hold compaction back by needing entries below the
	// point retention asks for (3000 ticks: 5 min); after that the point is
	// proposed anyway and the follower catches up from a snapshot. A
	// follower that is not RecentActive never holds it back.
	RetentionLagTicks = 3000
)

// The log-start command: Data of a raft EntryNormal.
//
//	0  magic "SPLS" (4 bytes)
//	4  zero (4 bytes): bytes 4 to 8 of a record payload are its record
//	   count, never 0, so log.PayloadType says EntryNormal
//	8  version (1), 7 reserved bytes (zero)
//	16 first index (u64): the first entry kept
//	24 offset (i64): the data offset the records of that entry start at
//
// 32 bytes, little-endian; the raft log's frame CRC covers it.
const (
	logStartMagic   = "SPLS"
	logStartVersion = 1
	logStartBytes   = 32
)

// logStart is a decoded log-start command: the entries before Index and
// the records before Offset are given up.
type logStart struct {
	Index  uint64
	Offset int64
}

// ErrBadLogStart is wrapped by decodeLogStart for bytes that start like a
// log-start command but fail a check.
var ErrBadLogStart = errors.New("raft: bad log-start command")

// encodeLogStart returns the log-start command for c.
func encodeLogStart(c logStart) []byte {
	b := make([]byte, logStartBytes)
	copy(b, logStartMagic)
	b[8] = logStartVersion
	binary.LittleEndian.PutUint64(b[16:], c.Index)
	binary.LittleEndian.PutUint64(b[24:], uint64(c.Offset))
	return b
}

// isLogStart reports whether data is meant as a log-start command (its
// magic), valid or not.
func isLogStart(data []byte) bool {
	return len(data) >= 8 && string(data[:4]) == logStartMagic && binary.LittleEndian.Uint32(data[4:]) == 0
}

// decodeLogStart decodes a log-start command. It never panics.
func decodeLogStart(b []byte) (logStart, error) {
	bad := func(format string, a ...any) (logStart, error) {
		return logStart{}, fmt.Errorf("%w: %s", ErrBadLogStart, fmt.Sprintf(format, a...))
	}
	if !isLogStart(b) {
		return bad("no log-start magic")
	}
	if len(b) != logStartBytes {
		return bad("%d bytes, want %d", len(b), logStartBytes)
	}
	if b[8] != logStartVersion {
		return bad("unknown version %d (this build reads %d)", b[8], logStartVersion)
	}
	for _, c := range b[9:16] {
		if c != 0 {
			return bad("reserved bytes are not zero")
		}
	}
	c := logStart{Index: binary.LittleEndian.Uint64(b[16:]), Offset: int64(binary.LittleEndian.Uint64(b[24:]))}
	if c.Index < 2 || c.Offset < 0 {
		return bad("first index %d, offset %d: want an index of at least 2 and an offset not negative", c.Index, c.Offset)
	}
	return c, nil
}

// snapshotData is what Spool puts in SnapshotMeta.Data: where the
// partition's records continue after the snapshot, and the application's
// state as of the snapshot (engine/'s producer dedupe table), opaque here.
//
//	0  magic "SPSD" (4 bytes)
//	4  version (1 or 2), 3 reserved bytes (zero)
//	8  offset (i64): the data offset of the first record after the
//	   snapshot's index (the next offset of a log reset to it)
//	   version 2 only:
//	16 app length n (u32)
//	20 app (n bytes)
//
// Little-endian; version 1 (16 bytes) when App is empty; SnapshotMeta's
// encoding carries a CRC over it.
type snapshotData struct {
	Offset int64
	App    []byte
}

const (
	snapDataMagic   = "SPSD"
	snapDataVersion = 2
	snapDataBytes   = 16 // version 1; version 2 adds 4 + len(App)
	// MaxSnapshotAppBytes bounds snapshotData.App (the whole data is at
	// most MaxSnapshotDataBytes).
	MaxSnapshotAppBytes = MaxSnapshotDataBytes - snapDataBytes - 4
)

// ErrBadSnapshotData is wrapped by decodeSnapshotData.
var ErrBadSnapshotData = errors.New("raft: bad snapshot data")

// encodeSnapshotData returns the encoding of d. An App larger than
// MaxSnapshotAppBytes is the caller's error (compact leaves it out).
func encodeSnapshotData(d snapshotData) []byte {
	n := snapDataBytes
	if len(d.App) > 0 {
		n += 4 + len(d.App)
	}
	b := make([]byte, snapDataBytes, n)
	copy(b, snapDataMagic)
	b[4] = 1
	binary.LittleEndian.PutUint64(b[8:], uint64(d.Offset))
	if len(d.App) > 0 {
		b[4] = 2
		b = binary.LittleEndian.AppendUint32(b, uint32(len(d.App)))
		b = append(b, d.App...)
	}
	return b
}

// decodeSnapshotData decodes the Data of a snapshot (App aliases b). It
// never panics.
func decodeSnapshotData(b []byte) (snapshotData, error) {
	bad := func(format string, a ...any) (snapshotData, error) {
		return snapshotData{}, fmt.Errorf("%w: %s", ErrBadSnapshotData, fmt.Sprintf(format, a...))
	}
	if len(b) < snapDataBytes {
		return bad("%d bytes, want at least %d", len(b), snapDataBytes)
	}
	if string(b[:4]) != snapDataMagic {
		return bad("bad magic %q", b[:4])
	}
	if b[4] < 1 || b[4] > snapDataVersion {
		return bad("unknown version %d (this build reads 1 to %d)", b[4], snapDataVersion)
	}
	if b[5]|b[6]|b[7] != 0 {
		return bad("reserved bytes are not zero")
	}
	d := snapshotData{Offset: int64(binary.LittleEndian.Uint64(b[8:]))}
	if d.Offset < 0 {
		return bad("negative offset %d", d.Offset)
	}
	if b[4] == 1 {
		if len(b) != snapDataBytes {
			return bad("version 1 is %d bytes, want %d", len(b), snapDataBytes)
		}
		return d, nil
	}
	if len(b) < snapDataBytes+4 {
		return bad("version 2 is %d bytes, want at least %d", len(b), snapDataBytes+4)
	}
	n := binary.LittleEndian.Uint32(b[snapDataBytes:])
	if n == 0 || n > MaxSnapshotAppBytes || int64(len(b)) != int64(snapDataBytes+4)+int64(n) {
		return bad("version 2 with %d app bytes in %d bytes (1 to %d app bytes, all of the rest)", n, len(b), MaxSnapshotAppBytes)
	}
	d.App = b[snapDataBytes+4:]
	return d, nil
}

// confPoint: ConfState cs is in force from index on (until the next point).
type confPoint struct {
	index uint64
	cs    raftpb.ConfState
}

// confReplay computes ConfStates the way raft's applyConfChange does, from
// a starting ConfState and the configuration changes after it.
type confReplay struct {
	trk raftracker.ProgressTracker
}

func newConfReplay(cs raftpb.ConfState, index uint64) (*confReplay, error) {
	trk := raftracker.MakeProgressTracker(1, 0)
	cfg, prs, err := confchange.Restore(confchange.Changer{Tracker: trk, LastIndex: index}, cs)
	if err != nil {
		return nil, fmt.Errorf("restore ConfState %v: %w", cs, err)
	}
	trk.Config, trk.Progress = cfg, prs
	return &confReplay{trk: trk}, nil
}

// errConfRefused: a committed configuration change that raft refuses to
// apply to the configuration in force (it would remove every voter, enter
// a joint configuration from a joint one, ...), or whose membership has
// more than MaxConfStateIDs ids. Raft panics on one; every
// replica skips it alike instead (Group.ApplyDone, Replica.applyCommands),
// since every replica applies it to the same configuration.
var errConfRefused = errors.New("configuration change refused")

// apply applies the configuration change of entry e (a conf change type).
// A change raft refuses leaves the configuration as it was and returns
// errConfRefused (wrapped).
func (c *confReplay) apply(e raftpb.Entry) error {
	var cc raftpb.ConfChangeV2
	switch e.Type {
	case raftpb.EntryConfChange:
		var v1 raftpb.ConfChange
		if err := v1.Unmarshal(e.Data); err != nil {
			return fmt.Errorf("entry %d: decode conf change: %w", e.Index, err)
		}
		cc = v1.AsV2()
	case raftpb.EntryConfChangeV2:
		if err := cc.Unmarshal(e.Data); err != nil {
			return fmt.Errorf("entry %d: decode conf change: %w", e.Index, err)
		}
	default:
		return nil
	}
	chg := confchange.Changer{Tracker: c.trk, LastIndex: e.Index}
	var cfg raftracker.Config
	var prs raftracker.ProgressMap
	var err error
	if cc.LeaveJoint() {
		cfg, prs, err = chg.LeaveJoint()
	} else if autoLeave, ok := cc.EnterJoint(); ok {
		cfg, prs, err = chg.EnterJoint(autoLeave, cc.Changes...)
	} else {
		cfg, prs, err = chg.Simple(cc.Changes...)
	}
	if err != nil {
		return fmt.Errorf("entry %d: %w: %w", e.Index, errConfRefused, err)
	}
	// A membership the state file cannot hold would stop the replica at
	// its next save: refused as raft refuses the others.
	if n := confStateIDs(confStateOf(cfg)); n > MaxConfStateIDs {
		return fmt.Errorf("entry %d: %w: it makes %d node ids, the limit is %d", e.Index, errConfRefused, n, MaxConfStateIDs)
	}
	c.trk.Config, c.trk.Progress = cfg, prs
	return nil
}

func (c *confReplay) state() raftpb.ConfState { return c.trk.ConfState() }

// retentionLimit is the leader's decision of how far compaction may go for
// its followers: the first index that must stay, given the point retention
// asks for (want) and each follower's progress. lagSince remembers, per
// follower, the tick from which it has held compaction back; it is updated
// in place. A follower that is not RecentActive, or has held it back for
// lagTicks, does not count (it will get a snapshot). Pure: no
// clock but now, in ticks.
func retentionLimit(want uint64, self uint64, prs map[uint64]raftracker.Progress, lagSince map[uint64]int64, now, lagTicks int64) uint64 {
	keep := want
	for id := range lagSince {
		if _, ok := prs[id]; !ok {
			delete(lagSince, id)
		}
	}
	for id, pr := range prs {
		if id == self {
			continue
		}
		if pr.Match+1 >= want || !pr.RecentActive {
			delete(lagSince, id)
			continue
		}
		since, ok := lagSince[id]
		if !ok {
			since = now
			lagSince[id] = now
		}
		if now-since < lagTicks {
			keep = min(keep, pr.Match+1)
		}
	}
	return keep
}
