package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/internal/rsm"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	"github.com/spoolmq/spool/engine/transport"
)

// member is the role of a node that is a cluster member: its raft host and
// transport, the controller's log (group 0) and its applier, the replicas
// it opened and the chores of the controller's leader. It shares the Node
// it plays the role of (embedded). Here: its state, the chores, the
// controller's machine and its replicas; its start (joining, the host and
// transport, the components) is in cluster.go, its moves, leaving and
// deleting in cluster_move.go, cluster_leave.go and cluster_delete.go.
type member struct {
	*Node

	bootstrap bool // this node created the cluster (no identity, no Join)

	started atomic.Bool // host is set (start); until then the node is joining
	host    *raft.Host
	tr      *transport.GRPC
	ctrlP   *log.Partition // group 0's log

	ctrlSignal chan struct{} // cap 1: group 0's committed end moved
	choresWake chan struct{} // cap 1: run the chores now (a controller membership step applied)
	ctrlEnd    atomic.Int64  // group 0's committed end, from OnCommitted
	// placementSeen: placementKnown held once (it stays so).
	placementSeen atomic.Bool

	// ctrl applies group 0's log to the state.
	ctrl *rsm.Applier[meta.Command, meta.Result]

	// Guarded by Node.mu, with the state.
	opened map[uint64]bool // groups whose replica this node runs
	// straysDue: the data of partitions this node no longer holds may need
	// deleting (set at start and by dropReplica; the chores clear it once
	// removeStrayReplicas could ask the controller's leader).
	straysDue bool
	ccBusy    bool // a controller conf change is in flight
	// damaged: the groups whose replica here was found damaged, by the
	// replica id that ran on the damaged copy (cluster_repair.go).
	damaged map[uint64]uint64

	// Owned by the register loop (the chores): since when the controller
	// leader has not reached each node (reset when it stops leading).
	unreached map[uint64]time.Time
	// finalizeWant is the cluster version every node has spoken since
	// finalizeSince (0: none higher), for autoFinalize.
	finalizeWant  uint32
	finalizeSince time.Time
	// clusterVersion is the applied state's cluster version, for the
	// transport's AcceptPeer (which must not wait for c.mu).
	clusterVersion atomic.Uint32
	// repairs: the chores' progress in repairing each damaged replica.
	repairs map[uint64]*repairing
	// choresRounds counts the chores rounds run (chores.go; tests read it).
	choresRounds atomic.Uint64

	removedSeen bool // owned by the controller loop: this node's removal was logged

	// Peer requests refused (ClusterStats.PeerRefusals).
	refusedProduce, refusedJoin atomic.Uint64
	// endReadsServed counts the reads of a partition's committed end this
	// member answered (FetchRequest with offset -1): what nodes that read
	// remotely ask of it.
	endReadsServed atomic.Uint64
	// served caches the encoding of the state Metadata sends;
	// metadataStatesServed counts the states it sent (not the unchanged
	// answers).
	served               servedState
	metadataStatesServed atomic.Uint64

	// stops: the replicas stopped by a storage error, and when each is
	// reopened (cluster_reopen.go); replicasReopened counts the reopens
	// that added a replica again.
	stops            *stoppedReplicas
	replicasReopened atomic.Uint64
	// reopenMu orders a reopen (remove, then add again) with the removals
	// that are for good (detach: placement, deletion), so that a reopen
	// never brings back a replica the node was told to give up.
	reopenMu sync.Mutex

	gate pauseGate // fault injection in tests (pause.go); open otherwise

	// applyBound, if set (tests only), is the next offset of group 0's log
	// this node may apply: a node whose view of the cluster lags.
	applyBound func() int64
}

// newMember makes n a member; Run starts it.
func newMember(n *Node) *member {
	return &member{
		Node:       n,
		ctrlSignal: make(chan struct{}, 1),
		choresWake: make(chan struct{}, 1),
		opened:     map[uint64]bool{},
		damaged:    map[uint64]uint64{},
		unreached:  map[uint64]time.Time{},
		repairs:    map[uint64]*repairing{},
		stops:      newStoppedReplicas(n.cfg.ReopenStoppedEvery),
	}
}

// openIdentity reads the member's identity from its data dir, or creates
// a cluster when it has none and nothing to join.
func (c *member) openIdentity() error {
	id, ok, err := loadIdentity(c.fs, c.dir)
	if err != nil {
		return err
	}
	switch {
	case ok:
		c.id = id
	case len(c.cfg.Join) == 0:
		if err := c.createCluster(); err != nil {
			return err
		}
	}
	return nil
}

// status: nothing until the host is made (a joining node), then the host's.
func (c *member) status(group uint64) (raft.GroupStatus, bool) {
	if !c.started.Load() {
		return raft.GroupStatus{}, false
	}
	return c.host.Status(group)
}

// proposeWith proposes on the member's raft host.
func (c *member) proposeWith(group uint64, data []byte, opts raft.ProposeOptions, done func(raft.Proposed, error)) {
	c.host.ProposeWith(group, data, opts, done)
}

// readIndex confirms the member's leadership of group on its raft host.
func (c *member) readIndex(group uint64, done func(raft.Proposed, error)) {
	if !c.started.Load() {
		done(raft.Proposed{}, &raft.NotLeaderError{Group: group})
		return
	}
	c.host.ReadIndex(group, done)
}

// whyNotReady explains the wait for operators.
func (c *member) whyNotReady() error {
	st, ok := c.status(controllerGroup)
	switch {
	case !ok:
		return errors.New("the controller's replica is not open")
	case st.Err != nil:
		return st.Err
	case st.Leader == 0:
		return fmt.Errorf("the controller has no leader (voters %v): a majority of them must be running and reachable at cluster.listen", st.Voters)
	default:
		return fmt.Errorf("the controller (led by node %d) has not admitted this node yet", st.Leader)
	}
}

// register makes this node a member: a bootstrapping node initialises the
// cluster and adds itself; every node keeps its advertised address current.
// Then it does the controller leader's chores while it leads.
func (c *member) register(ctx context.Context) error {
	if c.bootstrap {
		_ = c.host.Campaign(controllerGroup)
		for c.stateClusterID() == "" {
			_, err := c.proposeMeta(ctx, meta.Command{Init: &meta.Init{ClusterID: c.id.ClusterID}})
			if err == nil || errors.Is(err, errAlreadyApplied) {
				break
			}
			c.logger.Warn("spool cluster: initialising the cluster failed; retrying", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(c.cfg.TickInterval * 5):
			}
		}
	}
	// A node's own log may not show its removal (the entry committed after
	// it left group 0): its peers' state says.
	removed := false
	if !c.bootstrap {
		var err error
		if removed, err = c.removedByPeers(ctx); err != nil {
			return err
		}
	}
	if removed {
		return fmt.Errorf("%w: node %d was removed from cluster %s (decommissioned): it cannot rejoin with this identity; wipe %s and start it again with cluster.join to join as a new node", engine.ErrRemoved, c.id.NodeID, c.id.ClusterID, c.conf.DataDir)
	}
	for {
		c.mu.Lock()
		self, known := c.state.Node(c.id.NodeID)
		c.mu.Unlock()
		if known && self.Addr == c.cfg.Advertise {
			break
		}
		var cmd meta.Command
		switch {
		case known: // the node came back at another address (a new pod IP)
			cmd.SetNodeAddr = &meta.SetNodeAddr{ID: c.id.NodeID, Addr: c.cfg.Advertise}
		case c.bootstrap:
			cmd.AddNode = &meta.AddNode{Addr: c.cfg.Advertise, Token: c.id.Token, Identity: c.selfIdentity()}
		case c.id.NodeID < c.stateNextNodeID():
			return fmt.Errorf("%w: node %d was removed from cluster %s (decommissioned): it cannot rejoin with this identity; wipe %s and start it again with cluster.join to join as a new node", engine.ErrRemoved, c.id.NodeID, c.id.ClusterID, c.conf.DataDir)
		default: // admitted (Join answered) but not applied here yet
			ctx2, cancel := context.WithTimeout(ctx, c.cfg.JoinTimeout)
			err := c.awaitState(ctx2, func(s *meta.State) bool { _, ok := s.Node(c.id.NodeID); return ok })
			cancel()
			if err != nil {
				return fmt.Errorf("admitted as node %d but the controller's log has not reached this node: %w", c.id.NodeID, c.whyNotReady())
			}
			continue
		}
		res, err := c.proposeMeta(ctx, cmd)
		if err != nil {
			c.logger.Warn("spool cluster: registering this node failed; retrying", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(c.cfg.TickInterval * 5):
			}
			continue
		}
		if cmd.AddNode != nil && res.NodeID != c.id.NodeID {
			return fmt.Errorf("the new cluster gave this node id %d, want %d: remove %s and start again", res.NodeID, c.id.NodeID, c.dir)
		}
	}
	if c.bootstrap {
		c.finalizeAtBirth(ctx)
	}
	c.mu.Lock()
	select {
	case <-c.ready:
	default:
		close(c.ready)
	}
	c.mu.Unlock()
	every := max(c.cfg.TickInterval*10, 100*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	c.mu.Lock()
	c.straysDue = true // replicas a move took away while this node was down
	c.mu.Unlock()
	plan := choresPlan{every: every, balanceEvery: balanceEveryChores * every, balanced: time.Now()}
	woken := false
	for {
		in, now := c.choresInputs(), time.Now()
		if plan.due(in, now, woken) {
			balance := plan.balance(in, now)
			handBack := c.choresRound(ctx, balance)
			plan.ran(in, now, balance, c.choresPending(handBack))
		}
		woken = false
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-c.choresWake: // a controller membership step applied: take the next at once
			woken = true
		}
	}
}

// choresRound runs the chores once; balance: leaderships are balanced too.
// handBack: some were asked to go back to their preferred nodes.
func (c *member) choresRound(ctx context.Context, balance bool) (handBack bool) {
	c.choresRounds.Add(1)
	c.mu.Lock()
	due := c.straysDue
	c.straysDue = false
	c.mu.Unlock()
	if due && !c.removeStrayReplicas(ctx) {
		c.mu.Lock()
		c.straysDue = true // no leader to ask: the next round tries again
		c.mu.Unlock()
	}
	c.reopenStopped(time.Now())
	c.leaderChores()
	c.repairDamaged(ctx)
	c.driveMoves(ctx)
	c.planMoves(ctx)
	c.autoFinalize(ctx, time.Now())
	if balance {
		handBack = c.balanceLeaders()
	}
	return handBack
}

// balanceEveryChores: leadership is rebalanced at most every this many
// chores intervals (every 5 s with the default tick), after a change of
// leaders or memberships.
const balanceEveryChores = 5

// balanceLeaders asks each group this node leads, and whose preferred
// leader (the first replica placement chose) is another node, to hand its
// leadership back once that node has caught up: after a restart the
// preferred leader finds its groups led elsewhere, and one node would end
// up leading everything.
func (c *member) balanceLeaders() (asked bool) {
	c.tab.Mu.RLock()
	var parts []*partition
	for _, t := range c.tab.Topics {
		for _, p := range t.Parts {
			if p.Log != nil && len(p.X.replicas()) > 1 {
				parts = append(parts, p)
			}
		}
	}
	c.tab.Mu.RUnlock()
	for _, p := range parts {
		// A preferred leader that is leaving or down is given nothing: it
		// is about to lose its replica (cluster_leave.go).
		if st, ok := c.host.Status(p.X.raftGroup); ok && st.IsLeader {
			if to, ok := c.nextLeader(st, p.X.replicas(), false, 0); ok {
				_ = c.host.PreferLeader(p.X.raftGroup, to)
				asked = true
			}
		}
	}
	return asked
}

// leaderChores: while this node leads the controller, move group 0's
// membership one step toward meta.ControllerMembers.
func (c *member) leaderChores() {
	st, ok := c.host.Status(controllerGroup)
	if !ok || !st.IsLeader {
		return
	}
	c.mu.Lock()
	if c.ccBusy {
		c.mu.Unlock()
		return
	}
	cc, change := meta.NextConfChange(confState(st), c.state)
	if change {
		c.ccBusy = true
	}
	c.mu.Unlock()
	if !change {
		return
	}
	c.host.ProposeConfChange(controllerGroup, cc, func(err error) {
		c.mu.Lock()
		c.ccBusy = false
		c.mu.Unlock()
		select { // the next step (a promotion after an added learner) goes at once
		case c.choresWake <- struct{}{}:
		default:
		}
		if err != nil {
			c.logger.Warn("spool cluster: controller membership change failed; retrying", "change", cc.String(), "err", err)
		}
	})
}

// signalController wakes the controller loop (group 0's committed end moved).
func (c *member) signalController() {
	select {
	case c.ctrlSignal <- struct{}{}:
	default:
	}
}

// runController applies group 0's committed commands as they commit.
func (c *member) runController(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.ctrlSignal:
			if err := c.applyController(); errors.Is(err, engine.ErrClusterVersion) {
				return err // this release cannot follow the cluster: the node stops
			}
		}
	}
}

// applyController applies the committed commands not applied yet
// (controllerMachine). Only the controller loop (and run, before it
// starts) calls it.
func (c *member) applyController() error {
	end := c.ctrlCommitted()
	if c.applyBound != nil {
		end = min(end, c.applyBound())
	}
	return c.ctrl.CatchUp(end) // a stopped applier logged why; Status reports it
}

// controllerMachine applies group 0's log to the controller's state
// (engine/meta) through the one applier (engine/internal/rsm). A batch is
// applied to a copy of the state; this node is brought in line with it
// (peers, topics, replicas) and only then is it published: whoever sees a
// state through c.state finds this node already matching it.
type controllerMachine struct{ c *member }

// Decode reads one controller command and checks its values
// (Command.Validate, which depends on the bytes alone): a record that does
// not decode or validate is skipped and counted by every node alike
// (rsm's Skipped). meta.State.Apply checks what depends on the state.
func (m controllerMachine) Decode(b []byte) (meta.Command, error) { return decodeControllerCommand(b) }

func (m controllerMachine) Apply(entries []rsm.Entry[meta.Command]) ([]meta.Result, int, error) {
	c := m.c
	c.mu.Lock()
	st := c.state.Clone()
	c.mu.Unlock()
	res := make([]meta.Result, len(entries))
	var deleted []meta.Topic // topics deleted by these commands, as they were
	for i, e := range entries {
		var gone meta.Topic
		var had bool
		if e.Cmd.DeleteTopic != nil {
			gone, had = st.Topic(e.Cmd.DeleteTopic.Name)
		}
		res[i] = st.Apply(e.Cmd)
		if had && res[i].Err == nil {
			deleted = append(deleted, gone)
		}
	}
	if err := c.checkSpeaks(st); err != nil {
		return nil, 0, err // nothing of the batch is published: the node stops
	}
	for _, t := range deleted { // before placing what the state holds (the name may be created again)
		c.deleteTopicData(t)
	}
	c.noteRemoval(st)
	c.reconcile(st)
	c.clusterVersion.Store(st.ClusterVersion())
	c.mu.Lock()
	c.state = st
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	return res, len(entries), nil
}

// Restore: the controller's log is kept whole (no retention, no
// checkpoints), so it never starts past what this node applied.
func (m controllerMachine) Restore(_ rsm.Log, start, _ int64) (int64, error) {
	return 0, fmt.Errorf("the controller's log is kept whole, yet it starts at offset %d here: wipe this node's data dir and join it again", start)
}

// maxRecentResults is how many controller results are kept for proposers
// waiting on them.
const maxRecentResults = 4096

// ctrlCommitted is group 0's committed end. It comes from OnCommitted
// itself: the host's status is refreshed only after the Process that
// called it, so a wake-up reading the status could miss the last commit.
func (c *member) ctrlCommitted() int64 { return c.ctrlEnd.Load() }

// placementKnown: this node applied the controller's log up to its
// committed end with a leader known — raft learns the leader and its
// commit index from the same message, so a restarted node's state is then
// as new as the leader's was, not the commit index it saved. Once true it
// stays true: later commands move placements, which placeTopic follows.
func (c *member) placementKnown() bool {
	if c.placementSeen.Load() {
		return true
	}
	st, ok := c.host.Status(controllerGroup)
	if !ok || st.Leader == 0 || c.ctrl.Applied() < c.ctrlCommitted() {
		return false
	}
	c.placementSeen.Store(true)
	return true
}

// noteRemoval logs, once, that st no longer has this member: it was
// removed from the cluster (decommissioned).
func (c *member) noteRemoval(st *meta.State) {
	if _, ok := st.Node(c.id.NodeID); !ok && c.id.NodeID < st.NextNodeID() && !c.removedSeen {
		c.removedSeen = true
		c.logger.Error("spool cluster: this node was removed from the cluster (decommissioned); it holds no replicas and takes no part in it any more: stop it, and wipe its data dir to join again as a new node", "node", c.id.NodeID)
	}
}

// removePeer stops the raft transport's connection to a removed node.
func (c *member) removePeer(id uint64) { c.tr.RemovePeer(id) }

// addPeer gives the raft transport a new (or moved) node's address.
func (c *member) addPeer(id uint64, addr string) {
	if err := c.tr.AddPeer(id, addr); err != nil {
		c.logger.Error("spool cluster: cannot add peer", "node", id, "addr", addr, "err", err)
	}
}

// replicaOps are what placing a topic does with this member's replicas.
func (c *member) replicaOps() replicaOps {
	return replicaOps{open: c.openReplica, retain: c.retain, drop: c.dropReplica, stop: c.stopReplica, fresh: c.freshData}
}

// retain gives a running replica its topic's current retention.
func (c *member) retain(part *partition) {
	c.tab.Mu.RLock()
	spec := part.Topic.Spec
	c.tab.Mu.RUnlock()
	if err := c.host.SetRetention(part.X.raftGroup, spec.RetentionAge, spec.RetentionBytes); err != nil {
		c.logger.Error("spool cluster: cannot change a partition's retention", "topic", part.Topic.Name, "partition", part.Num, "err", err)
	}
}

// dropReplica stops this node's replica of a partition a move took away
// from it. Its data stays until the controller's leader confirms that no
// replica of the partition is wanted here (removeStrayReplicas, which the
// chores run next): this node's view of the cluster may lag, and a move
// back may already have given the partition to it again. The copy is then
// opened again from disk, under the replica id the move back gave it
// (transport.ReplicaID: a new incarnation), instead of copying the whole
// log anew.
func (c *member) dropReplica(part *partition) {
	name := engine.PartitionName(part.Topic.Name, part.Num)
	c.stopReplica(part)
	c.mu.Lock()
	c.straysDue = true
	c.mu.Unlock()
	select {
	case c.choresWake <- struct{}{}:
	default:
	}
	c.logger.Info("spool cluster: a replica moved away from this node; stopped, its data is deleted once the controller's leader confirms", "partition", name, "group", part.X.raftGroup)
}

// stopReplica stops this node's replica of a partition and keeps its data.
func (c *member) stopReplica(part *partition) {
	if err := c.detach(part.X.raftGroup); err != nil && !errors.Is(err, transport.ErrUnknownGroup) {
		c.logger.Warn("spool cluster: cannot stop a partition's replica", "topic", part.Topic.Name, "partition", part.Num, "group", part.X.raftGroup, "err", err)
	}
	// Forgotten only once stopped: the stray chore skips groups still
	// opened, so it never deletes the log of a running replica.
	c.mu.Lock()
	delete(c.opened, part.X.raftGroup)
	c.mu.Unlock()
}

// openReplica starts this node's replica of a partition (once), and logs
// why not.
func (c *member) openReplica(part *partition, bootstrap bool) error {
	err := c.addReplica(part, bootstrap)
	var owner *logOwnerError
	switch {
	case errors.Is(err, errDamagedHere): // the repair chore says what happens (cluster_repair.go)
	case errors.As(err, &owner):
		c.logger.Warn("spool cluster: not opening a partition's replica", "topic", part.Topic.Name, "partition", part.Num, "group", part.X.raftGroup, "err", owner.err)
	case err != nil:
		c.logger.Error("spool cluster: cannot open a partition's replica", "topic", part.Topic.Name, "partition", part.Num, "group", part.X.raftGroup, "err", err)
	}
	return err
}

// errDamagedHere: a replica is not opened under the id it ran under on
// damaged data (cluster_repair.go).
var errDamagedHere = errors.New("damaged replica")

// logOwnerError: checkLogOwner refused to open a replica.
type logOwnerError struct{ err error }

func (e *logOwnerError) Error() string { return e.err.Error() }
func (e *logOwnerError) Unwrap() error { return e.err }

// addReplica is openReplica without the log lines (a reopen that fails on
// a full disk says nothing: its stop was logged).
func (c *member) addReplica(part *partition, bootstrap bool) error {
	c.mu.Lock()
	done := c.opened[part.X.raftGroup]
	bad, isBad := c.damaged[part.X.raftGroup]
	damaged := isBad && bad == part.X.replica
	if !done && !damaged {
		c.opened[part.X.raftGroup] = true
	}
	c.mu.Unlock()
	if done {
		return nil
	}
	if damaged {
		// Never under the id it ran under on damaged data: the copy may
		// have lost entries it acknowledged (cluster_repair.go).
		return fmt.Errorf("%w: the replica of %s/%d (group %d) is damaged here; it reopens once the controller has given the partition a new copy", errDamagedHere, part.Topic.Name, part.Num, part.X.raftGroup)
	}
	if err := c.checkLogOwner(part); err != nil {
		c.mu.Lock()
		delete(c.opened, part.X.raftGroup) // the next reconcile looks again
		c.mu.Unlock()
		return &logOwnerError{err}
	}
	c.tab.Mu.RLock()
	spec := part.Topic.Spec
	c.tab.Mu.RUnlock()
	var voters []uint64
	if m := part.X.mem.Load(); bootstrap && m != nil {
		voters = m.replicaIDs(m.replicas)
	}
	part.X.producers.countEvictions(&c.producersEvicted)
	err := c.host.Add(part.X.raftGroup, raft.ReplicaConfig{
		Partition:      part.Log,
		RetentionAge:   spec.RetentionAge,
		RetentionBytes: spec.RetentionBytes,
		Logger:         c.conf.Logger,
		FS:             c.fs,
		Dir:            c.groupDir(part.X.raftGroup),
		Voters:         voters,
		Group:          raft.GroupConfig{ID: part.X.replica},
		MaxBatchBytes:  c.conf.Log.MaxBatchBytes,
		OnCommitted:    part.SetCommitted,
		OnApply:        part.X.producers.applied,
		SnapshotApp:    part.X.producers.snapshot,
		OnSnapshot: func(app []byte) {
			part.X.producers.restore(app, c.conf.Logger, engine.PartitionName(part.Topic.Name, part.Num))
		},
	})
	if err != nil {
		c.mu.Lock()
		delete(c.opened, part.X.raftGroup) // the next reconcile tries again
		c.mu.Unlock()
		return err
	}
	if st, ok := c.host.Status(part.X.raftGroup); ok {
		if err := part.X.producers.rebuild(part.Log, st.CommitIndex); err != nil {
			c.logger.Warn("spool cluster: cannot read the log's tail for producer deduplication; resends of batches stored before this restart may be stored twice", "topic", part.Topic.Name, "partition", part.Num, "err", err)
		}
	}
	// The preferred leader (placement balances them over the nodes) starts
	// an election at once: leaders spread over the cluster instead of
	// going to whichever replica's election timer fires first.
	if reps := part.X.replicas(); bootstrap && len(reps) > 0 && reps[0] == c.id.NodeID {
		_ = c.host.Campaign(part.X.raftGroup)
	}
	return nil
}

// controllerHolders: a member finds the controller's leader through its own
// replica of group 0 (its raft status), so it names no holders.
func (c *member) controllerHolders() []uint64 { return nil }

// awaitResult returns the result of the controller command at base once
// this member has applied it.
func (c *member) awaitResult(ctx context.Context, cmd meta.Command, base int64) (meta.Result, error) {
	res, err := c.ctrl.WaitApplied(ctx, base)
	switch {
	case err != nil:
		return meta.Result{}, fmt.Errorf("engine: controller command: %w", err)
	case cmd.Init != nil && res.Err != nil && c.stateClusterID() == c.id.ClusterID:
		return res, errAlreadyApplied
	case res.Err != nil:
		return res, res.Err
	}
	return res, nil
}

// appliedState returns the controller's state once this member has
// applied every command committed when it was called (false: ctx ended
// first, or the applier stopped).
func (c *member) appliedState(ctx context.Context) (*meta.State, bool) {
	if err := c.ctrl.AwaitApplied(ctx, c.ctrlCommitted()); err != nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, true
}
