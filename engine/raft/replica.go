package raft

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	stdslog "log/slog"
	"slices"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
)

// ReplicaConfig configures the Replica of one partition on one node.
type ReplicaConfig struct {
	// Partition is the partition's log, opened from a store with
	// FsyncAlways (a replica refuses to acknowledge entries that are not
	// durable). The replica appends to it with AppendEntries only; the
	// caller keeps owning the store (Run, Close).
	Partition *slog.Partition
	// FS and Dir hold the group's state file (raft.state) and snapshot
	// metadata (raft.snap).
	FS  slog.FS
	Dir string
	// Voters are the initial members, used only to bootstrap a new group
	// (no state saved and an empty log).
	Voters []uint64
	// Group configures the raft group; its Storage is set by OpenReplica.
	Group GroupConfig
	// OnCommitted, if set, is called (on the goroutine calling Process) with
	// the new committed end whenever it rises: engine/'s setCommitted.
	OnCommitted func(end int64)
	// OnApply, if set, is called (on the goroutine calling Process) with
	// each applied entry, right after OnCommitted moved past it, and the
	// data offset of its first record (engine/'s producer deduplication reads the
	// producer fields of record entries). It must not block.
	OnApply func(e raftpb.Entry, base int64)
	// SnapshotApp, if set, is called (on the goroutine calling Process)
	// when the replica takes a snapshot (a log-start command applied): what
	// it returns (at most MaxSnapshotAppBytes, else left out) is kept in the
	// snapshot and given to OnSnapshot of a replica that installs it. It is
	// the application's state as of the last applied entry, which may be
	// past the snapshot's index: OnApply must then tolerate entries applied
	// again after OnSnapshot (engine/'s producer table keeps the newest
	// batch per producer).
	SnapshotApp func() []byte
	// OnSnapshot, if set, is called with the App of the snapshot the replica
	// starts from: at open when it has one, and when it installs one from
	// the leader (on the goroutine calling Process). The bytes are the
	// replica's: they may be kept.
	OnSnapshot func(app []byte)
	// MaxBatchBytes is the partition store's Options.MaxBatchBytes (default
	// log.DefaultMaxBatchBytes): a proposal whose entry would not fit a log
	// batch is refused before it reaches raft (every replica appending it
	// would stop).
	MaxBatchBytes int

	// RetentionAge and RetentionBytes are the partition's retention (its
	// topic's): while this replica leads, it gives up, for every replica at
	// once, the closed segments whose newest record is older than
	// RetentionAge or that are beyond RetentionBytes in total (log-start
	// command, docs/replication.md "Snapshots, compaction and retention").
	// 0 keeps forever; SetRetention changes them. The partition itself
	// must have no retention of its own (SetRetention(0, 0) on it, and
	// none in its store's Options): it would delete on one replica alone.
	RetentionAge   time.Duration
	RetentionBytes int64
	// RetentionCheckTicks (default RetentionCheckTicks) and
	// RetentionLagTicks (default RetentionLagTicks) override the constants
	// of those names, in ticks.
	RetentionCheckTicks int
	RetentionLagTicks   int
	// Now is the clock of RetentionAge (default time.Now).
	Now func() time.Time
	// Logger receives what the replica skips and why (default: discarded).
	Logger *stdslog.Logger
}

// Replica is one partition's raft group on one node: it owns the group's
// state store, the storage adapter over the partition log and the Group
// driver, and carries out each Ready against the real log. It starts no
// goroutine and is not safe for concurrent use: one driver goroutine calls
// all its methods (Tick, Step, Propose*, Process, CommittedEnd); others
// learn of the committed end through OnCommitted.
//
// After any error from Process the replica is stopped (Err): its log or
// state may be ahead of what raft knows. Reopen it from disk.
type Replica struct {
	cfg     ReplicaConfig
	p       *slog.Partition
	plog    *PartitionLog
	ss      *StateStore
	storage *Storage
	g       *Group

	// ends[k] is the data offset after entry endsBase+k (ends[0]: after
	// endsBase, the applied index). Offsets are assigned by the log at
	// append, deterministically from the end of the previous entry, so the
	// replica tracks them for the entries it has not applied yet.
	endsBase uint64
	ends     []int64

	applied   uint64
	committed int64 // data offset below which every record is committed and applied
	// lastTs is the largest record time (unix ms) of the entries this
	// replica has written or proposed: the floor of the times it gives the
	// batches it proposes as leader (log.StampRecords), so that publish
	// times never decrease along the partition, whichever node encoded a
	// batch and whichever node leads.
	lastTs int64
	done   chan error
	ents   []slog.Entry
	failed error
	lost   lostLog // heartbeats committing past the log (lostEntries)

	// Hooks of the Host's proposal tracker (nil for a bare Replica), called
	// on the goroutine calling Process: onReady with each Ready's work
	// before any of it is carried out, onApply with each entry above the
	// applied index as it is applied, with the data offset of its first
	// record.
	onReady func(w *Work)
	onApply func(e raftpb.Entry, base int64)
	// onDurable, with the entries of each Append once they are durable
	// here (fsynced, before the responses are released).
	onDurable func(ents []raftpb.Entry)

	// snap is the snapshot saved (raft.snap) and set in the storage.
	snap SnapshotMeta
	// confs is the membership as of each configuration change since
	// confs[0].index (complete from there on); confSeen is the last entry
	// looked at for it; replay computes it as raft does.
	confs    []confPoint
	confSeen uint64
	replay   *confReplay
	// Retention (the leader's part): ticks counts Tick calls, lagSince the
	// tick from which each follower has held compaction back.
	ticks    int64
	lagSince map[uint64]int64
	// retainFrom is the offset SetRetainFrom allows giving up the records
	// before (0: none).
	retainFrom int64
	// confSkipped counts the committed configuration changes skipped
	// because raft refuses them (errConfRefused).
	confSkipped uint64
}

// ErrReplicaStopped wraps the error a replica stopped with.
var ErrReplicaStopped = errors.New("raft replica stopped")

// ErrMalformedMessage: a message from a peer that no honest replica sends
// and raft would panic on; it is refused before raft sees it, and the
// replica runs on.
var ErrMalformedMessage = errors.New("malformed raft message")

// OpenReplica opens the replica from what is durable: the state file, the
// snapshot metadata and the partition log.
func OpenReplica(cfg ReplicaConfig) (*Replica, error) {
	if cfg.Partition == nil || cfg.FS == nil || cfg.Dir == "" {
		return nil, errors.New("raft replica: Partition, FS and Dir are required")
	}
	if cfg.MaxBatchBytes == 0 {
		cfg.MaxBatchBytes = slog.DefaultMaxBatchBytes
	}
	if cfg.MaxBatchBytes < slog.BatchHeaderSize {
		return nil, fmt.Errorf("raft replica: MaxBatchBytes %d is below a batch header (%d bytes)", cfg.MaxBatchBytes, slog.BatchHeaderSize)
	}
	if cfg.RetentionAge < 0 || cfg.RetentionBytes < 0 || cfg.RetentionCheckTicks < 0 || cfg.RetentionLagTicks < 0 {
		return nil, fmt.Errorf("raft replica: negative retention (%v, %d bytes, %d check ticks, %d lag ticks)", cfg.RetentionAge, cfg.RetentionBytes, cfg.RetentionCheckTicks, cfg.RetentionLagTicks)
	}
	if cfg.RetentionCheckTicks == 0 {
		cfg.RetentionCheckTicks = RetentionCheckTicks
	}
	if cfg.RetentionLagTicks == 0 {
		cfg.RetentionLagTicks = RetentionLagTicks
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = stdslog.New(stdslog.DiscardHandler)
	}
	p := cfg.Partition
	ss, st, err := OpenStateStore(cfg.FS, cfg.Dir)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Replica, error) {
		ss.Close()
		return nil, err
	}
	snap, err := loadSnapshotMeta(cfg.FS, cfg.Dir)
	if err != nil {
		return fail(err)
	}
	if snap.Index != 0 {
		if err := recoverSnapshot(p, snap); err != nil {
			return fail(fmt.Errorf("raft replica %s: %w", p.Name(), err))
		}
	}
	if isNewState(st) && len(cfg.Voters) > 0 && bootstrapPending(p, len(cfg.Voters)) {
		if st, err = bootstrap(p, ss, cfg.Voters); err != nil {
			return fail(fmt.Errorf("raft replica %s: bootstrap: %w", p.Name(), err))
		}
	}
	plog := NewPartitionLog(p)
	storage, err := NewStorage(plog, st, snap)
	if errors.Is(err, ErrInconsistent) {
		// The log does not hold what the replica's state says it made
		// durable (committed entries gone, a log from before a snapshot):
		// damaged data, which the cluster replaces from the other replicas
		// once the partition is quarantined (engine/cluster,
		// cluster_repair.go).
		p.Quarantine(&slog.CorruptionError{File: p.Name(), Position: -1, Offset: p.NextOffset(), Reason: err.Error()})
		return fail(fmt.Errorf("%w: raft replica %s: %w", ErrLogCorrupt, p.Name(), err))
	}
	if err != nil {
		return fail(fmt.Errorf("raft replica %s: %w", p.Name(), err))
	}
	gc := cfg.Group
	gc.Storage = storage
	g, err := NewGroup(gc)
	if err != nil {
		return fail(err)
	}
	hs, _, _ := storage.InitialState()
	p.SetTruncateFloor(hs.Commit) // not persisted by the log
	r := &Replica{cfg: cfg, p: p, plog: plog, ss: ss, storage: storage, g: g, done: make(chan error, 1),
		snap: snap, lagSince: map[uint64]int64{}}
	_, cs, _ := storage.InitialState()
	if err := r.resetConfs(storage.Applied(), cs); err != nil {
		return fail(fmt.Errorf("raft replica %s: %w", p.Name(), err))
	}
	// The offsets of the entries after the commit index: count back from
	// the partition's end.
	last, end := p.LastIndex(), p.NextOffset()
	base := min(hs.Commit, last)
	var counts []int64
	for lo := base + 1; lo <= last; {
		ents, err := p.Entries(lo, last+1, DefaultMaxMsgBytes)
		if err != nil {
			return fail(r.logFailure("read the uncommitted entries", err))
		}
		for _, e := range ents {
			counts = append(counts, recordCount(e.Type, e.Data))
		}
		lo += uint64(len(ents))
	}
	r.ends = make([]int64, len(counts)+1)
	r.ends[len(counts)] = end
	for k := len(counts) - 1; k >= 0; k-- {
		r.ends[k] = r.ends[k+1] - counts[k]
	}
	r.endsBase, r.applied, r.committed = base, base, r.ends[0]
	r.lastTs = p.MaxTimestamp()
	if snap.Index != 0 && cfg.OnSnapshot != nil {
		d, _ := decodeSnapshotData(snap.Data) // checked by recoverSnapshot
		cfg.OnSnapshot(d.App)
	}
	if cfg.OnCommitted != nil {
		cfg.OnCommitted(r.committed)
	}
	return r, nil
}

// bootstrapPending: the log is empty, or holds only what an interrupted
// bootstrap wrote (n entries of term 1) — the state was not saved after it.
func bootstrapPending(p *slog.Partition, n int) bool {
	if p.LastIndex() == 0 {
		return true
	}
	t, err := p.Term(uint64(n))
	return p.FirstIndex() == 1 && p.LastIndex() == uint64(n) && err == nil && t == 1
}

// bootstrap starts a new group with its first members as etcd's
// RawNode.Bootstrap does: one committed ConfChange entry (AddNode, term 1)
// per voter at indexes 1..n, and a state that has applied them. Every
// replica bootstrapped with the same voters writes the same entries, and a
// node added later replays them from the leader's log, so it learns the
// initial membership from the log itself (a membership kept only in the
// state file would be missing on it: raft would find its first change
// removing every voter).
func bootstrap(p *slog.Partition, ss *StateStore, voters []uint64) (State, error) {
	if p.LastIndex() == 0 {
		ents := make([]slog.Entry, len(voters))
		for i, id := range voters {
			cc := raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: id}
			data, err := cc.Marshal()
			if err != nil {
				return State{}, err
			}
			ents[i] = slog.Entry{Index: uint64(i + 1), Term: 1, Type: slog.EntryConfChange, Data: data}
		}
		done := make(chan error, 1)
		p.AppendEntries(ents, func(err error) { done <- err })
		if err := <-done; err != nil {
			return State{}, err
		}
		if d := p.DurableIndex(); d < uint64(len(voters)) {
			return State{}, fmt.Errorf("bootstrap entries acknowledged but durable only up to %d: replicated partitions need a store with FsyncAlways", d)
		}
	}
	n := uint64(len(voters))
	st := State{
		HardState: raftpb.HardState{Term: 1, Commit: n},
		ConfState: raftpb.ConfState{Voters: append([]uint64(nil), voters...)},
		Applied:   n,
	}
	return st, ss.Save(st)
}

func isNewState(st State) bool {
	return etcdraft.IsEmptyHardState(st.HardState) && st.Applied == 0 && confStateIDs(st.ConfState) == 0
}

// ID is this node's id in the group.
func (r *Replica) ID() uint64 { return r.cfg.Group.ID }

// Partition is the replica's partition log.
func (r *Replica) Partition() *slog.Partition { return r.p }

// Err is the error the replica stopped with, nil while it runs.
func (r *Replica) Err() error { return r.failed }

// Tick advances the group's clock by one TickInterval; every
// RetentionCheckTicks a leader looks for a new log start (checkRetention).
func (r *Replica) Tick() {
	if r.failed == nil {
		_ = r.guard(func() error { r.g.Tick(); return nil })
		r.ticks++
		if r.ticks%int64(r.cfg.RetentionCheckTicks) == 0 {
			r.checkRetention()
		}
	}
}

// tickQuiet advances the clock of a quiesced replica by n ticks without
// ticking raft: only its retention checks keep their pace (a quiet
// leader's partition still gives up what retention lets go, which wakes
// the group with the proposal).
func (r *Replica) tickQuiet(n int) {
	for range n {
		if r.failed != nil {
			return
		}
		r.ticks++
		if r.ticks%int64(r.cfg.RetentionCheckTicks) == 0 {
			r.checkRetention()
		}
	}
}

// Step feeds a message from a peer. An error about the message (say, from
// an unknown peer) leaves the replica running; ErrReplicaStopped does not.
// A message no honest replica sends, that raft would panic on or this
// replica stop at (checkInbound), is refused with ErrMalformedMessage; so
// is a MsgSnap whose snapshot this replica could not install.
func (r *Replica) Step(m raftpb.Message) error {
	if r.failed != nil {
		return r.failed
	}
	last, _ := r.storage.LastIndex() // an error is raft's to report
	bs := r.g.BasicStatus()
	l := local{last: last, term: bs.Term, leads: bs.RaftState == etcdraft.StateLeader, maxBatchBytes: r.cfg.MaxBatchBytes}
	if err := checkInbound(&m, l); err != nil {
		if ce := r.lostEntries(&m, l); ce != nil {
			r.p.Quarantine(ce)
			return r.stop(fmt.Errorf("%w: partition %s: %w", ErrLogCorrupt, r.p.Name(), ce))
		}
		return fmt.Errorf("raft replica %s: %w: a %s from %d at term %d: %w", r.p.Name(), ErrMalformedMessage, m.Type, m.From, m.Term, err)
	}
	if m.Type == raftpb.MsgHeartbeat {
		r.lost = lostLog{}
	}
	return r.guard(func() error { return r.g.Step(m) })
}

// lostLog follows heartbeats that commit past this replica's log.
type lostLog struct {
	term  uint64 // their term
	count int    // how many in a row
	since int64  // Replica.ticks at the first
}

// lostLogHeartbeats is how many heartbeats in a row, over at least an
// election timeout, must commit past the log before the replica takes its
// log for one that lost entries.
const lostLogHeartbeats = 5

// lostEntries says whether m, refused by checkInbound, shows that this
// replica's log lost entries it acknowledged. A leader's heartbeat commits
// at most what the follower acknowledged having (the minimum of its match
// and the commit index), and a leader of a later term has had no
// acknowledgement from it yet. So heartbeats of the replica's term (or a
// later one) that keep committing past its log, lostLogHeartbeats of them
// over at least an election timeout, mean entries it had made durable are
// gone: its segment was cut back (a disk that lied about a flush, a
// restored backup) while it was down. Raft would panic; refusing them
// leaves the replica stuck for good, never caught up. The replica then
// holds damaged data (a CorruptionError to quarantine it with); the
// cluster replaces the copy (engine/cluster, cluster_repair.go). One such
// heartbeat, or a burst, is only refused (a forged or damaged message).
func (r *Replica) lostEntries(m *raftpb.Message, l local) *slog.CorruptionError {
	if m.Type != raftpb.MsgHeartbeat || m.Commit <= l.last || m.Term < l.term {
		return nil
	}
	if r.lost.count == 0 || r.lost.term != m.Term {
		r.lost = lostLog{term: m.Term, count: 1, since: r.ticks}
		return nil
	}
	r.lost.count++
	ticks := int64(cmp.Or(r.cfg.Group.ElectionTicks, DefaultElectionTicks))
	if r.lost.count < lostLogHeartbeats || r.ticks-r.lost.since < ticks {
		return nil
	}
	return &slog.CorruptionError{File: r.p.Name(), Position: -1, Offset: r.p.NextOffset(),
		Reason: fmt.Sprintf("the leader (node %d, term %d) has committed index %d for %d ticks, past this replica's log (last index %d): entries it acknowledged are gone (a write lost or cut back while it was down)",
			m.From, m.Term, m.Commit, r.ticks-r.lost.since, l.last)}
}

// Campaign starts an election now.
func (r *Replica) Campaign() error {
	if r.failed != nil {
		return r.failed
	}
	return r.guard(r.g.Campaign)
}

// ProposeRecords proposes a record payload (log.EncodeRecords) if this node
// leads; raft's ErrProposalDropped says it was not taken (no leader, or
// too much uncommitted). The payload is checked by the log when written.
// Its record times are the leader's (log.StampRecords with the replica's
// largest time and nowMs, the leader's clock in unix ms): they never
// decrease along the partition.
func (r *Replica) ProposeRecords(data []byte, nowMs int64) error {
	if r.failed != nil {
		return r.failed
	}
	if err := r.CheckRecords(data); err != nil {
		return err
	}
	data, last := slog.StampRecords(data, r.lastTs, nowMs)
	err := r.guard(func() error { return r.g.Propose(data) })
	if err == nil {
		r.lastTs = last
	}
	return err
}

// ErrBadProposal is wrapped by the errors refusing a proposal that could
// never be stored: nothing was proposed, and retrying it will not help.
var ErrBadProposal = errors.New("raft replica: proposal refused")

// CheckRecords checks, without proposing it, that data is a record payload
// (log.PayloadType) whose entry fits the log's batch limit (MaxBatchBytes).
// The payload's CRC and records are checked by the log only when it is
// appended (engine/log exports no validator yet).
func (r *Replica) CheckRecords(data []byte) error {
	if slog.PayloadType(data) != slog.EntryData {
		return fmt.Errorf("%w: raft replica %s: proposal of %d bytes is not a record payload (log.EncodeRecords)", ErrBadProposal, r.p.Name(), len(data))
	}
	if n := slog.PlacementSize + len(data); n > r.cfg.MaxBatchBytes {
		return fmt.Errorf("%w: raft replica %s: proposal of %d bytes makes a %d-byte log batch, limit %d (MaxBatchBytes): split it", ErrBadProposal, r.p.Name(), len(data), n, r.cfg.MaxBatchBytes)
	}
	return nil
}

// ReadIndex asks raft to confirm this node's leadership with a quorum
// (Group.ReadIndex); the answer comes in a Ready's ReadStates.
func (r *Replica) ReadIndex(rctx []byte) error {
	if r.failed != nil {
		return r.failed
	}
	return r.guard(func() error { r.g.ReadIndex(rctx); return nil })
}

// endAt is the data offset after the entry at index: everything below it
// is at or before index (ok false when index is past what this replica
// has written).
func (r *Replica) endAt(index uint64) (int64, bool) {
	if index <= r.endsBase {
		return r.ends[0], true
	}
	if k := index - r.endsBase; k < uint64(len(r.ends)) {
		return r.ends[k], true
	}
	return 0, false
}

// ProposeConfChange proposes a membership change if this node leads. Raft
// replaces a change it refuses (another one pending, or a joint state to
// leave first) with an empty entry.
func (r *Replica) ProposeConfChange(cc raftpb.ConfChangeI) error {
	if r.failed != nil {
		return r.failed
	}
	return r.guard(func() error { return r.g.ProposeConfChange(cc) })
}

// TransferLeadership asks the leader to hand leadership to peer to.
func (r *Replica) TransferLeadership(to uint64) {
	if r.failed == nil {
		_ = r.guard(func() error { r.g.rn.TransferLeader(to); return nil })
	}
}

// memberOn is the replica id of the group's member on node (voters
// first, then learners, as of the last applied configuration); 0: none.
func (r *Replica) memberOn(node uint64) uint64 {
	cs := r.ConfState()
	for _, l := range [][]uint64{cs.Voters, cs.VotersOutgoing, cs.Learners, cs.LearnersNext} {
		for _, id := range l {
			if transport.NodeOf(id) == node {
				return id
			}
		}
	}
	return 0
}

// transferIfCaughtUp hands leadership to the voter on node when this
// replica leads and that voter is recently active with every entry of the
// log.
func (r *Replica) transferIfCaughtUp(node uint64) {
	to := r.memberOn(node)
	if r.failed != nil || to == 0 || to == r.ID() {
		return
	}
	st := r.g.Status()
	if st.RaftState != etcdraft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	pr, ok := st.Progress[to]
	if !ok || pr.IsLearner || !pr.RecentActive || pr.Match < r.p.LastIndex() {
		return
	}
	r.TransferLeadership(to)
}

// leaderUnreachable: the connection to one of peers failed. If it is this
// follower's leader, the follower's election clock jumps by an election
// timeout: it stops deferring to a leader it can no longer reach, and
// elects at its randomized timeout (within one more election timeout)
// instead of after a full one — a killed leader's followers both see its
// connection fail, so both leave its lease together and grant each other's
// votes. Ticks only pace elections; nothing about safety depends on them.
// A leader that is alive behind a failed connection keeps its followers
// that still reach it (their heartbeats reset the clock), so a blip costs
// at most an early election among those who lost it.
func (r *Replica) leaderUnreachable(peers []uint64) bool {
	if r.failed != nil {
		return false
	}
	bs := r.g.BasicStatus()
	if bs.RaftState != etcdraft.StateFollower || bs.Lead == 0 || !slices.Contains(peers, transport.NodeOf(bs.Lead)) {
		return false
	}
	ticks := r.cfg.Group.ElectionTicks
	if ticks == 0 {
		ticks = DefaultElectionTicks
	}
	for range ticks {
		r.Tick()
	}
	return true
}

// ReportUnreachable says that messages to node were lost (to every
// member of the group on it).
func (r *Replica) ReportUnreachable(node uint64) {
	if r.failed != nil {
		return
	}
	cs := r.ConfState()
	for _, l := range [][]uint64{cs.Voters, cs.VotersOutgoing, cs.Learners, cs.LearnersNext} {
		for _, id := range l {
			if transport.NodeOf(id) == node {
				_ = r.guard(func() error { r.g.rn.ReportUnreachable(id); return nil })
			}
		}
	}
}

// ReportSnapshot reports the outcome of a snapshot sent to peer id.
func (r *Replica) ReportSnapshot(id uint64, err error) {
	if r.failed == nil {
		st := etcdraft.SnapshotFinish
		if err != nil {
			st = etcdraft.SnapshotFailure
		}
		_ = r.guard(func() error { r.g.rn.ReportSnapshot(id, st); return nil })
	}
}

// BasicStatus is the group's raft status without the progress of peers
// (no allocation).
func (r *Replica) BasicStatus() etcdraft.BasicStatus { return r.g.rn.BasicStatus() }

// ConfState is the membership saved with the last applied configuration
// change (or the bootstrap). The caller must not change its slices.
func (r *Replica) ConfState() raftpb.ConfState { return r.ss.State().ConfState }

// Status is the group's raft status.
func (r *Replica) Status() etcdraft.Status { return r.g.Status() }

// HasReady reports whether Process has work.
func (r *Replica) HasReady() bool { return r.failed == nil && r.g.HasReady() }

// CommitIndex is the last raft index applied: every entry up to it is
// committed, durable here and visible below CommittedEnd.
func (r *Replica) CommitIndex() uint64 { return r.applied }

// CommittedEnd is the data offset below which every record is committed
// (and applied): what engine/ passes to the partition's setCommitted.
func (r *Replica) CommittedEnd() int64 { return r.committed }

// Process carries out one Ready: the messages for peers go to send at once
// (a leader replicates before its own fsync); each Append is written to the
// partition log (a conflicting suffix truncated first) and fsynced through
// the log's group commit, then its HardState saved, and only then are its
// responses released (to send, or stepped locally); each Apply advances the
// committed end. It returns ErrReplicaStopped (wrapping the cause) on any
// storage failure, after which the replica must be reopened.
func (r *Replica) Process(ctx context.Context, send func([]raftpb.Message)) error {
	if r.failed != nil {
		return r.failed
	}
	if !r.HasReady() {
		return nil
	}
	var w Work
	if err := r.guard(func() error { w = r.g.Ready(); return nil }); err != nil {
		return err
	}
	if r.onReady != nil {
		r.onReady(&w)
	}
	if len(w.Send) > 0 {
		send(w.Send)
	}
	for _, a := range w.Appends {
		if err := r.persist(ctx, a); err != nil {
			return r.stop(err)
		}
		if r.onDurable != nil && len(a.Entries) > 0 {
			r.onDurable(a.Entries)
		}
		var msgs []raftpb.Message
		if err := r.guard(func() (err error) { msgs, err = r.g.AppendDone(a); return err }); err != nil {
			return r.stop(err)
		}
		if len(msgs) > 0 {
			send(msgs)
		}
	}
	for _, ap := range w.Applies {
		if n := len(ap.Entries); n > 0 {
			var bases []int64
			if r.onApply != nil {
				bases = r.entryBases(ap.Entries)
			}
			if err := r.applyTo(ap.Entries[n-1].Index); err != nil {
				return r.stop(err)
			}
			if err := r.applyCommands(ap.Entries); err != nil {
				return r.stop(err)
			}
			for i, b := range bases {
				if b >= 0 {
					r.onApply(ap.Entries[i], b)
				}
			}
		}
		var out Applied
		var msgs []raftpb.Message
		if err := r.guard(func() (err error) { out, msgs, err = r.g.ApplyDone(ap); return err }); err != nil {
			return r.stop(err)
		}
		if out.ConfState != nil {
			st := r.ss.State()
			st.ConfState, st.Applied = *out.ConfState, out.Index
			if err := r.ss.Save(st); err != nil {
				return r.stop(err)
			}
			r.checkConfs(out.Index, *out.ConfState)
		}
		if len(msgs) > 0 {
			send(msgs)
		}
	}
	return nil
}

// persist makes a durable: entries first (truncating a conflicting
// suffix), then the HardState.
func (r *Replica) persist(ctx context.Context, a Append) error {
	if a.Snapshot != nil && !etcdraft.IsEmptySnap(*a.Snapshot) {
		if err := r.install(*a.Snapshot, a.HardState); err != nil {
			return err
		}
	}
	if n := len(a.Entries); n > 0 {
		first, last := a.Entries[0].Index, a.Entries[n-1].Index
		if first <= r.endsBase {
			return fmt.Errorf("raft replica %s: raft asked to replace entry %d, at or below the applied index %d", r.p.Name(), first, r.endsBase)
		}
		if first <= r.p.LastIndex() {
			if err := r.p.TruncateAfter(first - 1); err != nil {
				return r.logFailure(fmt.Sprintf("truncate after %d", first-1), err)
			}
		}
		// The offsets the log will assign.
		r.ends = r.ends[:min(uint64(len(r.ends)), first-r.endsBase)]
		if uint64(len(r.ends)) != first-r.endsBase {
			return fmt.Errorf("raft replica %s: entry %d does not follow the log, which ends at %d", r.p.Name(), first, r.endsBase+uint64(len(r.ends))-1)
		}
		r.ents = r.ents[:0]
		for _, e := range a.Entries {
			le, err := LogEntry(e)
			if err != nil {
				return err
			}
			r.ents = append(r.ents, le)
			r.ends = append(r.ends, r.ends[len(r.ends)-1]+recordCount(le.Type, le.Data))
			if ts, ok := slog.PayloadMaxTimestamp(le.Data); ok && le.Type == slog.EntryData {
				r.lastTs = max(r.lastTs, ts)
			}
		}
		r.p.AppendEntries(r.ents, func(err error) { r.done <- err })
		select {
		case err := <-r.done:
			if err != nil {
				return r.logFailure(fmt.Sprintf("append entries %d-%d", first, last), err)
			}
		case <-ctx.Done():
			return fmt.Errorf("raft replica %s: waiting for entries %d-%d to be durable: %w", r.p.Name(), first, last, ctx.Err())
		}
		clear(r.ents) // drop the references to raft's data
		if d := r.p.DurableIndex(); d < last {
			return fmt.Errorf("raft replica %s: entries up to %d acknowledged by the log but durable only up to %d: replicated partitions need a store with FsyncAlways", r.p.Name(), last, d)
		}
		if got, want := r.p.NextOffset(), r.ends[len(r.ends)-1]; r.p.LastIndex() == last && got != want {
			return fmt.Errorf("%w: raft replica %s: the log's next offset after entry %d is %d, the replica expected %d", ErrInconsistent, r.p.Name(), last, got, want)
		}
	}
	if !etcdraft.IsEmptyHardState(a.HardState) {
		st := r.ss.State()
		// Only the term and the vote must be durable before the responses
		// go out (a node must never vote twice in a term, nor go back in
		// terms). The commit index need not be: after a restart a lower one
		// is learned again from the leader (raft accepts any commit between
		// the snapshot and the end of the log), and the records it covered
		// are committed in the group either way. Saving it on every append
		// cost a second fsync per round; it is saved with the next term or
		// vote change, or conf change.
		if st.HardState.Term != a.HardState.Term || st.HardState.Vote != a.HardState.Vote {
			st.HardState = a.HardState
			if err := r.ss.Save(st); err != nil {
				return err
			}
		}
		r.p.SetTruncateFloor(a.HardState.Commit)
	}
	return nil
}

// entryBases returns the data offset of the first record of each entry
// (where its records start), -1 for an entry at or below the applied index.
func (r *Replica) entryBases(ents []raftpb.Entry) []int64 {
	out := make([]int64, len(ents))
	for i, e := range ents {
		out[i] = -1
		if e.Index > r.endsBase {
			if k := e.Index - 1 - r.endsBase; k < uint64(len(r.ends)) {
				out[i] = r.ends[k]
			}
		}
	}
	return out
}

// entryBase is the data offset of the first record of the entry at index,
// written by this replica and not applied yet (ok false otherwise).
func (r *Replica) entryBase(index uint64) (int64, bool) {
	if index <= r.endsBase {
		return 0, false
	}
	k := index - 1 - r.endsBase
	if k >= uint64(len(r.ends)) {
		return 0, false
	}
	return r.ends[k], true
}

// applyTo makes the records of the entries up to index visible.
func (r *Replica) applyTo(index uint64) error {
	if index <= r.applied {
		return nil
	}
	k := index - r.endsBase
	if k >= uint64(len(r.ends)) {
		return fmt.Errorf("raft replica %s: apply up to %d, but the log the replica wrote ends at %d", r.p.Name(), index, r.endsBase+uint64(len(r.ends))-1)
	}
	r.committed = r.ends[k]
	r.ends = append(r.ends[:0], r.ends[k:]...)
	r.endsBase, r.applied = index, index
	if r.cfg.OnCommitted != nil {
		r.cfg.OnCommitted(r.committed)
	}
	return nil
}

// logFailure turns an error of the partition log into the replica's: a
// corruption quarantines the partition.
func (r *Replica) logFailure(what string, err error) error {
	var ce *slog.CorruptionError
	if errors.As(err, &ce) {
		r.p.Quarantine(ce)
		return fmt.Errorf("%w: partition %s: %s: %w", ErrLogCorrupt, r.p.Name(), what, err)
	}
	return fmt.Errorf("raft replica %s: %s: %w", r.p.Name(), what, err)
}

// guard runs f, turning the panic raft raises on a storage error it does
// not know into ErrLogCorrupt if the partition log recorded one; any other
// panic is a bug and goes on.
func (r *Replica) guard(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			ferr := r.plog.Failure()
			if ferr == nil {
				panic(v)
			}
			var ce *slog.CorruptionError
			if errors.As(ferr, &ce) {
				r.p.Quarantine(ce)
			}
			err = r.stop(ferr)
		}
	}()
	return f()
}

func (r *Replica) stop(err error) error {
	if r.failed == nil {
		r.failed = fmt.Errorf("%w: %w", ErrReplicaStopped, err)
	}
	return r.failed
}

// Close closes the state store. The partition's store is the caller's.
func (r *Replica) Close() error { return r.ss.Close() }
