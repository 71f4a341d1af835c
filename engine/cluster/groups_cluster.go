package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/cluster/route"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/internal/rsm"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	"github.com/spoolmq/spool/internal/wallclock"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// Consumer groups across sidecars (docs/groups.md, "Running on the
// cluster"): the coordinators of engine/groups/coord run on the partitions
// of the internal topic meta.GroupsTopic. Every replica of a partition
// applies its committed records (one coord.Command each) in log order to
// its own coord.State, as every node applies group 0's log to meta.State;
// the leader of the partition is the coordinator of the groups hashed to
// it (CoordinatorPartition): it stamps commands with its clock, proposes
// them, answers once it has applied them, and proposes the expirations
// coord.Next says are due.

// DefaultGroupsCheckpointRecords is the default of
// ClusterConfig.GroupsCheckpointRecords: a coordinator's log holds about
// this many records past its newest checkpoint (heartbeats and commits of
// a few hundred bytes each), and a replica that starts replays at most
// these after rebuilding the state from the checkpoint.
const DefaultGroupsCheckpointRecords = 10_000

// checkpointRetry is how long a leader waits before trying a checkpoint
// again after one failed (a leader change, a full disk).
const checkpointRetry = 10 * time.Second

// DefaultGroupsPartitions is the default number of partitions of the
// groups topic (ClusterConfig.GroupsPartitions): the number of
// coordinators, each holding up to coord.MaxGroups groups. It is fixed
// when the topic is created.
const DefaultGroupsPartitions = 8

// errCoordUnavailable: the coordinator cannot answer on this node now
// (nothing was proposed): no replica here, its applier stopped, or a new
// leader still applying its predecessors' entries. Worth retrying at the
// leader.
var errCoordUnavailable = fmt.Errorf("coordinator unavailable here (%w)", route.ErrNotReady)

// CoordinatorPartition is the partition of the groups topic coordinating
// a group: FNV-1a (64 bits) of the group's name, modulo the topic's
// partition count — PartitionForKey of the name. It must never change: a
// group's state lives in that partition's log (TestCoordinatorPartitionStable
// pins it).
func CoordinatorPartition(group string, partitions int32) int32 {
	return engine.PartitionForKey([]byte(group), partitions)
}

// coordinators runs this node's replicas of the groups topic's
// partitions: an applier per replica (one goroutine for all) and the
// driver of the partitions this node leads. Run owns both goroutines.
type coordinators struct {
	c      *cluster
	signal chan struct{} // cap 1: a committed end of the groups topic moved

	mu    sync.Mutex // guards parts and skippedGone; a leaf (never held while calling out)
	parts map[int32]*coordPart
	// skippedGone counts the records skipped by appliers no longer in
	// parts (a replica replaced by a move): skipped adds them.
	skippedGone uint64
}

// skipped counts the records of the groups topic this node's appliers
// skipped since it started (they do not decode or validate).
func (g *coordinators) skipped() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.skippedGone
	for _, cp := range g.parts {
		n += cp.app.Skipped()
	}
	return n
}

// coordPart is this node's coordinator state of one partition of the
// groups topic, built from its log by the one applier (engine/internal/rsm;
// coordPart is its Machine).
type coordPart struct {
	num    int32
	log    *log.Partition // the log the state is built from
	app    *rsm.Applier[coord.Command, coord.Result]
	logger interface{ Info(string, ...any) }

	// propose is held shared by each proposal of this coordinator and
	// exclusively while a checkpoint is written, so that nothing this node
	// proposes lands between the state a checkpoint holds and its chunks.
	propose sync.RWMutex

	mu    sync.Mutex // guards the fields below; a leaf
	state *coord.State
	// sinceCheckpoint counts the commands applied since the newest valid
	// checkpoint (or the start of the log); checkpointAt is that
	// checkpoint's offset (-1: none applied here).
	sinceCheckpoint int
	checkpointAt    int64
	// next is the offset after the last command the state holds: the
	// applier's Applied, or behind it while the applier publishes a batch.
	next int64

	// Owned by the applier goroutine: the checkpoint chunks it follows,
	// and the offset the log may start at once a checkpoint is applied
	// (0: none new).
	run    coord.CheckpointRun
	retain int64

	// Owned by the driver goroutine: the term this node leads the
	// partition in (0: it does not) and since when; when a failed
	// checkpoint may be tried again.
	term      uint64
	since     time.Time
	nextCkTry time.Time
}

func newCoordinators(c *cluster) *coordinators {
	return &coordinators{c: c, signal: make(chan struct{}, 1), parts: map[int32]*coordPart{}}
}

// maxCoordResults is how many results each coordinator keeps for
// proposers waiting on them.
const maxCoordResults = 4096

// coordTick is how often the driver looks for due expirations (and the
// applier for commits it was not signalled about): every second with the
// default raft tick.
func (g *coordinators) coordTick() time.Duration {
	return max(g.c.cfg.TickInterval*10, 100*time.Millisecond)
}

// Run applies the groups topic's committed commands and drives the
// partitions this member leads (its replicas: host's) until ctx ends.
func (g *coordinators) Run(ctx context.Context, host *raft.Host) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned: awaited below
		defer wg.Done()
		g.runDriver(ctx)
	}()
	g.runApplier(ctx, host)
	wg.Wait()
	return nil
}

func (g *coordinators) runApplier(ctx context.Context, host *raft.Host) {
	tick := time.NewTicker(g.coordTick())
	defer tick.Stop()
	var unwatch func()
	defer func() {
		if unwatch != nil {
			unwatch()
		}
	}()
	for {
		if unwatch == nil { // the topic is known here once the controller placed it
			if cancel, err := g.c.Watch([]string{meta.GroupsTopic}, g.signal); err == nil {
				unwatch = cancel
			}
		}
		for _, part := range g.c.internalParts(meta.GroupsTopic) {
			if cp := g.partFor(part); cp != nil {
				g.apply(cp, part, host)
			}
		}
		select {
		case <-ctx.Done():
			g.stopAll(errors.New("engine: the node is stopping"))
			return
		case <-g.signal:
		case <-tick.C:
		}
	}
}

// internalParts returns the current partition values of a topic (nil when
// it is not known here).
func (n *Node) internalParts(name string) []*partition {
	n.tab.Mu.RLock()
	defer n.tab.Mu.RUnlock()
	if t, ok := n.tab.Topics[name]; ok {
		return slices.Clone(t.Parts)
	}
	return nil
}

// partFor returns the coordinator state of a partition this node holds a
// replica of, started anew (rebuilt from the log) when the partition's log
// changed (a replica move); nil when it holds none.
func (g *coordinators) partFor(part *partition) *coordPart {
	g.mu.Lock()
	defer g.mu.Unlock()
	cp := g.parts[part.Num]
	if cp != nil && cp.log == part.Log {
		return cp
	}
	if cp != nil {
		cp.stop(fmt.Errorf("%w: the replica of %s/%d on this node changed (a replica move)", errCoordUnavailable, meta.GroupsTopic, part.Num))
		delete(g.parts, part.Num)
		g.skippedGone += cp.app.Skipped()
	}
	if part.Log == nil {
		return nil
	}
	// The applier builds the state from the start of the log: from offset 0,
	// or from the checkpoint a compacted log starts with (restore).
	cp = &coordPart{num: part.Num, log: part.Log, state: coord.NewState(), checkpointAt: -1, logger: g.c.logger}
	cp.app = rsm.New(rsm.Config{Name: engine.PartitionName(meta.GroupsTopic, part.Num), MaxResults: maxCoordResults, Logger: g.c.logger}, part.Log, cp)
	g.parts[part.Num] = cp
	return cp
}

// lookup returns the running coordinator state of a partition value.
func (g *coordinators) lookup(part *partition) (*coordPart, error) {
	g.mu.Lock()
	cp := g.parts[part.Num]
	g.mu.Unlock()
	if cp == nil || part.Log == nil || cp.log != part.Log {
		return nil, fmt.Errorf("%w: node %d has no coordinator state of %s/%d (yet)", errCoordUnavailable, g.c.id.NodeID, meta.GroupsTopic, part.Num)
	}
	return cp, nil
}

func (g *coordinators) stopAll(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, cp := range g.parts {
		cp.stop(err)
	}
}

// stop ends the applier of cp and releases its waiters.
func (cp *coordPart) stop(err error) { cp.app.Stop(err) }

// apply applies the committed commands of part not applied yet, in log
// order (coordPart.Apply), then lets the log start at the newest
// checkpoint applied.
func (g *coordinators) apply(cp *coordPart, part *partition, host *raft.Host) {
	if err := cp.app.CatchUp(part.Committed.Load()); err != nil {
		return // the applier logged why it stopped
	}
	if cp.retain > 0 {
		if err := host.SetRetainFrom(part.X.raftGroup, cp.retain); err != nil {
			g.c.logger.Warn("spool groups: cannot let a coordinator's log start at its checkpoint", "partition", part.Num, "offset", cp.retain, "err", err)
		}
		cp.retain = 0
	}
}

// Decode reads one coordinator command and checks its values
// (Command.Validate, which depends on the bytes alone): a record that does
// not decode or validate is skipped and counted by every replica alike
// (rsm's Skipped). coord.State.Apply checks what depends on the state.
func (cp *coordPart) Decode(b []byte) (coord.Command, error) { return decodeCoordinatorCommand(b) }

// Apply applies commands in log order. Checkpoint chunks change nothing; a
// complete, valid checkpoint is checked against this replica's state and
// lets the log start there (retain, then SetRetainFrom); one that differs
// stops the applier (the state diverged: a restart rebuilds it from the
// newest checkpoint).
func (cp *coordPart) Apply(entries []rsm.Entry[coord.Command]) ([]coord.Result, int, error) {
	res := make([]coord.Result, 0, len(entries))
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for i, e := range entries {
		complete := cp.run.Add(e.Offset, e.Cmd)
		switch {
		case e.Cmd.Checkpoint == nil:
			res = append(res, cp.state.Apply(e.Cmd))
			cp.sinceCheckpoint++
		case complete:
			res = append(res, coord.Result{})
			if err := checkAgainst(cp.state, cp.run.Sum()); err != nil {
				cp.next = e.Offset + 1
				return res, i + 1, fmt.Errorf("%w: %s/%d: this replica's state differs from the checkpoint at offset %d (%w); restart the node: it rebuilds the state from the newest checkpoint", errCoordUnavailable, meta.GroupsTopic, cp.num, cp.run.Start(), err)
			}
			cp.sinceCheckpoint, cp.checkpointAt, cp.retain = 0, cp.run.Start(), cp.run.Start()
		default:
			res = append(res, coord.Result{})
		}
		cp.next = e.Offset + 1
	}
	return res, len(entries), nil
}

// checkAgainst checks that s encodes to the state a checkpoint's sum says.
func checkAgainst(s *coord.State, sum []byte) error {
	own, err := coord.Sum(s)
	if err != nil {
		return err
	}
	if !bytes.Equal(own, sum) {
		return fmt.Errorf("its state's SHA-256 is %x, the checkpoint's %x", own, sum)
	}
	return nil
}

// Restore rebuilds cp's state from the checkpoint its log starts with
// (at start, the log's first offset): every record from start on is the
// next chunk of it, the first one right after the offset it is as of. It
// returns the offset after the checkpoint, or -1 while its chunks are not
// all committed.
func (cp *coordPart) Restore(lg rsm.Log, start, end int64) (int64, error) {
	run := coord.CheckpointRun{Keep: true}
	var recs []log.Record
	for from := start; from < end; {
		var err error
		recs, err = lg.Read(from, 1<<20, end, recs[:0])
		if err == nil && len(recs) == 0 {
			err = errors.New("no records below the committed end")
		}
		if err != nil {
			return 0, fmt.Errorf("%w: cannot read %s/%d's checkpoint at offset %d: %w; restart the node once the log is repaired", errCoordUnavailable, meta.GroupsTopic, cp.num, from, err)
		}
		for _, r := range recs {
			cmd, err := coord.DecodeCommand(r.Value)
			k := cmd.Checkpoint
			if err == nil && (k == nil || k.Chunk != uint32(r.Offset-start) || k.AsOf != start-1) {
				err = errors.New("not the next chunk of a checkpoint of the state as of the offset before the log start")
			}
			if err != nil {
				return 0, fmt.Errorf("%w: %s/%d's log starts at offset %d, and its record at offset %d cannot be read as the checkpoint it must start with (%w); remove this replica so that it is re-created from its peers",
					errCoordUnavailable, meta.GroupsTopic, cp.num, start, r.Offset, err)
			}
			if !run.Add(r.Offset, cmd) {
				if k.Chunk+1 == k.Chunks {
					return 0, fmt.Errorf("%w: %s/%d's log starts with a checkpoint whose chunks do not match (offsets %d to %d); remove this replica so that it is re-created from its peers", errCoordUnavailable, meta.GroupsTopic, cp.num, start, r.Offset)
				}
				continue
			}
			st, err := run.State()
			if err != nil {
				return 0, fmt.Errorf("%w: %s/%d's checkpoint at offset %d: %w; remove this replica so that it is re-created from its peers", errCoordUnavailable, meta.GroupsTopic, cp.num, start, err)
			}
			cp.mu.Lock()
			cp.state, cp.sinceCheckpoint, cp.checkpointAt, cp.next = st, 0, start, r.Offset+1
			cp.mu.Unlock()
			cp.run = coord.CheckpointRun{}
			cp.logger.Info("spool groups: rebuilt a coordinator's state from its checkpoint", "partition", cp.num, "offset", start, "chunks", k.Chunks)
			return r.Offset + 1, nil
		}
		from = recs[len(recs)-1].Offset + 1
	}
	return -1, nil
}

// waitApplied waits until cp has applied the command at offset off and
// returns its result.
func (cp *coordPart) waitApplied(ctx context.Context, off int64) (coord.Result, error) {
	return cp.app.WaitApplied(ctx, off)
}

// awaitCaughtUp waits until this leader's state holds every command
// committed before it was called, anywhere: it has applied an entry of its
// own term (so every earlier leader's entries are committed), a quorum has
// confirmed that it still leads (raft ReadIndex: a leader cut off from
// its peers, which others may have replaced without it knowing yet, gets
// no answer), and its state is applied up to the commit index the quorum
// confirmed.
func (g *coordinators) awaitCaughtUp(ctx context.Context, part *partition, cp *coordPart) error {
	st, ok := g.c.status(part.X.raftGroup)
	if !ok || !st.IsLeader {
		return fmt.Errorf("%w: node %d does not lead %s/%d", errCoordUnavailable, g.c.id.NodeID, meta.GroupsTopic, part.Num)
	}
	if !leaderCaughtUp(part, st) {
		return fmt.Errorf("%w: node %d just became the leader of %s/%d and is applying its predecessors' entries", errCoordUnavailable, g.c.id.NodeID, meta.GroupsTopic, part.Num)
	}
	upTo, err := g.c.readIndex(ctx, part.X.raftGroup)
	if err != nil {
		return err
	}
	if err := cp.app.AwaitApplied(ctx, upTo); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: node %d has not applied %s/%d up to its committed end in time", errCoordUnavailable, g.c.id.NodeID, meta.GroupsTopic, part.Num)
		}
		return err
	}
	return nil
}

// propose stamps cmd with this leader's clock, proposes it, and
// returns its result once applied here. A command that breaks a value rule
// is refused (Result.Err) without taking a place in the log.
func (g *coordinators) propose(ctx context.Context, part *partition, cmd coord.Command) (coord.Result, error) {
	cp, err := g.lookup(part)
	if err != nil {
		return coord.Result{}, err
	}
	cp.propose.RLock()
	defer cp.propose.RUnlock()
	cmd.AtMs = wallclock.UnixMilli(time.Now())
	if err := cmd.Validate(); err != nil {
		return coord.Result{Err: err}, nil
	}
	b, err := coord.EncodeCommand(cmd)
	if err != nil {
		return coord.Result{Err: err}, nil
	}
	data := log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: b}}, cmd.AtMs)
	res, err := g.c.propose(ctx, part.X.raftGroup, data, engine.AcksAll)
	if err != nil {
		return coord.Result{}, err
	}
	return cp.waitApplied(ctx, res.Base)
}

// describeLocal returns one group as this leader holds it: a GroupsState
// holding that group alone (coord.DecodeState reads it back).
func (g *coordinators) describeLocal(ctx context.Context, part *partition, name string) (*clusterv1.GroupsState, error) {
	cp, err := g.lookup(part)
	if err != nil {
		return nil, err
	}
	if err := g.awaitCaughtUp(ctx, part, cp); err != nil {
		return nil, err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return groupProto(cp.state, name), nil
}

// groupProto encodes one group of s as a GroupsState of its own, through
// coord's query API.
func groupProto(s *coord.State, name string) *clusterv1.GroupsState {
	gen := s.Generation(name)
	out := &clusterv1.GroupsState{LastGeneration: gen}
	if !slices.Contains(s.Groups(), name) {
		return out
	}
	tp := func(t coord.TopicPartition) *clusterv1.GroupsPartition {
		return &clusterv1.GroupsPartition{Topic: t.Topic, Partition: t.Partition}
	}
	pg := &clusterv1.GroupsGroup{Name: name, Generation: gen}
	for _, m := range s.Members(name) {
		pm := &clusterv1.GroupsMember{MemberId: m.ID, Session: m.Session, NodeId: m.Node, Topics: m.Topics, LastHeartbeatMs: m.LastHeartbeatMs,
			SessionTimeoutMs: m.SessionTimeoutMs, RevokeTimeoutMs: m.RevokeTimeoutMs, Yield: m.Yield, Degraded: m.Degraded, Consumers: m.Consumers}
		for _, o := range m.Owned {
			pm.Owned = append(pm.Owned, &clusterv1.GroupsOwned{Partition: tp(o.TopicPartition), GrantedGeneration: o.GrantedGen,
				Revoking: o.Revoking, RevokeGeneration: o.RevokeGen, RevokeDeadlineMs: o.RevokeDeadlineMs})
		}
		pg.Members = append(pg.Members, pm)
	}
	for _, t := range s.Topics(name) {
		pt := &clusterv1.GroupsTopic{Name: t.Name, Partitions: t.Partitions}
		for _, r := range t.Replicas {
			pt.Replicas = append(pt.Replicas, &clusterv1.GroupsReplicas{NodeIds: r})
		}
		pg.Topics = append(pg.Topics, pt)
	}
	for _, ps := range s.LagInputs(name) {
		if ps.Committed {
			pg.Positions = append(pg.Positions, &clusterv1.GroupsCommitted{Partition: tp(ps.TopicPartition),
				Position: &clusterv1.GroupsPosition{Next: ps.Position.Next, Done: ps.Position.Done}})
		}
	}
	out.Groups = []*clusterv1.GroupsGroup{pg}
	return out
}

// runDriver proposes, on each partition this node leads, the expirations
// coord.Next says are due, every coordTick.
func (g *coordinators) runDriver(ctx context.Context) {
	tick := time.NewTicker(g.coordTick())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, part := range g.c.internalParts(meta.GroupsTopic) {
			g.drive(ctx, part, time.Now())
		}
	}
}

// drive proposes the due expirations of one partition this node leads. A
// new leader counts every member as heard from when it took over: members
// heartbeated to the old leader, and an expiry is proposed only once the
// member's session timeout has passed since (the grace period).
func (g *coordinators) drive(ctx context.Context, part *partition, now time.Time) {
	cp, err := g.lookup(part)
	if err != nil {
		return
	}
	st, ok := g.c.status(part.X.raftGroup)
	if !ok || !st.IsLeader {
		cp.term = 0
		return
	}
	if cp.term != st.Term {
		cp.term, cp.since = st.Term, now
		g.c.logger.Info("spool groups: coordinating the groups of a partition; no member is expired for one session timeout", "partition", part.Num, "term", st.Term)
	}
	if !leaderCaughtUp(part, st) {
		return
	}
	nowMs, sinceMs := now.UnixMilli(), cp.since.UnixMilli()
	if cp.app.Err() != nil {
		return
	}
	cp.mu.Lock()
	due, _ := coord.Next(cp.state, nowMs)
	checkpoint := cp.sinceCheckpoint >= g.c.cfg.GroupsCheckpointRecords
	due = slices.DeleteFunc(due, func(cmd coord.Command) bool {
		for _, m := range cp.state.Members(cmd.Group) {
			if m.ID == cmd.Expire.Member {
				return nowMs < sinceMs+m.SessionTimeoutMs // still in the grace period
			}
		}
		return true
	})
	cp.mu.Unlock()
	for _, cmd := range due {
		pctx, cancel := context.WithTimeout(ctx, g.c.cfg.ProduceTimeout)
		res, err := g.propose(pctx, part, cmd)
		cancel()
		switch {
		case err != nil:
			g.c.logger.Warn("spool groups: proposing an expiry failed; the next round tries again", "group", cmd.Group, "member", cmd.Expire.Member, "err", err)
		case res.Err == nil:
			g.c.logger.Info("spool groups: member expired", "group", cmd.Group, "member", cmd.Expire.Member, "reason", res.Expired.String(), "generation", res.Generation)
		}
	}
	if checkpoint && !now.Before(cp.nextCkTry) {
		pctx, cancel := context.WithTimeout(ctx, g.c.cfg.ProduceTimeout)
		err := g.checkpoint(pctx, part, cp)
		cancel()
		if err != nil {
			cp.nextCkTry = now.Add(checkpointRetry)
			g.c.logger.Warn("spool groups: writing a checkpoint of a coordinator's state failed; trying again later", "partition", part.Num, "retry_in", checkpointRetry, "err", err)
		}
	}
}

// checkpoint writes the whole state of a partition this node leads into
// its log (docs/groups.md, "Checkpoints"): with every other proposal of
// the coordinator held back, once the state holds every committed record,
// its chunks are proposed in order right after the last record it holds,
// in as few log batches as fit. It returns once this node has applied
// them; the applier then lets the log start at the first chunk.
func (g *coordinators) checkpoint(ctx context.Context, part *partition, cp *coordPart) error {
	cp.propose.Lock()
	defer cp.propose.Unlock()
	if err := g.awaitCaughtUp(ctx, part, cp); err != nil {
		return err
	}
	applied := cp.app.Applied()
	cp.mu.Lock()
	if cp.next > applied {
		cp.mu.Unlock() // the applier is publishing a batch: the state is ahead of applied
		return fmt.Errorf("%w: %s/%d is being applied; the checkpoint is tried again", errCoordUnavailable, meta.GroupsTopic, part.Num)
	}
	// The records between the state's last command and applied were
	// skipped (they changed nothing): the state is the state as of applied-1.
	asOf := applied - 1
	cmds, err := coord.CheckpointOf(cp.state, asOf)
	cp.mu.Unlock()
	if err != nil || asOf < 0 {
		return err
	}
	at := time.Now().UnixMilli()
	limit := g.c.conf.Log.MaxBatchBytes / 2 // room for the records' framing
	var recs []log.Record
	size, last, total := 0, int64(-1), 0
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		res, err := g.c.propose(ctx, part.X.raftGroup, log.EncodeRecords(nil, log.BatchHeader{}, recs, at), engine.AcksAll)
		if err != nil {
			return err
		}
		last = res.Base + int64(len(recs)) - 1
		recs, size = recs[:0], 0
		return nil
	}
	for _, cmd := range cmds {
		cmd.AtMs = at
		b, err := coord.EncodeCommand(cmd)
		if err != nil {
			return err
		}
		if size+len(b) > limit {
			if err := flush(); err != nil {
				return err
			}
		}
		recs = append(recs, log.Record{Value: b})
		size += len(b)
		total += len(b)
	}
	if err := flush(); err != nil {
		return err
	}
	if _, err := cp.waitApplied(ctx, last); err != nil {
		return err
	}
	g.c.logger.Info("spool groups: checkpoint of a coordinator's state written", "partition", part.Num, "as_of", asOf, "chunks", len(cmds), "bytes", total)
	return nil
}

// ensureGroupsTopic asks the controller to create the groups topic
// (idempotent, like a topic from the config) and waits until this node
// knows it. It is created on first use — the first Coordinate or
// DescribeGroup of the cluster — once the cluster has as many nodes as the
// replication factor, so a cluster whose sidecars keep their groups local
// runs no coordinator replicas. Its retention by age and size is off: the
// log starts at the newest checkpoint of the coordinators' state.
func (c *cluster) ensureGroupsTopic(ctx context.Context) error {
	c.mu.Lock()
	_, exists := c.state.Topic(meta.GroupsTopic)
	nodes := len(c.state.Nodes())
	c.mu.Unlock()
	if !exists {
		if nodes < int(c.cfg.ReplicationFactor) {
			return fmt.Errorf("%w: the consumer groups' topic %s is created once the cluster has %d nodes (cluster.replication_factor; it has %d): start more spoold with --join",
				engine.ErrNotPlaced, meta.GroupsTopic, c.cfg.ReplicationFactor, nodes)
		}
		spec := meta.TopicSpec{Name: meta.GroupsTopic, Partitions: c.cfg.GroupsPartitions, ReplicationFactor: c.cfg.ReplicationFactor}
		if _, err := c.proposeMeta(ctx, meta.Command{CreateTopic: &meta.CreateTopic{Spec: spec}}); err != nil {
			var tc *meta.TopicConflictError
			if !errors.As(err, &tc) { // created meanwhile by another node, with its settings: use it
				return fmt.Errorf("engine: creating the consumer groups' topic %s: %w", meta.GroupsTopic, err)
			}
		}
		c.logger.Info("spool groups: the consumer groups' topic exists", "topic", meta.GroupsTopic)
	}
	return c.role.awaitGroupsTopic(ctx)
}

// awaitGroupsTopic waits until this member has applied the creation of the
// groups topic.
func (c *member) awaitGroupsTopic(ctx context.Context) error {
	if err := c.awaitState(ctx, func(s *meta.State) bool { _, ok := s.Topic(meta.GroupsTopic); return ok }); err != nil {
		return fmt.Errorf("%w: the consumer groups' topic %s was created but this node has not seen it yet: %w", engine.ErrNotPlaced, meta.GroupsTopic, err)
	}
	return nil
}

// readIndex confirms with a quorum that this node still leads group and
// returns the data offset its state must be applied up to for a
// linearizable read (role.readIndex).
func (c *cluster) readIndex(ctx context.Context, group uint64) (int64, error) {
	type outcome struct {
		res raft.Proposed
		err error
	}
	ch := make(chan outcome, 1)
	c.role.readIndex(group, func(res raft.Proposed, err error) { ch <- outcome{res, err} })
	select {
	case o := <-ch:
		return o.res.Base, o.err
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: node %d: no quorum confirmed its leadership of raft group %d in time: %w", errCoordUnavailable, c.id.NodeID, group, ctx.Err())
	}
}
