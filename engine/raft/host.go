package raft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	stdslog "log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	raftracker "go.etcd.io/raft/v3/tracker"

	"github.com/spoolmq/spool/engine/transport"
	"github.com/spoolmq/spool/internal/wallclock"
)

// HostConfig configures the Host of one node. Zero fields take the defaults
// named below.
type HostConfig struct {
	// NodeID is this node's id: every replica it holds has a replica id on
	// it (transport.NodeOf of the id is NodeID).
	NodeID uint64
	// Send is the transport's Send: it must not block.
	Send func([]transport.Message)
	// TickInterval is the time between two ticks of every group (default
	// TickInterval); < 0: no internal ticker, the owner calls Tick.
	TickInterval time.Duration
	// Workers is the number of goroutines processing groups (default
	// 2×GOMAXPROCS, at least 2).
	Workers int
	// MaxInboxMsgs bounds the received messages waiting for one group
	// (default DefaultMaxInboxMsgs); more are dropped and counted
	// (HostStats.InboxDropped): raft sends again.
	MaxInboxMsgs int
	// ProposalTimeout: a proposal neither committed nor known lost by then
	// completes with ErrOutcomeUnknown (default DefaultProposalTimeout).
	ProposalTimeout time.Duration
	// Logger receives replica failures (default: discarded).
	Logger *stdslog.Logger
	// IdleTickEvery, when above 1, slows the clock of idle groups: a group
	// that saw nothing but ticks and heartbeats for IdleAfterTicks ticks
	// (twice that for a leader, so that its followers slow down first) is
	// ticked once every IdleTickEvery ticks — its heartbeats and election
	// timer slow down by as much — until anything else arrives for it: a
	// proposal, any other message, a call, or a peer's connection failing
	// (which wakes every group, so that a dead leader's followers elect at
	// the normal pace). 0 or 1: every group ticks at every tick.
	IdleTickEvery int
	// IdleAfterTicks is the idle time, in ticks, before a group slows down
	// (default DefaultIdleAfterTicks).
	IdleAfterTicks int
	// Quiesce lets a group with nothing to do stop ticking on every
	// replica (quiesce.go): its leader sends one quiesce message to its
	// followers instead of heartbeats, and anything for the group, or the
	// loss of a member's node (PeerUnreachable, NodeLive), wakes it. While
	// QuiesceAllowed says no, leaders do not quiesce and idle groups keep
	// the slow clock (IdleTickEvery); a follower always understands a
	// quiesce message.
	Quiesce bool
	// QuiesceAllowed says whether leaders may quiesce now (the cluster's
	// version turns the feature on: meta.Quiesce). Nil: always.
	QuiesceAllowed func() bool
	// NodeLive says whether a peer's node is live (node-level liveness,
	// the transport's Live): a group quiesces only while every member's
	// node is, and a node whose liveness to a group's leader's node is
	// lost names no leader for it (Status). Nil: every node is live.
	NodeLive func(node uint64) bool
	// CatchUpBytesPerSecond paces the copies replica moves make: the
	// appends this node, as a leader, sends to the learners of groups being
	// reconfigured share one budget of this many bytes of entries per
	// second; the rest waits (throttle.go). 0: not paced.
	CatchUpBytesPerSecond int64
	// OnStop, if set, is told once when a replica stops with an error (on
	// the worker that saw it; it must not block), and the host logs nothing
	// of it: the owner decides what to say and do (reopen it, repair it).
	// Nil: the host logs the stop at ERROR.
	OnStop func(group uint64, err error)
}

// Defaults of HostConfig.
const (
	DefaultMaxInboxMsgs    = 4096
	DefaultIdleAfterTicks  = 30
	DefaultProposalTimeout = 10 * time.Second
	// maxTicksPerVisit bounds the ticks a group catches up on in one visit:
	// a worker that fell behind must not make every group time out at once.
	maxTicksPerVisit = 3
)

func (c *HostConfig) validate() error {
	if c.NodeID == 0 {
		return errors.New("raft host: NodeID must not be 0")
	}
	if c.Send == nil {
		return errors.New("raft host: Send is required (the transport's Send)")
	}
	if c.TickInterval == 0 {
		c.TickInterval = TickInterval
	}
	if c.Workers == 0 {
		c.Workers = 2 * runtime.GOMAXPROCS(0)
	}
	c.Workers = max(c.Workers, 2)
	if c.IdleAfterTicks == 0 {
		c.IdleAfterTicks = DefaultIdleAfterTicks
	}
	if c.IdleTickEvery < 0 || c.IdleAfterTicks < 0 {
		return fmt.Errorf("raft host: IdleTickEvery %d, IdleAfterTicks %d: must not be negative", c.IdleTickEvery, c.IdleAfterTicks)
	}
	if c.MaxInboxMsgs == 0 {
		c.MaxInboxMsgs = DefaultMaxInboxMsgs
	}
	if c.ProposalTimeout == 0 {
		c.ProposalTimeout = DefaultProposalTimeout
	}
	if c.CatchUpBytesPerSecond < 0 {
		return fmt.Errorf("raft host: CatchUpBytesPerSecond %d must not be negative (0: not paced)", c.CatchUpBytesPerSecond)
	}
	if c.MaxInboxMsgs < 0 || c.ProposalTimeout < 0 {
		return fmt.Errorf("raft host: MaxInboxMsgs %d and ProposalTimeout %v must be positive (0 means the default)", c.MaxInboxMsgs, c.ProposalTimeout)
	}
	if c.Logger == nil {
		c.Logger = stdslog.New(stdslog.DiscardHandler)
	}
	return nil
}

// GroupStatus is a group's state as of the end of its last processing.
type GroupStatus struct {
	// Leader is the node of the group's leader (0: none known).
	Leader, Term uint64
	// CommitIndex is the last raft index applied here: every entry up to it
	// is committed and its records are below CommittedEnd.
	CommitIndex  uint64
	IsLeader     bool
	CommittedEnd int64
	// Voters and Learners are the membership of the last applied
	// configuration (or the bootstrap), as replica ids
	// (transport.ReplicaID; transport.NodeOf gives their nodes); in a
	// joint configuration, Voters are the incoming voters and Joint is set.
	Voters, Learners []uint64
	Joint            bool
	// Err is what the replica stopped with (ErrReplicaStopped wrapping the
	// cause); nil while it runs. A stopped replica is not driven any more:
	// Remove it and Add it again to reopen it from disk. A stopped replica
	// names no leader (Leader 0, IsLeader false), whatever its raft state
	// said when it stopped: the other replicas elect without it.
	Err error
}

// HostStats are the Host's counters since NewHost.
type HostStats struct {
	Groups             int
	Readies            uint64 // Readies processed
	ProposalsOK        uint64
	ProposalsLost      uint64 // ErrProposalLost
	ProposalsUnknown   uint64 // ErrOutcomeUnknown
	ProposalsNotLeader uint64 // *NotLeaderError
	ProposalsRefused   uint64 // any other error: a bad payload, an unknown group, a refused conf change
	InboxDropped       uint64 // received messages dropped: a group's inbox held MaxInboxMsgs
	Malformed          uint64 // received messages a replica refused before raft saw them (ErrMalformedMessage)
	ConfChangesSkipped uint64 // committed configuration changes raft refuses, skipped by every replica alike
	ReplicasStopped    uint64 // replicas that stopped with an error
	ElectionsHastened  uint64 // followers whose election clock jumped: their leader's connection failed
	GroupsQuiesced     int    // groups quiesced now (HostConfig.Quiesce)
	// RoleChanges counts the changes of a group's leader, leadership,
	// membership or stop, and groups added or removed — not commit
	// progress: a caller whose decisions read only those (the cluster's
	// chores) need not look again while it stays the same.
	RoleChanges uint64
	// CatchUpDelayed counts the appends to moving learners that waited for
	// the catch-up budget (CatchUpBytesPerSecond); CatchUpWaitingBytes is
	// the entry bytes waiting now.
	CatchUpDelayed      uint64
	CatchUpWaitingBytes int
}

// Host drives every raft group (Replica) of one node: no goroutine per
// group, but a scheduler that visits only the groups with work, a fixed
// pool of workers and one ticker (docs/replication.md, "The node's
// replicas: Host"). It is the transport's Handler. Every method is safe for
// concurrent use; Run owns the goroutines.
type Host struct {
	cfg   HostConfig
	sched *scheduler

	mu     sync.RWMutex
	groups map[uint64]*hostGroup // nil value: being added
	// awake are the groups not quiesced, which Tick visits; the quiesced
	// ones it sweeps only every quietSweepTicks.
	awake map[uint64]*hostGroup
	ticks atomic.Uint64 // Tick calls

	now func() time.Time // the clock of proposal deadlines and the catch-up budget (tests: virtual)
	thr *throttle        // nil: catch-up copies not paced

	running atomic.Bool
	stopped atomic.Bool
	async   sync.WaitGroup // completions of proposals that never reached a worker

	// The last log line about a malformed message (UnixNano of h.now) and
	// the refusals not logged since (logMalformed).
	malformedLoggedAt, malformedUnlogged atomic.Int64

	c struct {
		readies, ok, lost, unknown, notLeader, refused, inboxDropped, malformed, confSkipped, stopped, hastened, roles atomic.Uint64
		quiesced                                                                                                       atomic.Int64 // groups quiesced now
	}
}

// hostGroup is one group on the host.
type hostGroup struct {
	id uint64
	h  *Host
	r  *Replica

	// Guarded by Host.sched.mu.
	queued, processing, dead bool

	mu     sync.Mutex
	box    mailbox // work for the next visit
	spare  mailbox // the previous visit's, emptied, reused
	closed bool    // no more work is taken: removed or host stopped

	// Slow ticking of an idle group (HostConfig.IdleTickEvery); guarded by mu.
	idleTicks  int  // ticks delivered since the group last did anything
	sinceHeard int  // ticks delivered since its last heartbeat (or response)
	slow       bool // ticked once every IdleTickEvery ticks
	skipped    int  // ticks withheld since the last one delivered
	wakes      int  // times it left the slow clock (tests read it)

	// Quiescence (HostConfig.Quiesce, quiesce.go); guarded by mu, written
	// on the group's worker.
	quiet    bool // quiesced: no tick until something wakes it
	quiesces int  // times it quiesced (tests read it)
	// dropAnswer: while its worker processes the Ready of a visit that
	// left it quiet, the answers to quiesce heartbeats are not sent.
	dropAnswer bool

	// Owned by the worker holding the group (or, once dead, by finalize).
	track    *tracker
	stopSeen bool
	// Once the replica stopped: the node whose leader messages it received
	// last, and their term (noteLeader).
	heardLeader, heardTerm uint64

	moving atomic.Bool // a configuration change of a replica move is in flight
	// reconfiguredAt: the host clock (UnixNano) of the last Reconfigure;
	// for catchUpWindow after it, appends to learners are paced.
	reconfiguredAt atomic.Int64

	finalized bool // guarded by mu

	status atomic.Pointer[GroupStatus]
}

// mailbox is what arrived for a group since its last visit.
type mailbox struct {
	ticks       int
	quietTicks  int // ticks while quiesced: they pace only retention checks
	msgs        []raftpb.Message
	props       []*proposal
	unreachable []uint64
	snaps       []snapReport
	campaign    bool
	transfers   []uint64
	retention   *retentionSet // the last SetRetention since the previous visit
	retainFrom  int64         // the highest SetRetainFrom since the previous visit
	prefer      uint64        // PreferLeader: hand leadership to it if it has caught up
	reconfigure []uint64      // Reconfigure: the target voters of a replica move (nil: none)
}

type retentionSet struct {
	age   time.Duration
	bytes int64
}

type snapReport struct {
	peer uint64
	err  error
}

func (b *mailbox) empty() bool {
	return b.ticks == 0 && len(b.msgs) == 0 && len(b.props) == 0 && len(b.unreachable) == 0 && len(b.snaps) == 0 && !b.campaign && len(b.transfers) == 0 && b.retention == nil && b.retainFrom == 0 && b.prefer == 0 && b.reconfigure == nil
}

func (b *mailbox) reset() {
	clear(b.msgs)
	clear(b.props)
	clear(b.snaps)
	*b = mailbox{msgs: b.msgs[:0], props: b.props[:0], unreachable: b.unreachable[:0], snaps: b.snaps[:0], transfers: b.transfers[:0]}
}

// release drops the buffers of the mailbox's empty lists.
func (b *mailbox) release() {
	if len(b.msgs) == 0 {
		b.msgs = nil
	}
	if len(b.props) == 0 {
		b.props = nil
	}
	if len(b.unreachable) == 0 {
		b.unreachable = nil
	}
	if len(b.snaps) == 0 {
		b.snaps = nil
	}
	if len(b.transfers) == 0 {
		b.transfers = nil
	}
}

// ErrHostStopped is returned by Add and Run once Run has returned.
var ErrHostStopped = errors.New("raft host: stopped")

// NewHost returns a Host holding no group.
func NewHost(cfg HostConfig) (*Host, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, sched: newScheduler(), groups: map[uint64]*hostGroup{}, awake: map[uint64]*hostGroup{}, now: time.Now}
	if cfg.CatchUpBytesPerSecond > 0 {
		h.thr = newThrottle(cfg.CatchUpBytesPerSecond)
	}
	return h, nil
}

// Add opens the replica of group (OpenReplica) and starts driving it.
// cfg.Group.ID is a replica id on this node (transport.ReplicaID; the
// host's NodeID if 0). The replica's OnCommitted is called on a worker.
func (h *Host) Add(group uint64, cfg ReplicaConfig) error {
	if cfg.Group.ID == 0 {
		cfg.Group.ID = h.cfg.NodeID
	}
	if cfg.Logger == nil {
		cfg.Logger = h.cfg.Logger.With("group", group)
	}
	if transport.NodeOf(cfg.Group.ID) != h.cfg.NodeID {
		return fmt.Errorf("raft host: group %d: replica id %d is not on this node (%d): transport.ReplicaID makes it from the node's id", group, cfg.Group.ID, h.cfg.NodeID)
	}
	if h.stopped.Load() {
		return fmt.Errorf("raft host: add group %d: %w", group, ErrHostStopped)
	}
	h.mu.Lock()
	if _, ok := h.groups[group]; ok {
		h.mu.Unlock()
		return fmt.Errorf("raft host: group %d is already held by this node", group)
	}
	h.groups[group] = nil // reserved while opening
	h.mu.Unlock()
	r, err := OpenReplica(cfg)
	if err != nil {
		h.mu.Lock()
		delete(h.groups, group)
		h.mu.Unlock()
		return fmt.Errorf("raft host: group %d: %w", group, err)
	}
	g := &hostGroup{id: group, h: h, r: r, track: newTracker()}
	g.track.group = group
	r.onReady = func(w *Work) {
		g.track.ready(w)
		g.track.readStates(w.ReadStates, r.endAt)
	}
	r.onApply = g.track.applied
	r.onDurable = func(ents []raftpb.Entry) { g.track.durable(ents, r.entryBase) }
	if apply := cfg.OnApply; apply != nil {
		r.onApply = func(e raftpb.Entry, base int64) { g.track.applied(e, base); apply(e, base) }
	}
	g.refresh()
	h.mu.Lock()
	h.groups[group] = g
	h.awake[group] = g
	h.mu.Unlock()
	h.sched.enqueue(g)
	return nil
}

// Remove stops driving group: its pending proposals complete
// (ErrOutcomeUnknown if raft had them, ErrProposalLost if not yet), and
// its state store is closed (its log is the caller's).
func (h *Host) Remove(group uint64) error {
	h.mu.Lock()
	g := h.groups[group]
	if g != nil {
		delete(h.groups, group)
		delete(h.awake, group)
	}
	h.mu.Unlock()
	if g == nil {
		return fmt.Errorf("raft host: remove group %d: %w", group, transport.ErrUnknownGroup)
	}
	h.c.roles.Add(1)
	h.sched.kill(g)
	h.finalize(g, "the replica was removed")
	return g.r.Close()
}

// finalize completes every proposal of g, once; no worker holds g.
func (h *Host) finalize(g *hostGroup, why string) {
	g.mu.Lock()
	if g.finalized {
		g.mu.Unlock()
		return
	}
	g.closed, g.finalized = true, true
	g.setQuiet(false)
	box := g.box
	g.box = mailbox{}
	g.mu.Unlock()
	for _, p := range box.props {
		g.track.reject(p, fmt.Errorf("%w: %s before it was proposed", ErrProposalLost, why))
	}
	g.track.failAll(fmt.Errorf("%w: %s", ErrOutcomeUnknown, why))
	h.completeAsync(g.track.take())
}

func (h *Host) group(id uint64) *hostGroup {
	h.mu.RLock()
	g := h.groups[id]
	h.mu.RUnlock()
	return g
}

// Propose proposes a record payload (log.EncodeRecords) to group. done is
// called exactly once, never on the caller's goroutine nor under a lock of
// the Host, with: (base, nil) once the entry is committed and applied here
// (base: the data offset of its first record); *NotLeaderError if this
// node does not lead the group (nothing proposed); ErrProposalLost
// (wrapped) when it will certainly never commit; ErrOutcomeUnknown
// (wrapped) when it may or may not. A payload that is not a record payload
// or does not fit a log batch fails with ErrBadProposal, a group not held
// here with transport.ErrUnknownGroup (wrapped). done must not block: it
// runs on a worker.
func (h *Host) Propose(group uint64, data []byte, done func(base int64, err error)) {
	h.submit(group, &proposal{kind: kindRecords, data: data, done: func(res Proposed, err error) { done(res.Base, err) }})
}

// ProposeOptions chooses when a record proposal completes.
type ProposeOptions struct {
	// AtLeaderDurable completes the proposal once its entry is durable on
	// this node — the leader's own append fsynced by the log's group
	// commit — instead of once it is committed (acks=leader). Until then
	// the outcomes are Propose's; after it, success is final even if a new
	// leader later replaces the entry and it never commits: the records
	// are acknowledged but lost (docs/semantics.md, "Replication"). The
	// records become visible to readers only at commit, as always.
	AtLeaderDurable bool
}

// Proposed is where a record proposal's entry went.
type Proposed struct {
	// Base is the data offset of the entry's first record.
	Base int64
	// Index and Term are the entry's: while the log holds an entry of Term
	// at Index (log matching), it is this one.
	Index, Term uint64
}

// ProposeWith is Propose with options; done gets the entry's place.
func (h *Host) ProposeWith(group uint64, data []byte, opts ProposeOptions, done func(res Proposed, err error)) {
	h.submit(group, &proposal{kind: kindRecords, data: data, atDurable: opts.AtLeaderDurable, done: done})
}

// ProposeConfChange proposes a membership change to group; done as for
// Propose (nil once applied here), and ErrConfChangeRefused when raft
// refused it (another change pending, or a joint state to leave first).
func (h *Host) ProposeConfChange(group uint64, cc raftpb.ConfChangeV2, done func(err error)) {
	h.submit(group, &proposal{kind: kindConfChange, cc: cc, ccDone: done})
}

// ReadIndex confirms with a quorum of group's voters that this node still
// leads it (raft's ReadIndex, ReadOnlySafe) and calls done with the place
// a linearizable read must wait for: Proposed.Index, the leader's commit
// index when the quorum answered, and Proposed.Base, the data offset after
// it. A state applied here up to Base holds every command committed before
// ReadIndex was called. Reads asked in one visit share one request (one
// round of heartbeats). Errors: *NotLeaderError when this node does not
// lead or stops leading before a quorum answers; ErrProposalLost (wrapped)
// when no quorum answered within the proposal timeout. Nothing is written
// either way: a failed read is safe to ask again. done as for Propose.
func (h *Host) ReadIndex(group uint64, done func(res Proposed, err error)) {
	h.submit(group, &proposal{kind: kindRead, done: done})
}

func (h *Host) submit(group uint64, p *proposal) {
	g := h.group(group)
	if g == nil {
		p.err = fmt.Errorf("raft host: group %d is not held by this node: %w", group, transport.ErrUnknownGroup)
		h.completeAsync([]*proposal{p})
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		p.err = fmt.Errorf("%w: raft host: group %d is no longer driven (removed or host stopped); nothing was proposed", ErrProposalLost, group)
		h.completeAsync([]*proposal{p})
		return
	}
	g.box.props = append(g.box.props, p)
	g.mu.Unlock()
	h.sched.enqueue(g)
}

// post adds work to group's mailbox and schedules it.
func (h *Host) post(group uint64, f func(b *mailbox)) error {
	g := h.group(group)
	if g == nil {
		return fmt.Errorf("raft host: group %d: %w", group, transport.ErrUnknownGroup)
	}
	if st := g.status.Load(); st.Err != nil {
		return st.Err
	}
	g.mu.Lock()
	if !g.closed {
		f(&g.box)
		g.wake()
	}
	g.mu.Unlock()
	h.sched.enqueue(g)
	return nil
}

// Campaign makes this node start an election in group (on its next visit).
func (h *Host) Campaign(group uint64) error {
	return h.post(group, func(b *mailbox) { b.campaign = true })
}

// TransferLeadership asks this node, if it leads group, to hand leadership
// to the group's member on node to (on its next visit).
func (h *Host) TransferLeadership(group, to uint64) error {
	return h.post(group, func(b *mailbox) { b.transfers = append(b.transfers, to) })
}

// PreferLeader asks the group, if this node leads it, to hand leadership
// to its member on node to — only if that is a voter that raft has heard
// from recently and that holds every entry of the leader's log (a transfer
// to a lagging or absent replica would stall the group's writes until it
// aborts). For leadership balancing: the preferred leader took over after
// a restart.
func (h *Host) PreferLeader(group, to uint64) error {
	return h.post(group, func(b *mailbox) { b.prefer = to })
}

// Reconfigure asks the group, if this node leads it, to take the next step
// of moving its membership to target (the voters wanted): add a missing
// replica as a learner, promote caught-up learners and remove the voters
// not in target (joint consensus), hand the leadership to a target voter
// first when this node is not one of them, then remove stray learners
// (nextMove). target holds replica ids (transport.ReplicaID). One step
// per call at most, and none while the previous step's change is in
// flight: the caller asks again (the engine, every second while the move
// lasts) until Status shows the target's voters, no learners and no joint
// configuration.
func (h *Host) Reconfigure(group uint64, target []uint64) error {
	if len(target) == 0 {
		return fmt.Errorf("raft host: reconfigure group %d: the target has no voters", group)
	}
	t := slices.Clone(target)
	return h.post(group, func(b *mailbox) { b.reconfigure = t })
}

// reconfigure takes one step of a replica move (Reconfigure) if g's replica
// leads and no step is in flight.
func (h *Host) reconfigure(g *hostGroup, target []uint64, now time.Time) {
	r := g.r
	if r.Err() != nil || g.moving.Load() {
		return
	}
	st := r.Status()
	if st.RaftState != etcdraft.StateLeader || st.LeadTransferee != 0 {
		return
	}
	// Caught up: it holds every committed entry and the leader replicates
	// to it steadily (a replica that stopped answering, or whose connection
	// failed, is probed instead). Not raft's RecentActive: an idle group
	// hears from its followers only every few heartbeats, and each check
	// of the quorum clears it.
	caughtUp := func(id uint64) bool {
		pr, ok := st.Progress[id]
		return ok && pr.State == raftracker.StateReplicate && pr.Match >= st.Commit
	}
	step := nextMove(r.ConfState(), target, r.ID(), caughtUp)
	switch {
	case !step.propose && step.transfer == 0 && !step.done:
		h.cfg.Logger.Debug("replica move: waiting for target replicas to catch up", "group", g.id, "target", target, "commit", st.Commit, "progress", st.Progress)
	case step.transfer != 0:
		h.cfg.Logger.Info("replica move: handing the leadership to a target voter", "group", g.id, "to", step.transfer, "target", target)
		r.TransferLeadership(step.transfer)
	case step.propose:
		h.cfg.Logger.Info("replica move: proposing a configuration change", "group", g.id, "change", step.cc.String(), "target", target)
		g.moving.Store(true)
		h.propose(g, &proposal{kind: kindConfChange, cc: step.cc, ccDone: func(err error) {
			g.moving.Store(false)
			if err != nil {
				h.cfg.Logger.Warn("replica move: configuration change failed; the next Reconfigure tries again", "group", g.id, "change", step.cc.String(), "err", err)
			}
		}}, now)
	}
}

// Status is group's state as of its last processing, read without waiting
// for its worker.
func (h *Host) Status(group uint64) (GroupStatus, bool) {
	g := h.group(group)
	if g == nil {
		return GroupStatus{}, false
	}
	st := *g.status.Load()
	st.Voters, st.Learners = slices.Clone(st.Voters), slices.Clone(st.Learners)
	if st.Leader != 0 && !h.live(st.Leader) {
		st.Leader, st.IsLeader = 0, false // this node lost liveness to the leader's node: it claims no leader
	}
	return st, true
}

// Groups lists the groups held, in increasing order.
func (h *Host) Groups() []uint64 {
	h.mu.RLock()
	out := make([]uint64, 0, len(h.groups))
	for id, g := range h.groups {
		if g != nil {
			out = append(out, id)
		}
	}
	h.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Tick gives every group one tick (the internal ticker calls it every
// TickInterval).
func (h *Host) Tick() {
	if h.thr != nil {
		if msgs := h.thr.release(h.now()); len(msgs) > 0 {
			h.cfg.Send(msgs)
		}
	}
	if h.ticks.Add(1)%quietSweepTicks == 0 {
		h.each(h.groups, func(g *hostGroup) bool {
			if !g.quiet {
				return false
			}
			if st := g.status.Load(); st == nil || !st.IsLeader {
				return false // a quiet follower has nothing to do on a clock
			}
			g.box.quietTicks += quietSweepTicks
			return g.box.quietTicks >= g.r.cfg.RetentionCheckTicks
		})
	}
	every := h.cfg.IdleTickEvery
	h.each(h.awake, func(g *hostGroup) bool {
		if g.quiet {
			return false // quiesced since it was last visited
		}
		if g.slow {
			if g.skipped++; g.skipped < every {
				return false // no visit at all: the point of slowing down
			}
			g.skipped = 0
		}
		g.box.ticks++
		return true
	})
}

// quiesceOn says whether leaders quiesce idle groups now.
func (h *Host) quiesceOn() bool {
	return h.cfg.Quiesce && (h.cfg.QuiesceAllowed == nil || h.cfg.QuiesceAllowed())
}

// quietSweepTicks: Tick visits the quiesced groups once in this many
// ticks (their leaders' retention checks), not at every tick: 1,000 quiet
// groups cost the ticker nothing.
const quietSweepTicks = 10

// wake puts a slowed group back on the normal clock; the caller holds g.mu.
func (g *hostGroup) wake() {
	if g.slow {
		g.wakes++
	}
	g.slow, g.idleTicks, g.skipped = false, 0, 0
}

// idleMessage: what an idle group still exchanges.
func idleMessage(t raftpb.MessageType) bool {
	return t == raftpb.MsgHeartbeat || t == raftpb.MsgHeartbeatResp
}

// each calls f, with g.mu held, for every group of groups (h.groups or
// h.awake) still driven, and schedules those for which it returns true.
func (h *Host) each(groups map[uint64]*hostGroup, f func(g *hostGroup) bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, g := range groups {
		if g == nil {
			continue
		}
		g.mu.Lock()
		visit := !g.closed && f(g)
		g.mu.Unlock()
		if visit {
			h.sched.enqueue(g)
		}
	}
}

// RoleChanges is HostStats.RoleChanges, without the walk Stats makes.
func (h *Host) RoleChanges() uint64 { return h.c.roles.Load() }

// Stats returns the counters.
func (h *Host) Stats() HostStats {
	h.mu.RLock()
	n := 0
	for _, g := range h.groups {
		if g != nil {
			n++
		}
	}
	h.mu.RUnlock()
	st := HostStats{
		Groups: n, Readies: h.c.readies.Load(),
		ProposalsOK: h.c.ok.Load(), ProposalsLost: h.c.lost.Load(), ProposalsUnknown: h.c.unknown.Load(),
		ProposalsNotLeader: h.c.notLeader.Load(), ProposalsRefused: h.c.refused.Load(),
		InboxDropped: h.c.inboxDropped.Load(), Malformed: h.c.malformed.Load(), ReplicasStopped: h.c.stopped.Load(),
		ElectionsHastened: h.c.hastened.Load(), ConfChangesSkipped: h.c.confSkipped.Load(),
		GroupsQuiesced: int(h.c.quiesced.Load()), RoleChanges: h.c.roles.Load(),
	}
	if h.thr != nil {
		st.CatchUpDelayed, st.CatchUpWaitingBytes = h.thr.stats()
	}
	return st
}

// HandleMessage queues a received message for its group's next visit
// (transport.Handler). A full inbox drops it (counted). A message for
// another replica of the group on this node than the one it runs (an
// earlier incarnation, or one the node has not opened yet) is refused
// like one for an unknown group: raft does not look at To, and the replica
// must not answer in another's name.
func (h *Host) HandleMessage(m transport.Message) error {
	g := h.group(m.Group)
	if g == nil {
		return fmt.Errorf("raft host: message for group %d: %w", m.Group, transport.ErrUnknownGroup)
	}
	if id := g.r.ID(); m.Msg.To != id {
		return fmt.Errorf("raft host: message for replica %d of group %d, which this node runs as replica %d: %w", m.Msg.To, m.Group, id, transport.ErrUnknownGroup)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	if len(g.box.msgs) >= h.cfg.MaxInboxMsgs {
		g.mu.Unlock()
		h.c.inboxDropped.Add(1)
		return nil
	}
	if !idleMessage(m.Msg.Type) {
		g.wake()
	}
	g.box.msgs = append(g.box.msgs, m.Msg)
	g.mu.Unlock()
	h.sched.enqueue(g)
	return nil
}

// HandleSnapshot takes a received MsgSnap (transport.Handler): one that
// could not be installed (checkSnapshot) is refused with the reason and
// counted (HostStats.Malformed), any
// other is queued for its group's next visit, where the replica steps it in
// and installs it (Replica.install). Snapshots carry metadata only, so
// they are small; the inbox limit applies as to any message (a dropped one
// is sent again by raft).
func (h *Host) HandleSnapshot(_ context.Context, m transport.Message) error {
	if m.Msg.Type != raftpb.MsgSnap {
		return fmt.Errorf("raft host: node %d: a %s from node %d on the snapshot path of group %d", h.cfg.NodeID, m.Msg.Type, m.Msg.From, m.Group)
	}
	if err := checkSnapshot(m.Msg.Snapshot); err != nil {
		err = fmt.Errorf("raft host: node %d refuses the snapshot of group %d at index %d from node %d: %w: %w", h.cfg.NodeID, m.Group, snapIndex(m.Msg), m.Msg.From, ErrMalformedMessage, err)
		h.c.malformed.Add(1)
		h.logMalformed(m.Group, m.Msg, err)
		return err
	}
	return h.HandleMessage(m)
}

// SetRetention changes the retention of group's partition
// (ReplicaConfig.RetentionAge and RetentionBytes; 0 keeps forever). It
// takes effect at the group's next visit; the leader applies it to every
// replica through the log (docs/replication.md, "Snapshots, compaction and
// retention").
func (h *Host) SetRetention(group uint64, age time.Duration, bytes int64) error {
	if age < 0 || bytes < 0 {
		return fmt.Errorf("raft host: group %d: negative retention (%v, %d bytes)", group, age, bytes)
	}
	return h.post(group, func(b *mailbox) { b.retention = &retentionSet{age: age, bytes: bytes} })
}

// SetRetainFrom lets group's partition give up the records before offset
// off (Replica.SetRetainFrom), at the group's next visit; the leader
// applies it to every replica through the log.
func (h *Host) SetRetainFrom(group uint64, off int64) error {
	if off <= 0 {
		return fmt.Errorf("raft host: group %d: retain-from offset %d, want one above 0", group, off)
	}
	return h.post(group, func(b *mailbox) { b.retainFrom = max(b.retainFrom, off) })
}

func snapIndex(m raftpb.Message) uint64 {
	if m.Snapshot == nil {
		return 0
	}
	return m.Snapshot.Metadata.Index
}

// PeerUnreachable reports to every group that messages to peer were lost
// (transport.Handler).
func (h *Host) PeerUnreachable(peer uint64) {
	h.each(h.groups, func(g *hostGroup) bool {
		if g.quiet && !g.hasMemberOn(peer) {
			return false // nothing of it is on that node: it stays quiet
		}
		g.wake() // a slowed follower of a dead leader must elect at the normal pace
		if !slices.Contains(g.box.unreachable, peer) {
			g.box.unreachable = append(g.box.unreachable, peer)
		}
		return true
	})
}

// SnapshotDone reports the outcome of a snapshot sent (transport.Handler).
func (h *Host) SnapshotDone(group, peer uint64, err error) {
	_ = h.post(group, func(b *mailbox) { b.snaps = append(b.snaps, snapReport{peer, err}) })
}

// Run runs the workers and the ticker until ctx ends, then completes every
// pending proposal (ErrOutcomeUnknown if raft had it, ErrProposalLost if
// not yet) and returns nil. The replicas stay open: Remove closes them.
func (h *Host) Run(ctx context.Context) error {
	if h.stopped.Load() {
		return ErrHostStopped
	}
	if !h.running.CompareAndSwap(false, true) {
		return errors.New("raft host: Run called twice")
	}
	var wg sync.WaitGroup
	for i := range h.cfg.Workers {
		wg.Go(func() { h.work(ctx, i) })
	}
	if h.cfg.TickInterval > 0 {
		wg.Go(func() {
			t := time.NewTicker(h.cfg.TickInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					h.Tick()
				}
			}
		})
	}
	<-ctx.Done()
	h.sched.close()
	wg.Wait()
	h.stopped.Store(true)
	h.mu.RLock()
	var gs []*hostGroup
	for _, g := range h.groups {
		if g != nil {
			gs = append(gs, g)
		}
	}
	h.mu.RUnlock()
	for _, g := range gs {
		h.sched.kill(g)
		h.finalize(g, "the host stopped")
	}
	h.async.Wait()
	return nil
}

// work is one worker: it processes the groups the scheduler hands out.
func (h *Host) work(ctx context.Context, _ int) {
	for {
		g := h.sched.next()
		if g == nil {
			return
		}
		done, more := h.process(ctx, g)
		if more {
			h.sched.enqueue(g)
		}
		h.sched.finish(g)
		h.complete(done)
	}
}

// process is one visit of g: the mailbox into the replica, then one Ready.
// It returns the proposals resolved and whether g has more work.
func (h *Host) process(ctx context.Context, g *hostGroup) ([]*proposal, bool) {
	g.mu.Lock()
	box := g.box
	g.box, g.spare = g.spare, mailbox{}
	wasQuiet := g.quiet
	g.mu.Unlock()
	r, now := g.r, h.now()
	work := len(box.props) > 0 || box.campaign || len(box.transfers) > 0 || len(box.snaps) > 0 ||
		len(box.unreachable) > 0 || box.retention != nil || box.retainFrom != 0 || box.prefer != 0 || box.reconfigure != nil
	busy, heard := work, false
	for _, m := range box.msgs {
		busy = busy || !idleMessage(m.Type)
		heard = heard || idleMessage(m.Type)
	}
	lastBefore, appliedBefore, confSkipped := r.p.LastIndex(), r.CommitIndex(), r.confSkipped
	quiet := h.tick(g, box, wasQuiet, busy)
	quiet = h.step(g, box.msgs, quiet && !work)
	for _, node := range box.unreachable {
		r.ReportUnreachable(node)
	}
	if len(box.unreachable) > 0 && r.leaderUnreachable(box.unreachable) {
		h.c.hastened.Add(1)
	}
	for _, s := range box.snaps {
		r.ReportSnapshot(s.peer, s.err)
	}
	if box.campaign {
		_ = r.Campaign()
	}
	for _, to := range box.transfers {
		if id := r.memberOn(to); id != 0 {
			r.TransferLeadership(id)
		}
	}
	if box.prefer != 0 {
		r.transferIfCaughtUp(box.prefer)
	}
	if rs := box.retention; rs != nil {
		_ = r.SetRetention(rs.age, rs.bytes) // checked by Host.SetRetention
	}
	if box.retainFrom != 0 {
		r.SetRetainFrom(box.retainFrom)
	}
	if box.reconfigure != nil {
		g.reconfiguredAt.Store(now.UnixNano())
		h.reconfigure(g, box.reconfigure, now)
	}
	var reads []*proposal
	for _, p := range box.props {
		if p.kind == kindRead {
			reads = append(reads, p)
			continue
		}
		h.propose(g, p, now)
	}
	if len(reads) > 0 {
		h.readIndex(g, reads, now)
	}
	if r.Err() == nil && r.HasReady() {
		h.c.readies.Add(1)
		g.dropAnswer = quiet
		_ = r.Process(ctx, g.send)
		g.dropAnswer = false
	}
	g.track.expire(now)
	g.track.expireReads(now)
	h.c.confSkipped.Add(r.confSkipped - confSkipped)
	h.noteStop(ctx, g)
	g.refresh()
	grew := r.p.LastIndex() != lastBefore || g.track.pending() > 0
	busy = busy || grew || r.CommitIndex() != appliedBefore
	quiet = quiet && !grew && r.Err() == nil
	if wasQuiet && !quiet && !fromLeader(r, box.msgs) {
		g.nudge()
	}
	g.mu.Lock()
	changed := g.setQuiet(quiet)
	g.slowClock(busy, heard, box.ticks)
	g.mu.Unlock()
	if changed {
		h.setAwake(g, !quiet)
	}
	box.reset()
	g.mu.Lock()
	g.spare = box
	if quiet { // a quiet group keeps no buffers: a thousand of them held ~1.5 MiB
		g.spare.release()
		g.box.release()
	}
	more := !g.box.empty()
	g.mu.Unlock()
	return g.track.take(), more || (r.Err() == nil && r.HasReady())
}

// tick gives g's replica the visit's ticks and says whether g is quiet
// after them. A quiet group takes no raft tick (its quiet ticks pace only
// its retention checks); a leader with nothing to do quiesces instead of
// ticking (leaderQuiesce), as CockroachDB's does.
func (h *Host) tick(g *hostGroup, box mailbox, quiet, busy bool) bool {
	r := g.r
	if quiet {
		r.tickQuiet(box.quietTicks)
		return true
	}
	if box.ticks > 0 && !busy && h.quiesceOn() && r.Err() == nil && r.BasicStatus().RaftState == etcdraft.StateLeader {
		if v := h.leaderView(g, false); leaderQuiesce(v) == "" {
			g.quiesce(v, r.BasicStatus().Term)
			return true
		}
	}
	for range min(box.ticks, maxTicksPerVisit) {
		r.Tick()
	}
	return false
}

// fromLeader says whether msgs hold one from the replica's leader.
func fromLeader(r *Replica, msgs []raftpb.Message) bool {
	lead := r.BasicStatus().Lead
	for _, m := range msgs {
		if lead != 0 && m.From == lead {
			return true
		}
	}
	return false
}

// setQuiet records whether g is quiesced and says whether that changed;
// the caller holds g.mu.
func (g *hostGroup) setQuiet(quiet bool) bool {
	if g.quiet == quiet {
		return false
	}
	g.quiet = quiet
	if quiet {
		g.h.c.quiesced.Add(1)
		g.quiesces++
	} else {
		g.h.c.quiesced.Add(-1)
	}
	return true
}

// setAwake puts g in the groups Tick visits, or takes it out; g.mu is not
// held (h.mu comes first).
func (h *Host) setAwake(g *hostGroup, awake bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.groups[g.id] != g:
		// removed meanwhile
	case awake:
		h.awake[g.id] = g
	default:
		delete(h.awake, g.id)
	}
}

// slowClock keeps the slow clock of an idle group (IdleTickEvery); the
// caller holds g.mu.
func (g *hostGroup) slowClock(busy, heard bool, ticks int) {
	every := g.h.cfg.IdleTickEvery
	if every <= 1 {
		return
	}
	if g.h.quiesceOn() { // quiescence replaces the slow clock
		g.wake()
		return
	}
	if heard {
		g.sinceHeard = 0
	} else {
		g.sinceHeard += ticks
	}
	st := g.status.Load()
	switch {
	case busy, st == nil, st.Leader == 0:
		g.wake()
	case g.sinceHeard > 2*DefaultHeartbeatTicks:
		// A group that stops hearing heartbeats (a leader gone without
		// its connection failing, or a leader on the normal clock while
		// this follower is slowed) must not idle: its election timer
		// runs at the normal pace again.
		g.wake()
	case !g.slow:
		g.idleTicks += ticks
		after := g.h.cfg.IdleAfterTicks
		if st.IsLeader {
			after *= 2 // followers slow down first
		}
		g.slow = g.idleTicks >= after
	}
}

// step feeds a visit's received messages to g's replica and says whether
// the group is quiet after them (quiesceStep; without quiescence, never).
func (h *Host) step(g *hostGroup, msgs []raftpb.Message, quiet bool) bool {
	for _, m := range msgs {
		if h.cfg.Quiesce {
			quiet = h.quiesceStep(g, m, quiet)
		} else {
			h.stepOne(g, m)
		}
	}
	return quiet
}

// stepOne feeds one received message to g's replica; once it has stopped,
// messages only say who leads (noteLeader).
func (h *Host) stepOne(g *hostGroup, m raftpb.Message) {
	r := g.r
	if r.Err() != nil {
		g.noteLeader(m)
		return
	}
	if err := r.Step(m); err != nil && r.Err() == nil {
		if errors.Is(err, ErrMalformedMessage) {
			h.c.malformed.Add(1)
			h.logMalformed(g.id, m, err)
			return
		}
		h.cfg.Logger.Debug("raft message refused", "group", g.id, "type", m.Type.String(), "from", m.From, "err", err)
	}
}

// noteStop, once g's replica has stopped: counts it, tells the owner
// (OnStop) or logs it, and fails its pending proposals as unknown.
func (h *Host) noteStop(ctx context.Context, g *hostGroup) {
	err := g.r.Err()
	if err == nil || g.stopSeen {
		return
	}
	g.stopSeen = true
	h.c.stopped.Add(1)
	switch {
	case ctx.Err() != nil:
	case h.cfg.OnStop != nil:
		h.cfg.OnStop(g.id, err)
	default:
		h.cfg.Logger.Error("raft replica stopped; remove and add it again to reopen it from disk", "group", g.id, "err", err)
	}
	g.track.failAll(fmt.Errorf("%w: %w", ErrOutcomeUnknown, err))
}

// propose hands p to the replica if it leads.
func (h *Host) propose(g *hostGroup, p *proposal, now time.Time) {
	r := g.r
	if r.Err() != nil {
		g.track.reject(p, &NotLeaderError{Group: g.id})
		return
	}
	bs := r.BasicStatus()
	if bs.RaftState != etcdraft.StateLeader {
		g.track.reject(p, &NotLeaderError{Group: g.id, Leader: transport.NodeOf(bs.Lead)})
		return
	}
	var err error
	if p.kind == kindRecords {
		err = r.ProposeRecords(p.data, wallclock.UnixMilli(now))
	} else {
		err = r.ProposeConfChange(p.cc)
	}
	switch {
	case err == nil:
		p.term, p.deadline = bs.Term, now.Add(h.cfg.ProposalTimeout)
		g.track.proposed(p)
	case errors.Is(err, etcdraft.ErrProposalDropped):
		g.track.reject(p, fmt.Errorf("%w: raft group %d dropped it (a leadership transfer in progress, or MaxUncommittedBytes reached)", ErrProposalLost, g.id))
	case r.Err() != nil:
		g.track.reject(p, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err))
	default:
		g.track.reject(p, err)
	}
}

// readIndex asks raft, in one ReadIndex request, to confirm that this
// node still leads g for the reads of a visit.
func (h *Host) readIndex(g *hostGroup, reads []*proposal, now time.Time) {
	r := g.r
	bs := r.BasicStatus()
	if r.Err() != nil || bs.RaftState != etcdraft.StateLeader {
		for _, p := range reads {
			g.track.reject(p, &NotLeaderError{Group: g.id, Leader: transport.NodeOf(bs.Lead)})
		}
		return
	}
	id := g.track.read(reads, bs.Term, now.Add(h.cfg.ProposalTimeout))
	var rctx [8]byte
	binary.BigEndian.PutUint64(rctx[:], id)
	if err := r.ReadIndex(rctx[:]); err != nil {
		g.track.failAll(fmt.Errorf("%w: %w", ErrOutcomeUnknown, err))
	}
}

func (g *hostGroup) send(msgs []raftpb.Message) {
	out := make([]transport.Message, 0, len(msgs))
	for _, m := range msgs {
		if g.dropAnswer && m.Type == raftpb.MsgHeartbeatResp {
			continue // the answer to a quiesce heartbeat agreed to
		}
		out = append(out, transport.Message{Group: g.id, Msg: m})
	}
	if t := g.h.thr; t != nil {
		if at := g.reconfiguredAt.Load(); at != 0 {
			if now := g.h.now(); now.UnixNano()-at < int64(catchUpWindow) {
				out = g.pace(t, now, out)
			}
		}
	}
	if len(out) > 0 {
		g.h.cfg.Send(out)
	}
}

// pace passes the appends to g's learners through the catch-up budget
// (all of them, empty ones too, so that none overtakes another); the
// other messages go at once. On g's worker (it reads the replica).
func (g *hostGroup) pace(t *throttle, now time.Time, out []transport.Message) []transport.Message {
	learners := g.r.ConfState().Learners
	if len(learners) == 0 {
		return out
	}
	var copies []transport.Message
	keep := out[:0]
	for _, m := range out {
		if m.Msg.Type == raftpb.MsgApp && slices.Contains(learners, m.Msg.To) {
			copies = append(copies, m)
			continue
		}
		keep = append(keep, m)
	}
	if len(copies) == 0 {
		return keep
	}
	return append(keep, t.admit(now, copies)...)
}

// refresh publishes g's status if it changed.
func (g *hostGroup) refresh() {
	r := g.r
	bs, cs, prev := r.BasicStatus(), r.ConfState(), g.status.Load()
	st := GroupStatus{Leader: transport.NodeOf(bs.Lead), Term: bs.Term, CommitIndex: r.CommitIndex(), IsLeader: bs.RaftState == etcdraft.StateLeader,
		CommittedEnd: r.CommittedEnd(), Err: r.Err(), Joint: len(cs.VotersOutgoing) > 0 || len(cs.LearnersNext) > 0}
	if st.Err != nil {
		// A stopped replica's raft state is frozen at the stop: it may say
		// "leader" while the others elect another. It names only the leader
		// it has heard from since, so that this node's callers go there.
		st.Leader, st.IsLeader = 0, false
		if g.heardTerm >= bs.Term && g.heardLeader != 0 {
			st.Leader, st.Term = g.heardLeader, g.heardTerm
		}
	}
	if prev != nil && slices.Equal(prev.Voters, cs.Voters) && slices.Equal(prev.Learners, cs.Learners) && prev.Joint == st.Joint {
		st.Voters, st.Learners = prev.Voters, prev.Learners
		if st.Leader == prev.Leader && st.Term == prev.Term && st.CommitIndex == prev.CommitIndex && st.IsLeader == prev.IsLeader &&
			st.CommittedEnd == prev.CommittedEnd && st.Err == prev.Err {
			return
		}
	} else {
		st.Voters, st.Learners = slices.Clone(cs.Voters), slices.Clone(cs.Learners)
	}
	if prev == nil || st.Leader != prev.Leader || st.IsLeader != prev.IsLeader || st.Err != prev.Err || st.Joint != prev.Joint ||
		!slices.Equal(st.Voters, prev.Voters) || !slices.Equal(st.Learners, prev.Learners) {
		g.h.c.roles.Add(1)
	}
	g.status.Store(&st)
}

// noteLeader: a stopped replica steps nothing, but a message only a leader
// sends (an append, a heartbeat, a snapshot) still says who leads and in
// which term; the latest is what its status names (refresh). Routing takes
// it as a hint, which a wrong node answers with the leader it knows.
func (g *hostGroup) noteLeader(m raftpb.Message) {
	switch m.Type {
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap:
		if m.Term >= g.heardTerm && m.From != 0 {
			g.heardLeader, g.heardTerm = transport.NodeOf(m.From), m.Term
		}
	}
}

// complete calls the callbacks of resolved proposals (on a worker, no lock
// held) and counts their outcomes.
func (h *Host) complete(ps []*proposal) {
	for _, p := range ps {
		var nl *NotLeaderError
		switch {
		case p.err == nil:
			h.c.ok.Add(1)
		case errors.Is(p.err, ErrProposalLost):
			h.c.lost.Add(1)
		case errors.Is(p.err, ErrOutcomeUnknown):
			h.c.unknown.Add(1)
		case errors.As(p.err, &nl):
			h.c.notLeader.Add(1)
		default:
			h.c.refused.Add(1)
		}
		p.complete()
	}
}

// completeAsync completes ps on a goroutine of their own: the caller may
// be the proposer.
func (h *Host) completeAsync(ps []*proposal) {
	if len(ps) == 0 {
		return
	}
	h.async.Go(func() { h.complete(ps) })
}

var _ transport.Handler = (*Host)(nil)
