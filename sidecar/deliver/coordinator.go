package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/engine"
)

// Coordinator is what a group needs from the cluster's group coordinator
// (docs/groups.md). The sidecar adapts the backend's (*embedded.Node's in a
// cluster, JetStream's, Kafka's) and adds Node and Replicas from its
// cluster status.
type Coordinator interface {
	Coordinate(ctx context.Context, cmd engine.GroupCommand) (engine.GroupResult, error)
	DescribeGroup(ctx context.Context, group string) (GroupView, error)
	// Node is this node's id in the cluster; false until it is known.
	Node() (uint64, bool)
	// Replicas lists, per partition of topic, the nodes holding a replica;
	// nil when this node does not know them all.
	Replicas(topic string) [][]uint64
}

// GroupView is a group as its coordinator holds it, what the driver reads
// every poll: *engine.GroupState (the embedded cluster's and JetStream's
// coordinator), or a Kafka group's view (engine/kafka).
type GroupView interface {
	Assignment(group, member string) (engine.GroupAssignmentOf, bool)
	Members(group string) []engine.GroupMember
	LagInputs(group string) []engine.GroupPartitionState
}

// Membership configures how a group takes part in its coordinator's
// group (GroupConfig.Coordinator set).
type Membership struct {
	// MemberPrefix names this sidecar among the group's members (its
	// stable node id); a member id is MemberPrefix/topic.
	MemberPrefix string
	// Session names this process (a new one per start).
	Session string
	// SessionTimeout: the member is expired when not heard from for this
	// long (default 10 s). It heartbeats every third of it.
	SessionTimeout time.Duration
	// RevokeTimeout: the member is expired when it has not handed a
	// revoked partition over for this long (default 15 s).
	RevokeTimeout time.Duration
	// RevokeDrain bounds how long a revoked partition's in-flight
	// deliveries are waited for before they are handed back (default:
	// two thirds of RevokeTimeout, leaving room to commit).
	RevokeDrain time.Duration
	// PollInterval is how often the assignment is read (default 500 ms):
	// how late a revocation or a grant may be noticed.
	PollInterval time.Duration
	// CommitInterval is how often changed positions are committed through
	// the coordinator (default 1 s): each partition's commit is one record
	// of the groups topic.
	CommitInterval time.Duration
	// DegradeAfter: a subscription whose breakers have held its deliveries
	// this long says its member is degraded, so the coordinator gives its
	// partitions to members that are not (default 2 min; member.go,
	// "Degradation").
	DegradeAfter time.Duration
}

// Defaults of Membership.
const (
	DefaultSessionTimeout        = engine.GroupDefaultSessionTimeoutMs * time.Millisecond
	DefaultRevokeTimeout         = engine.GroupDefaultRevokeTimeoutMs * time.Millisecond
	DefaultPollInterval          = 500 * time.Millisecond
	DefaultClusterCommitInterval = time.Second
	DefaultDegradeAfter          = 2 * time.Minute
	// coordCallTimeout bounds one call to the coordinator.
	coordCallTimeout = 5 * time.Second
	// countsOffFor: how long a member leaves its count of apps out of its
	// commands once the coordinator refused one carrying it.
	countsOffFor = time.Minute
)

func (c *Membership) validate(group string) error {
	if c.MemberPrefix == "" || c.Session == "" {
		return fmt.Errorf("deliver: group %q: a member of a cluster group needs a member prefix and a session", group)
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.RevokeTimeout == 0 {
		c.RevokeTimeout = DefaultRevokeTimeout
	}
	if c.DegradeAfter == 0 {
		c.DegradeAfter = DefaultDegradeAfter
	}
	if c.DegradeAfter < 0 {
		return fmt.Errorf("deliver: group %q: negative degrade-after %v", group, c.DegradeAfter)
	}
	if c.SessionTimeout < engine.GroupMinSessionTimeoutMs*time.Millisecond || c.SessionTimeout > engine.GroupMaxSessionTimeoutMs*time.Millisecond {
		return fmt.Errorf("deliver: group %q: session timeout %v must be between %v and %v", group, c.SessionTimeout,
			engine.GroupMinSessionTimeoutMs*time.Millisecond, engine.GroupMaxSessionTimeoutMs*time.Millisecond)
	}
	if c.RevokeTimeout < engine.GroupMinRevokeTimeoutMs*time.Millisecond || c.RevokeTimeout > engine.GroupMaxRevokeTimeoutMs*time.Millisecond {
		return fmt.Errorf("deliver: group %q: revoke timeout %v must be between %v and %v", group, c.RevokeTimeout,
			engine.GroupMinRevokeTimeoutMs*time.Millisecond, engine.GroupMaxRevokeTimeoutMs*time.Millisecond)
	}
	if c.RevokeDrain <= 0 || c.RevokeDrain >= c.RevokeTimeout {
		c.RevokeDrain = c.RevokeTimeout * 2 / 3
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = DefaultClusterCommitInterval
	}
	return nil
}

// memberOf is the member id of a subscription.
func (c *Membership) memberOf(topic string) string { return c.MemberPrefix + "/" + topic }

// membership is the group's driver toward the coordinator: it joins a
// member per subscription once the subscription has a consumer, heartbeats
// (one command per member every third of the session timeout, or at once
// when it starts or stops yielding), reads the group's assignment every
// PollInterval and hands it to the loop (results mailbox), and leaves
// when told to. It decides nothing about partitions: the machine does.
type membership struct {
	g    *Group
	co   Coordinator
	cfg  Membership
	log  *slog.Logger
	subs []*memberSub
	wake chan struct{} // capacity 1: a subscription's consumers changed
	// readOK: the last read of the group worked (the first failure of a run
	// is logged at warn). Owned by the run goroutine.
	readOK bool
	leave  chan struct{} // closed: leave and return
}

type memberSub struct {
	s         *sub
	id        string
	partitons int32
	connected atomic.Bool   // written by the loop (actConnected)
	degraded  atomic.Bool   // written by the loop (actConnected)
	consumers atomic.Uint32 // this sidecar's apps taking the topic; written by the loop (actConnected)
	joined    bool
	yielding  bool
	degrades  bool   // the degraded flag the coordinator last took
	reported  uint32 // the count of apps the coordinator last took
	// countsOffUntil: the coordinator refused a command carrying the
	// count and took it without (callCounted); the count is left out until
	// then.
	countsOffUntil time.Time
	// lastBeat is when the last Join or Heartbeat the coordinator took
	// was sent: the coordinator's session of the member counts from its
	// arrival, later, so a deadline counted from here ends first
	// (assignView.heardAt, fence.go).
	lastBeat time.Time
	stale    bool // another process took the member over: give up
}

func newMembership(g *Group) *membership {
	ms := &membership{g: g, co: g.cfg.Coordinator, cfg: g.cfg.Membership, log: g.log,
		wake: make(chan struct{}, 1), leave: make(chan struct{}), readOK: true}
	for _, s := range g.mc.subs {
		ms.subs = append(ms.subs, &memberSub{s: s, id: ms.cfg.memberOf(s.cfg.Topic), partitons: int32(len(s.parts))})
	}
	return ms
}

// consumersChanged is called by the loop (actConnected).
func (ms *membership) consumersChanged(mc *machine) {
	changed := false
	for _, x := range ms.subs {
		n := mc.consumersOf(x.s)
		if c := n > 0; x.connected.Swap(c) != c {
			changed = true
		}
		if x.consumers.Swap(uint32(n)) != uint32(n) {
			changed = true
		}
		if d := x.s.degraded; x.degraded.Swap(d) != d {
			changed = true
		}
	}
	if changed {
		select {
		case ms.wake <- struct{}{}:
		default:
		}
	}
}

// run keeps the members joined until leave is closed, then leaves; ctx
// bounds everything (the loop ends it after leaving, or at once if the
// group fails).
func (ms *membership) run(ctx context.Context) {
	t := time.NewTicker(ms.cfg.PollInterval)
	defer t.Stop()
	for {
		ms.round(ctx)
		select {
		case <-t.C:
		case <-ms.wake:
		case <-ms.leave:
			ms.leaveAll(ctx)
			return
		case <-ctx.Done():
			return
		}
	}
}

func (ms *membership) round(ctx context.Context) {
	now := time.Now()
	beatEvery := ms.cfg.SessionTimeout / 3
	for _, x := range ms.subs {
		if x.stale {
			continue
		}
		want := x.connected.Load()
		switch {
		case !x.joined && want:
			ms.join(ctx, x)
		case x.joined && (x.yielding == want || x.degrades != x.degraded.Load() || x.reported != ms.countOf(x, now) || !now.Before(x.lastBeat.Add(beatEvery))):
			ms.heartbeat(ctx, x, !want, x.degraded.Load())
		}
	}
	// Read even when no member is joined: lag and the admin API show the
	// group's committed positions on every sidecar.
	ms.poll(ctx)
}

func (ms *membership) join(ctx context.Context, x *memberSub) {
	node, ok := ms.co.Node()
	if !ok {
		return
	}
	topic := engine.GroupTopic{Name: x.s.cfg.Topic, Partitions: x.partitons, Replicas: ms.co.Replicas(x.s.cfg.Topic)}
	sentAt := time.Now()
	n, err := ms.callCounted(ctx, x, ms.countOf(x, sentAt), func(n uint32) engine.GroupCommand {
		return engine.GroupCommand{Join: &engine.GroupJoin{Member: x.id, Session: ms.cfg.Session, Node: node, Topics: []engine.GroupTopic{topic},
			SessionTimeoutMs: ms.cfg.SessionTimeout.Milliseconds(), RevokeTimeoutMs: ms.cfg.RevokeTimeout.Milliseconds(), Consumers: n}}
	})
	if err != nil {
		ms.log.Warn("joining the group's coordinator failed; retrying", "topic", x.s.cfg.Topic, "member", x.id, "err", err)
		return
	}
	x.joined, x.yielding, x.degrades, x.reported, x.lastBeat = true, false, false, n, sentAt
	ms.log.Info("joined the group", "topic", x.s.cfg.Topic, "member", x.id, "session", ms.cfg.Session)
}

func (ms *membership) heartbeat(ctx context.Context, x *memberSub, yield, degraded bool) {
	sentAt := time.Now()
	n := ms.countOf(x, sentAt)
	if yield {
		n = 0 // none connected (the count may lag the flag by a change)
	}
	n, err := ms.callCounted(ctx, x, n, func(n uint32) engine.GroupCommand {
		return engine.GroupCommand{Heartbeat: &engine.GroupHeartbeat{Member: x.id, Session: ms.cfg.Session, Yield: yield, Degraded: degraded, Consumers: n}}
	})
	switch {
	case err == nil:
		x.lastBeat, x.yielding, x.degrades, x.reported = sentAt, yield, degraded, n
	case errors.Is(err, engine.ErrGroupUnknownMember):
		ms.log.Warn("the group's coordinator no longer knows this member (expired): joining again", "member", x.id, "err", err)
		x.joined = false
	case errors.Is(err, engine.ErrGroupStaleSession):
		ms.log.Error("another spoold took this member over (same node id and subscription, newer process): this one stops consuming the subscription; give each sidecar its own node.id",
			"member", x.id, "err", err)
		x.stale, x.joined = true, false
	default:
		ms.log.Warn("heartbeat to the group's coordinator failed; retrying", "member", x.id, "err", err)
	}
}

// countOf is the count of apps the member's commands carry: none while
// its coordinator refuses counts (countsOffUntil).
func (ms *membership) countOf(x *memberSub, now time.Time) uint32 {
	if now.Before(x.countsOffUntil) {
		return 0
	}
	return x.consumers.Load()
}

// callCounted sends the Join or Heartbeat that cmd makes with the
// member's count of apps n, and says which count went through. A
// coordinator of an older release cannot read a command carrying a count
// (a field it does not know; during a rolling upgrade), and says so
// (engine.ErrGroupCommandUnreadable): the command is sent again at once
// without the count, and if that goes through, the member leaves the count
// out for countsOffFor. Any other failure (a coordinator briefly
// unavailable, a leader change) is retried as it is. The count is only
// reported, so leaving it out costs the describe's figure, never the
// member's partitions.
func (ms *membership) callCounted(ctx context.Context, x *memberSub, n uint32, cmd func(n uint32) engine.GroupCommand) (uint32, error) {
	_, err := ms.call(ctx, cmd(n))
	if n == 0 || !errors.Is(err, engine.ErrGroupCommandUnreadable) || ctx.Err() != nil {
		return n, err
	}
	if _, err0 := ms.call(ctx, cmd(0)); err0 != nil {
		return n, err
	}
	x.countsOffUntil = time.Now().Add(countsOffFor)
	ms.log.Warn("the group's coordinator refused a command carrying this member's count of apps, and took it without (a node of an older release, during an upgrade?): the count is left out for a while, and spool group describe counts none for this member meanwhile",
		"member", x.id, "err", err)
	return 0, nil
}

// poll reads the group once and hands every subscription's view to the loop.
func (ms *membership) poll(ctx context.Context) {
	c, cancel := context.WithTimeout(ctx, coordCallTimeout)
	st, err := ms.co.DescribeGroup(c, ms.g.cfg.Name)
	cancel()
	if err != nil {
		// Said once per outage at warn (a failing read means no grants and
		// no revocations are seen), then at debug on every retry.
		if ms.readOK {
			ms.log.Warn("reading the group's assignment from its coordinator failed; retrying every poll", "err", err)
		} else {
			ms.log.Debug("reading the group's assignment failed; retrying", "err", err)
		}
		ms.readOK = false
		return
	}
	if !ms.readOK {
		ms.log.Info("reading the group's assignment from its coordinator works")
	}
	ms.readOK = true
	for _, x := range ms.subs {
		v := &assignView{s: x.s, committed: map[int32]engine.Position{}, starts: map[int32]int64{}}
		_, v.sharedGens = st.(*engine.GroupState)
		for _, ps := range st.LagInputs(ms.g.cfg.Name) {
			if ps.Topic == x.s.cfg.Topic && ps.Committed {
				v.committed[ps.Partition] = engine.Position{Next: ps.Position.Next, Done: ps.Position.Done}
			}
		}
		for _, mb := range st.Members(ms.g.cfg.Name) {
			if !mb.Yield && slices.Contains(mb.Topics, x.s.cfg.Topic) {
				v.members++
				v.consumers += int(mb.Consumers)
			}
		}
		a, ok := st.Assignment(ms.g.cfg.Name, x.id)
		if x.joined && ok {
			v.member, v.generation, v.heardAt = true, a.Generation, x.lastBeat
			for _, tp := range a.Owned {
				if tp.Topic == x.s.cfg.Topic {
					v.owned = append(v.owned, tp.Partition)
				}
			}
			for _, tp := range a.Revoking {
				if tp.Topic == x.s.cfg.Topic {
					v.revoking = append(v.revoking, tp.Partition)
				}
			}
			for _, p := range v.owned {
				if start, _, err := ms.g.eng.Offsets(x.s.cfg.Topic, p); err == nil {
					v.starts[p] = start
				}
			}
		} else if x.joined && !ok {
			x.joined = false // expired: join again next round
		}
		ms.g.results.put(result{assign: v})
	}
}

// leaveAll leaves every joined member (the loop has committed).
func (ms *membership) leaveAll(ctx context.Context) {
	for _, x := range ms.subs {
		if !x.joined {
			continue
		}
		if _, err := ms.call(ctx, engine.GroupCommand{Leave: &engine.GroupLeave{Member: x.id, Session: ms.cfg.Session}}); err != nil &&
			!errors.Is(err, engine.ErrGroupUnknownMember) {
			ms.log.Warn("leaving the group failed: its partitions move when the session times out", "member", x.id, "err", err)
			continue
		}
		x.joined = false
		ms.log.Info("left the group", "topic", x.s.cfg.Topic, "member", x.id)
	}
}

func (ms *membership) call(ctx context.Context, cmd engine.GroupCommand) (engine.GroupResult, error) {
	cmd.Group = ms.g.cfg.Name
	c, cancel := context.WithTimeout(ctx, coordCallTimeout)
	defer cancel()
	return ms.co.Coordinate(c, cmd)
}

// commitCluster commits a job's positions through the coordinator, one
// command per partition, then says RevokeDone for each of its handovers
// whose commit went through.
func (g *Group) commitCluster(ctx context.Context, j *commitJob) {
	co, cfg := g.cfg.Coordinator, &g.cfg.Membership
	member := cfg.memberOf(j.s.cfg.Topic)
	j.errs = map[int32]error{}
	for num, pos := range j.pos {
		done := pos.Done
		if len(done) > engine.GroupMaxDonePerPosition {
			done = done[:engine.GroupMaxDonePerPosition] // the rest are redelivered after a move (and deduplicated by the ledger)
		}
		c, cancel := context.WithTimeout(ctx, coordCallTimeout)
		_, err := co.Coordinate(c, engine.GroupCommand{Group: g.cfg.Name, Commit: &engine.GroupCommit{Member: member, Generation: j.gens[num],
			TopicPartition: engine.GroupTopicPartition{Topic: j.s.cfg.Topic, Partition: num}, Position: engine.GroupPosition{Next: pos.Next, Done: slices.Clone(done)}}})
		cancel()
		j.errs[num] = err
	}
	for _, h := range j.handovers {
		if err := j.errs[h.p.num]; err != nil {
			h.err = err // not committed: no RevokeDone
			continue
		}
		c, cancel := context.WithTimeout(ctx, coordCallTimeout)
		_, h.err = co.Coordinate(c, engine.GroupCommand{Group: g.cfg.Name, RevokeDone: &engine.GroupRevokeDone{Member: member, Generation: h.gen,
			Partitions: []engine.GroupTopicPartition{{Topic: j.s.cfg.Topic, Partition: h.p.num}}}})
		cancel()
	}
}
