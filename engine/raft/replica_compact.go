package raft

import (
	"errors"
	"fmt"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
)

// The Replica's side of retention and snapshots (docs/replication.md,
// "Snapshots, compaction and retention").

// SetRetention changes the partition's retention (ReplicaConfig's
// RetentionAge and RetentionBytes; 0 keeps forever). It takes effect at the
// next check while this replica leads.
func (r *Replica) SetRetention(age time.Duration, bytes int64) error {
	if age < 0 || bytes < 0 {
		return fmt.Errorf("raft replica %s: negative retention (%v, %d bytes)", r.p.Name(), age, bytes)
	}
	r.cfg.RetentionAge, r.cfg.RetentionBytes = age, bytes
	return nil
}

// SetRetainFrom lets the partition give up every record before offset off
// while this replica leads, whatever its retention by age and size: the
// partition's owner no longer needs them (the coordinators of consumer
// groups keep a checkpoint of their state at off and rebuild from it,
// docs/groups.md "Checkpoints"). The log then starts at the entry whose
// records start at off (an entry boundary, never inside one). A smaller off
// than before is ignored; 0 sets no floor.
func (r *Replica) SetRetainFrom(off int64) {
	r.retainFrom = max(r.retainFrom, off)
}

// Snapshot is the snapshot metadata saved last (Index 0: none).
func (r *Replica) Snapshot() SnapshotMeta { return r.snap }

// recoverSnapshot finishes what a crash interrupted after snap was saved
// (OpenReplica). The recovery rule:
//   - the log does not hold the snapshot's entry (it ends before it, or
//     holds another term there): an install was interrupted after saving the
//     snapshot; reset the log to start empty after it (ResetTo again);
//   - it holds it, but its start offset is below the snapshot's: a
//     compaction was interrupted after saving the snapshot; compact again;
//   - a log that starts after the snapshot is left to NewStorage, which
//     refuses it.
func recoverSnapshot(p *slog.Partition, snap SnapshotMeta) error {
	d, err := decodeSnapshotData(snap.Data)
	if err != nil {
		return fmt.Errorf("%w: the saved snapshot at index %d: %v; rebuild this replica from its peers", ErrInconsistent, snap.Index, err)
	}
	first, last := p.FirstIndex(), p.LastIndex()
	if first-1 > snap.Index {
		return nil
	}
	holds := snap.Index <= last
	if holds {
		t, err := p.Term(snap.Index)
		if err != nil {
			return fmt.Errorf("read the term of the snapshot index %d: %w", snap.Index, err)
		}
		holds = t == snap.Term
	}
	if !holds {
		if err := p.ResetTo(snap.Index, snap.Term, d.Offset); err != nil {
			return fmt.Errorf("finish installing the snapshot at index %d: %w", snap.Index, err)
		}
		return nil
	}
	at, err := p.OffsetOfIndex(snap.Index + 1)
	if err != nil {
		return fmt.Errorf("read the offset after the snapshot index %d: %w", snap.Index, err)
	}
	if at != d.Offset {
		return fmt.Errorf("%w: the log's records after entry %d start at offset %d, the snapshot says %d; rebuild this replica from its peers", ErrInconsistent, snap.Index, at, d.Offset)
	}
	if p.StartOffset() < d.Offset {
		if err := p.CompactTo(snap.Index+1, d.Offset); err != nil {
			return fmt.Errorf("finish compacting to the snapshot at index %d: %w", snap.Index, err)
		}
	}
	return nil
}

// checkSnapshot says why a received snapshot could not be installed here.
func checkSnapshot(s *raftpb.Snapshot) error {
	if s == nil {
		return errors.New("no snapshot in the message")
	}
	if ids := confStateIDs(s.Metadata.ConfState); ids > MaxConfStateIDs {
		return fmt.Errorf("its ConfState has %d node ids, the limit is %d", ids, MaxConfStateIDs)
	}
	if s.Metadata.Index == 0 || s.Metadata.Term == 0 {
		return fmt.Errorf("index %d, term %d", s.Metadata.Index, s.Metadata.Term)
	}
	if err := checkConfState(s.Metadata.ConfState, s.Metadata.Index); err != nil {
		return err
	}
	if _, err := decodeSnapshotData(s.Data); err != nil {
		return err
	}
	return nil
}

// install makes a snapshot received from the leader this replica's state:
// in this order, each step durable before the next,
//  1. the snapshot metadata is saved (saveSnapshotMeta);
//  2. the log is reset to start empty after its index, its next record at
//     its offset (log ResetTo);
//  3. the state is saved: hs (or the current HardState) with a commit of
//     its index, its ConfState, Applied = its index;
//
// then the storage serves it and the committed end becomes its offset.
// OpenReplica recovers a crash at any point (recoverSnapshot, and
// NewStorage, which takes the snapshot's ConfState and index over an older
// saved state).
//
// The saved commit is the snapshot's index, never hs.Commit: when raft got
// the snapshot and the entries after it before one Ready (a MsgSnap and the
// next MsgApp stepped in one visit), hs.Commit covers entries that persist
// writes only after this; saved now, a power loss during their write left
// a commit index past the end of the durable log, and the replica refused
// to open. The saved commit must never be ahead of the durable log (etcd
// raft's storage contract); a lower one is learned again from the leader.
func (r *Replica) install(s raftpb.Snapshot, hs raftpb.HardState) error {
	m := snapshotMetaFromRaft(s)
	d, err := decodeSnapshotData(m.Data)
	if err != nil {
		return fmt.Errorf("raft replica %s: install the snapshot at index %d: %w", r.p.Name(), m.Index, err)
	}
	if m.Index <= r.snap.Index || m.Index <= r.applied {
		return fmt.Errorf("raft replica %s: raft asked to install a snapshot at index %d, at or below the snapshot (%d) or applied index (%d)", r.p.Name(), m.Index, r.snap.Index, r.applied)
	}
	if err := saveSnapshotMeta(r.cfg.FS, r.cfg.Dir, m); err != nil {
		return fmt.Errorf("raft replica %s: %w", r.p.Name(), err)
	}
	if err := r.p.ResetTo(m.Index, m.Term, d.Offset); err != nil {
		return r.logFailure(fmt.Sprintf("reset the log to the snapshot at index %d", m.Index), err)
	}
	st := r.ss.State()
	if !etcdraft.IsEmptyHardState(hs) {
		st.HardState = hs
	}
	st.HardState.Commit = m.Index // the durable log ends here (see above)
	st.ConfState, st.Applied = m.ConfState, m.Index
	if err := r.ss.Save(st); err != nil {
		return err
	}
	if err := r.storage.SetSnapshot(m); err != nil {
		return fmt.Errorf("raft replica %s: %w", r.p.Name(), err)
	}
	r.snap = m
	r.p.SetTruncateFloor(m.Index)
	r.endsBase, r.applied, r.ends = m.Index, m.Index, append(r.ends[:0], d.Offset)
	r.committed = d.Offset
	if err := r.resetConfs(m.Index, m.ConfState); err != nil {
		return fmt.Errorf("raft replica %s: %w", r.p.Name(), err)
	}
	if r.cfg.OnSnapshot != nil {
		r.cfg.OnSnapshot(d.App)
	}
	if r.cfg.OnCommitted != nil {
		r.cfg.OnCommitted(r.committed)
	}
	return nil
}

// resetConfs starts the membership history at index with cs.
func (r *Replica) resetConfs(index uint64, cs raftpb.ConfState) error {
	rp, err := newConfReplay(cs, index)
	if err != nil {
		return err
	}
	r.confs, r.confSeen, r.replay = []confPoint{{index: index, cs: cs}}, index, rp
	return nil
}

// checkConfs compares the membership raft reports after applying up to
// index with the replayed one; should they differ (a bug), raft's wins and
// the history restarts from it (earlier snapshot points are then read
// back from the log: confAt).
func (r *Replica) checkConfs(index uint64, cs raftpb.ConfState) {
	if last := r.confs[len(r.confs)-1]; last.index <= index && cs.Equivalent(last.cs) == nil {
		return
	}
	r.cfg.Logger.Error("raft replica: replayed membership differs from raft's; restarting its history", "partition", r.p.Name(), "index", index)
	if err := r.resetConfs(index, cs); err != nil {
		r.confs = nil
	}
}

// applyCommands looks at applied entries for what the replica itself acts
// on: configuration changes (the membership history) and log-start
// commands. Entries applied before (raft applies the committed entries after
// the saved Applied again on a restart) are looked at again: both are
// idempotent.
func (r *Replica) applyCommands(ents []raftpb.Entry) error {
	for _, e := range ents {
		if e.Index > r.confSeen && len(r.confs) > 0 {
			if e.Type == raftpb.EntryConfChange || e.Type == raftpb.EntryConfChangeV2 {
				switch err := r.replay.apply(e); {
				case errors.Is(err, errConfRefused):
					r.confSkipped++
					r.cfg.Logger.Error("raft replica: committed configuration change skipped: raft refuses it (every replica skips it alike)",
						"partition", r.p.Name(), "index", e.Index, "err", err)
				case err != nil:
					return fmt.Errorf("raft replica %s: %w", r.p.Name(), err)
				default:
					r.confs = append(r.confs, confPoint{index: e.Index, cs: r.replay.state()})
				}
			}
			r.confSeen = e.Index
		}
		if e.Type == raftpb.EntryNormal && isLogStart(e.Data) {
			c, err := decodeLogStart(e.Data)
			if err != nil {
				r.cfg.Logger.Error("raft replica: log-start command skipped", "partition", r.p.Name(), "index", e.Index, "err", err)
				continue
			}
			if err := r.compact(e.Index, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// compact carries out the log-start command c, applied at index at: the
// snapshot at c.Index-1 (its term, the membership as of it, the data
// offset c.Offset) is saved and served, then the log compacted to it. A
// command at or before the current snapshot is a no-op; one that does not
// fit this log is skipped with an error logged (every replica sees the
// same committed command, so this is a bug, never a choice).
func (r *Replica) compact(at uint64, c logStart) error {
	s := c.Index - 1
	if s <= r.snap.Index {
		return nil
	}
	skip := func(why string, args ...any) error {
		r.cfg.Logger.Error("raft replica: log-start command skipped", append([]any{"partition", r.p.Name(), "index", at, "first", c.Index, "offset", c.Offset, "why", why}, args...)...)
		return nil
	}
	if c.Index > at {
		return skip("the first index kept is after the command")
	}
	off, err := r.p.OffsetOfIndex(c.Index)
	if err != nil {
		var ce *slog.CorruptionError
		if errors.As(err, &ce) {
			return r.logFailure(fmt.Sprintf("read the offset of entry %d", c.Index), err)
		}
		return skip("the log does not hold the entry", "err", err)
	}
	if off != c.Offset {
		return skip("the entry's records start elsewhere", "log_offset", off)
	}
	term, err := r.p.Term(s)
	if err != nil {
		return r.logFailure(fmt.Sprintf("read the term of entry %d", s), err)
	}
	cs, err := r.confAt(s)
	if err != nil {
		return err
	}
	d := snapshotData{Offset: c.Offset}
	if r.cfg.SnapshotApp != nil {
		d.App = r.cfg.SnapshotApp()
		if len(d.App) > MaxSnapshotAppBytes {
			r.cfg.Logger.Error("raft replica: the application's snapshot state is too large; the snapshot goes without it", "partition", r.p.Name(), "bytes", len(d.App), "limit", MaxSnapshotAppBytes)
			d.App = nil
		}
	}
	m := SnapshotMeta{Index: s, Term: term, ConfState: cs, Data: encodeSnapshotData(d)}
	if err := saveSnapshotMeta(r.cfg.FS, r.cfg.Dir, m); err != nil {
		return fmt.Errorf("raft replica %s: %w", r.p.Name(), err)
	}
	if err := r.storage.SetSnapshot(m); err != nil {
		return fmt.Errorf("raft replica %s: %w", r.p.Name(), err)
	}
	r.snap = m
	if len(r.confs) > 0 && r.confs[0].index <= s {
		k := len(r.confs) - 1
		for r.confs[k].index > s {
			k--
		}
		r.confs = append([]confPoint{{index: s, cs: r.confs[k].cs}}, r.confs[k+1:]...)
	}
	if err := r.p.CompactTo(c.Index, c.Offset); err != nil {
		return r.logFailure(fmt.Sprintf("compact to entry %d (offset %d)", c.Index, c.Offset), err)
	}
	return nil
}

// confAt is the membership as of entry s (after the snapshot): from the
// history if it reaches back that far, else replayed from the snapshot's
// over the configuration changes the log holds up to s.
func (r *Replica) confAt(s uint64) (raftpb.ConfState, error) {
	if len(r.confs) > 0 && r.confs[0].index <= s {
		k := len(r.confs) - 1
		for r.confs[k].index > s {
			k--
		}
		return r.confs[k].cs, nil
	}
	rp, err := newConfReplay(r.snap.ConfState, r.snap.Index)
	if err != nil {
		return raftpb.ConfState{}, fmt.Errorf("raft replica %s: %w", r.p.Name(), err)
	}
	for lo := r.snap.Index + 1; lo <= s; {
		ents, err := r.plog.Entries(lo, s+1, DefaultMaxMsgBytes)
		if err != nil {
			return raftpb.ConfState{}, r.logFailure(fmt.Sprintf("read entries %d-%d for the membership", lo, s), err)
		}
		for _, e := range ents {
			if err := rp.apply(e); err != nil && !errors.Is(err, errConfRefused) {
				return raftpb.ConfState{}, fmt.Errorf("raft replica %s: %w", r.p.Name(), err)
			}
		}
		lo += uint64(len(ents))
	}
	return rp.state(), nil
}

// checkRetention is the leader's periodic look for a new log start: the
// point its own retention asks for (log RetentionPoint, below the committed
// end and at or before the applied index), held back for followers that
// are up and still need entries before it (retentionLimit), proposed as a
// log-start command if it is past the current snapshot.
func (r *Replica) checkRetention() {
	age, bytes := r.cfg.RetentionAge, r.cfg.RetentionBytes
	if r.g.rn.BasicStatus().RaftState != etcdraft.StateLeader {
		clear(r.lagSince)
		return
	}
	if age == 0 && bytes == 0 && r.retainFrom == 0 {
		return
	}
	now := r.cfg.Now()
	off, idx, ok := r.p.RetentionPoint(age, bytes, now, r.committed, r.applied)
	if fo, fi, fok := r.retainFromPoint(); fok && (!ok || fi > idx) {
		off, idx, ok = fo, fi, true
	}
	if !ok || idx <= r.snap.Index+1 {
		return
	}
	keep := retentionLimit(idx, r.ID(), r.g.Status().Progress, r.lagSince, r.ticks, int64(r.cfg.RetentionLagTicks))
	if keep < idx {
		// Held back for a follower: as far as age and size allow below it
		// (a retain-from floor is an exact point, never moved down).
		if off, idx, ok = r.p.RetentionPoint(age, bytes, now, r.committed, keep); !ok || idx <= r.snap.Index+1 {
			return
		}
	}
	data := encodeLogStart(logStart{Index: idx, Offset: off})
	err := r.guard(func() error { return r.g.Propose(data) })
	if err != nil && !errors.Is(err, etcdraft.ErrProposalDropped) && r.failed == nil {
		r.cfg.Logger.Warn("raft replica: log-start proposal failed", "partition", r.p.Name(), "err", err)
	}
}

// retainFromPoint is the log start SetRetainFrom asks for: the first entry
// whose records start at the retain-from offset, if that offset is
// committed, the entry applied here, and past the current log start. A
// binary search over OffsetOfIndex (non-decreasing in the index), one frame
// header read per step.
func (r *Replica) retainFromPoint() (offset int64, index uint64, ok bool) {
	off := r.retainFrom
	if off <= r.p.StartOffset() || off > r.committed {
		return 0, 0, false
	}
	lo, hi := r.p.FirstIndex(), min(r.p.LastIndex(), r.applied)
	for lo < hi { // the first index whose records start at or after off
		mid := lo + (hi-lo)/2
		at, err := r.p.OffsetOfIndex(mid)
		if err != nil {
			return 0, 0, false
		}
		if at < off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if at, err := r.p.OffsetOfIndex(lo); err != nil || at != off {
		return 0, 0, false // inside an entry, or not applied yet
	}
	return off, lo, true
}
