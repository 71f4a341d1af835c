package raft

import (
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TickInterval is the time a node-level ticker waits between two Group.Tick
// calls. With the default ElectionTicks a follower campaigns after 1-2 s
// without hearing from a leader.
const TickInterval = 100 * time.Millisecond

// GroupConfig configures one raft group on this node. Zero fields take the
// defaults named below; validate rejects nonsense.
type GroupConfig struct {
	// ID is this node's id in the group (non-zero).
	ID uint64
	// Storage is the group's raft.Storage (NewStorage).
	Storage *Storage
	// ElectionTicks (default 10) and HeartbeatTicks (default 2) are in
	// ticks of TickInterval.
	ElectionTicks  int
	HeartbeatTicks int
	// MaxMsgBytes bounds the entries of one append message (default
	// DefaultMaxMsgBytes).
	MaxMsgBytes uint64
	// MaxInflightMsgs bounds the append messages in flight to one follower
	// (default DefaultMaxInflightMsgs).
	MaxInflightMsgs int
	// MaxInflightBytes bounds the entry bytes of the append messages in
	// flight to one follower (default DefaultMaxInflightBytes): what a
	// follower that copies a whole log (a new replica, paced by the Host's
	// catch-up budget) can have queued for it.
	MaxInflightBytes uint64
	// MaxUncommittedBytes bounds the payload a leader holds uncommitted;
	// past it proposals fail with ErrProposalDropped (default
	// DefaultMaxUncommittedBytes).
	MaxUncommittedBytes uint64
	// MaxApplyingBytes bounds the committed entries handed out for applying
	// and not yet reported done (default DefaultMaxApplyingBytes).
	MaxApplyingBytes uint64
	// Logger receives raft's log lines (default: discarded).
	Logger etcdraft.Logger
}

// Defaults of GroupConfig.
const (
	DefaultElectionTicks       = 10
	DefaultHeartbeatTicks      = 2
	DefaultMaxMsgBytes         = 1 << 20
	DefaultMaxInflightMsgs     = 256
	DefaultMaxInflightBytes    = 8 << 20
	DefaultMaxUncommittedBytes = 64 << 20
	DefaultMaxApplyingBytes    = 16 << 20
)

func (c *GroupConfig) validate() error {
	if c.ID == 0 {
		return errors.New("raft group: ID must not be 0")
	}
	if c.Storage == nil {
		return errors.New("raft group: Storage is required")
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = DefaultElectionTicks
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if c.HeartbeatTicks < 0 || c.ElectionTicks <= c.HeartbeatTicks {
		return fmt.Errorf("raft group: ElectionTicks (%d) must be greater than HeartbeatTicks (%d) > 0", c.ElectionTicks, c.HeartbeatTicks)
	}
	if c.MaxMsgBytes == 0 {
		c.MaxMsgBytes = DefaultMaxMsgBytes
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = max(DefaultMaxInflightBytes, c.MaxMsgBytes) // raft wants at least one message
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = DefaultMaxInflightMsgs
	}
	if c.MaxInflightMsgs < 0 {
		return fmt.Errorf("raft group: MaxInflightMsgs %d must be positive", c.MaxInflightMsgs)
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = DefaultMaxUncommittedBytes
	}
	if c.MaxApplyingBytes == 0 {
		c.MaxApplyingBytes = DefaultMaxApplyingBytes
	}
	if c.Logger == nil {
		c.Logger = &etcdraft.DefaultLogger{Logger: stdlog.New(io.Discard, "", 0)}
	}
	return nil
}

// Group drives the RawNode of one raft group on this node. It has no
// goroutine, no clock and no I/O: Tick, Step and Propose feed it; Ready
// hands out the work as values; AppendDone and ApplyDone report the work
// done. Not safe for concurrent use: one scheduler goroutine owns it.
//
// The AsyncStorageWrites contract, as the owner must honour it:
//   - Work.Send may go to peers at once (a leader replicates before its own
//     fsync).
//   - Every Append, in the order handed out across calls to Ready, is
//     written to the group's log (first dropping any entries at or after
//     Entries[0].Index) and, if HardState is not empty, to its StateStore;
//     only once both are durable is AppendDone called, which feeds the
//     local responses back and returns the ones for peers (votes and
//     MsgAppResp are therefore never sent before the fsync).
//   - Every Apply, in order, is applied, then ApplyDone is called. Applies
//     and Appends are two independent queues.
//   - Appends of many groups may be written together and fsynced once: the
//     order inside a group is what counts.
type Group struct {
	id uint64
	rn *etcdraft.RawNode
}

// Work is what one Ready asks of the owner.
type Work struct {
	// Send goes to peers now.
	Send []raftpb.Message
	// Appends, in order: make each durable, then AppendDone.
	Appends []Append
	// Applies, in order: apply each, then ApplyDone.
	Applies []Apply
	// SoftState is the new leader and role, nil if unchanged.
	SoftState *etcdraft.SoftState
	// ReadStates answer ReadIndex requests: each read is linearizable once
	// the state applied here reaches its Index.
	ReadStates []etcdraft.ReadState
}

// Append is one MsgStorageAppend: what must be durable before Responses are
// delivered.
type Append struct {
	// Entries to append; an existing entry at or after Entries[0].Index is
	// replaced (a follower's uncommitted suffix that conflicts with the
	// leader's).
	Entries []raftpb.Entry
	// HardState to save; empty (raft.IsEmptyHardState) when unchanged.
	HardState raftpb.HardState
	// Snapshot received from the leader, to install before the entries:
	// save it, reset the log to start empty after its index, then save the
	// state with its ConfState as applied at its index. Nil if none.
	Snapshot *raftpb.Snapshot
	// Responses to deliver once the above is durable (AppendDone).
	Responses []raftpb.Message
}

// Apply is one MsgStorageApply: committed entries to apply.
type Apply struct {
	Entries   []raftpb.Entry
	Responses []raftpb.Message
}

// Applied is the outcome of ApplyDone.
type Applied struct {
	// Index is the last index applied.
	Index uint64
	// ConfState is the membership after the configuration changes among the
	// entries, nil if there was none. Save it with Index as State.Applied.
	ConfState *raftpb.ConfState
}

// NewGroup returns the driver of one group, starting from what its Storage
// holds (a new group: an empty log and a State whose ConfState names the
// initial voters).
func NewGroup(cfg GroupConfig) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rn, err := etcdraft.NewRawNode(&etcdraft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   cfg.Storage,
		Applied:                   cfg.Storage.Applied(),
		AsyncStorageWrites:        true,
		MaxSizePerMsg:             cfg.MaxMsgBytes,
		MaxCommittedSizePerReady:  cfg.MaxApplyingBytes,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedBytes,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		MaxInflightBytes:          cfg.MaxInflightBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            etcdraft.ReadOnlySafe,
		// A leader that a replica move removes steps down once the change
		// applies, and the remaining voters elect (moves transfer the
		// leadership first when they can: reconfigure.go).
		StepDownOnRemoval: true,
		// The Host proposes on the leader only; with forwarding off no
		// honest replica sends a MsgProp, and one from a peer is refused
		// (checkInbound).
		DisableProposalForwarding: true,
		Logger:                    cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("raft group %d: %w", cfg.ID, err)
	}
	return &Group{id: cfg.ID, rn: rn}, nil
}

// Tick advances the group's logical clock by one TickInterval.
func (g *Group) Tick() { g.rn.Tick() }

// Step feeds a message from a peer. Local message types are refused.
func (g *Group) Step(m raftpb.Message) error {
	if etcdraft.IsLocalMsg(m.Type) {
		return fmt.Errorf("raft group %d: refused local message %s from %d", g.id, m.Type, m.From)
	}
	return g.rn.Step(m)
}

// Campaign makes this node start an election now (with PreVote, a
// pre-election first) instead of waiting for its election timeout.
func (g *Group) Campaign() error { return g.rn.Campaign() }

// Propose appends data as a new entry if this node leads (or forwards it
// to the leader); raft's ErrProposalDropped says it was not taken.
func (g *Group) Propose(data []byte) error { return g.rn.Propose(data) }

// ProposeConfChange proposes a membership change.
func (g *Group) ProposeConfChange(cc raftpb.ConfChangeI) error { return g.rn.ProposeConfChange(cc) }

// ReadIndex asks the leader to confirm with a quorum that it still leads
// (ReadOnlySafe); the answer comes as a ReadState in a later Ready,
// carrying rctx. Raft drops the request silently when this node does not
// lead or stops leading before a quorum answers.
func (g *Group) ReadIndex(rctx []byte) { g.rn.ReadIndex(rctx) }

// HasReady reports whether Ready has work.
func (g *Group) HasReady() bool { return g.rn.HasReady() }

// BasicStatus is the group's raft status without the followers' progress
// (no allocation).
func (g *Group) BasicStatus() etcdraft.BasicStatus { return g.rn.BasicStatus() }

// Status is the group's raft status.
func (g *Group) Status() etcdraft.Status { return g.rn.Status() }

// Ready takes the group's pending work and splits it.
func (g *Group) Ready() Work {
	rd := g.rn.Ready()
	w := Work{SoftState: rd.SoftState, ReadStates: rd.ReadStates}
	for _, m := range rd.Messages {
		switch m.To {
		case etcdraft.LocalAppendThread:
			a := Append{Entries: m.Entries, Snapshot: m.Snapshot, Responses: m.Responses}
			if hs := (raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}); !etcdraft.IsEmptyHardState(hs) {
				a.HardState = hs
			}
			w.Appends = append(w.Appends, a)
		case etcdraft.LocalApplyThread:
			w.Applies = append(w.Applies, Apply{Entries: m.Entries, Responses: m.Responses})
		default:
			w.Send = append(w.Send, m)
		}
	}
	return w
}

// AppendDone reports that a is durable: the responses for this node are
// stepped into the group, the others returned for sending.
func (g *Group) AppendDone(a Append) ([]raftpb.Message, error) {
	return g.deliver(a.Responses)
}

// ApplyDone reports that a is applied. Configuration changes among its
// entries are applied to the group here, but for one raft refuses to apply
// to the configuration in force (it panics on it): that one is skipped, as
// every replica skips it (errConfRefused).
func (g *Group) ApplyDone(a Apply) (Applied, []raftpb.Message, error) {
	var out Applied
	for _, e := range a.Entries {
		out.Index = e.Index
		var cc raftpb.ConfChangeI
		switch e.Type {
		case raftpb.EntryConfChange:
			var c raftpb.ConfChange
			if err := c.Unmarshal(e.Data); err != nil {
				return out, nil, fmt.Errorf("raft group %d: entry %d: decode conf change: %w", g.id, e.Index, err)
			}
			cc = c
		case raftpb.EntryConfChangeV2:
			var c raftpb.ConfChangeV2
			if err := c.Unmarshal(e.Data); err != nil {
				return out, nil, fmt.Errorf("raft group %d: entry %d: decode conf change: %w", g.id, e.Index, err)
			}
			cc = c
		default:
			continue
		}
		if g.refuses(e) {
			continue
		}
		out.ConfState = g.rn.ApplyConfChange(cc)
	}
	msgs, err := g.deliver(a.Responses)
	return out, msgs, err
}

// refuses reports whether raft refuses to apply the configuration change
// of entry e to the configuration in force: replayed on a copy of it.
func (g *Group) refuses(e raftpb.Entry) bool {
	rp, err := newConfReplay(confStateOf(g.rn.Status().Config), e.Index-1)
	if err != nil {
		return false // raft's own configuration: cannot happen
	}
	return errors.Is(rp.apply(e), errConfRefused)
}

func (g *Group) deliver(resps []raftpb.Message) ([]raftpb.Message, error) {
	var remote []raftpb.Message
	var first error
	for _, m := range resps {
		if m.To != g.id {
			remote = append(remote, m)
			continue
		}
		if err := g.rn.Step(m); err != nil && first == nil {
			first = fmt.Errorf("raft group %d: step local %s: %w", g.id, m.Type, err)
		}
	}
	return remote, first
}
