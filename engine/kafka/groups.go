package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool/engine"
)

// Consumer groups across sidecars (docs/backends.md, "Groups across
// sidecars").
//
// A Spool group is the Kafka consumer group <prefix><group>, and each
// member of it (one sidecar's subscription) is one member of the Kafka
// group: a franz-go group client subscribed to the topic with the
// cooperative-sticky balancer, whose topic is paused so that it never
// fetches (Spool reads by offset itself). Kafka decides who owns which
// partition and keeps the sessions: kafka-consumer-groups --describe shows
// the sidecars as the group's members, and a member that stops
// heartbeating loses its partitions after its session timeout.
//
// The sidecar's delivery driver speaks the coordinator's commands
// (engine/groups/coord). They translate:
//
//   - Join starts the member's group client; Leave leaves the Kafka group
//     (the sidecar has drained and committed first).
//   - Heartbeat is Kafka's business (the client heartbeats itself); a
//     Heartbeat with Yield (no app connected) revokes every partition of
//     the member itself, waits until each is handed over or the revoke
//     timeout passes, then leaves the Kafka group, so the others take
//     them; without Yield again, the member joins again.
//   - Commit is an OffsetCommit with the member's Kafka member id and
//     generation: refused (ErrGroupFenced) when the member no longer owns
//     the partition here, or when Kafka says the member or generation is
//     stale. Positions are encoded as LoadPositions reads them.
//   - RevokeDone releases partitions being revoked.
//   - ResetPositions commits without a generation, which Kafka takes only
//     while the group has no member (ErrGroupActive otherwise).
//
// DescribeGroup is the view the driver polls: per member of this process
// its own generation counter (grown at every change of what it owns), the
// partitions Kafka assigned it and those being revoked; the group's
// committed positions (read after the assignment, so a partition just
// granted shows the position its previous owner committed before
// releasing it); and the Kafka group's members.
//
// Revocation. Kafka (cooperative rebalancing) takes a partition from a
// member by calling its OnPartitionsRevoked; the callback marks the
// partitions revoking and waits until the sidecar has said RevokeDone for
// each (its in-flight deliveries finished or handed back, its position
// committed), or until the member's revoke timeout passes, and only then
// returns; franz-go then rejoins and Kafka grants the partitions to their
// new owners. Partitions lost (the session ended, OnPartitionsLost) are
// dropped at once; what the member still commits is refused by Kafka.

// groupMembers are the members of this process in Kafka groups.
type groupMembers struct {
	mu sync.Mutex // guards m; before member.mu
	m  map[memberKey]*member
}

type memberKey struct{ group, member string }

// member is one member of a Kafka group (one subscription of a sidecar).
type member struct {
	b       *Backend
	group   string // Spool's
	id      string // Spool's member id
	kgroup  string
	topics  map[string]string // Kafka topic → Spool topic
	session time.Duration     // Kafka session timeout
	revoke  time.Duration     // revoke timeout

	mu       sync.Mutex // guards what follows; a leaf
	cl       *kgo.Client
	old      []*kgo.Client // left the Kafka group, to close
	gen      uint64
	owned    map[engine.GroupTopicPartition]*ownedPart
	yield    bool      // told to yield: owns nothing, takes nothing
	degraded bool      // told it is degraded (logged; Kafka's assignment ignores it)
	apps     uint32    // the sidecar's apps taking the subscription (Join, Heartbeat): GroupMember.Consumers
	draining bool      // yielding: revoking everything, then leaving the Kafka group
	drainBy  time.Time // when the drain gives up waiting
	// losses counts the times it lost partitions; reported, those a read
	// has said (by leaving the member out) so far.
	losses, reported uint64
}

// ownedPart is one partition a member owns.
type ownedPart struct {
	revoking bool
	released chan struct{} // closed when it is let go (RevokeDone or a drop); set while revoking
}

// Coordinate applies one of the coordinator's commands to this process's
// members of the Kafka group (see above). A refusal is returned as
// Result.Err and as the error.
func (b *Backend) Coordinate(ctx context.Context, cmd engine.GroupCommand) (engine.GroupResult, error) {
	var err error
	switch {
	case cmd.Join != nil:
		err = b.join(cmd.Group, cmd.Join)
	case cmd.Heartbeat != nil:
		err = b.heartbeat(cmd.Group, cmd.Heartbeat)
	case cmd.Leave != nil:
		err = b.leave(ctx, cmd.Group, cmd.Leave.Member)
	case cmd.RevokeDone != nil:
		err = b.revokeDone(cmd.Group, cmd.RevokeDone)
	case cmd.Commit != nil:
		err = b.commit(ctx, cmd.Group, cmd.Commit)
	case cmd.Reset != nil:
		err = b.reset(cmd.Group, cmd.Reset)
	case cmd.DropTopic != nil:
		// Kafka drops the groups' committed offsets with the topic.
	default:
		err = fmt.Errorf("kafka: group %q: command not supported on Kafka (Kafka's group coordinator expires members itself)", cmd.Group)
	}
	return engine.GroupResult{Err: err}, err
}

func (b *Backend) member(group, id string) (*member, error) {
	b.groups.mu.Lock()
	defer b.groups.mu.Unlock()
	m, ok := b.groups.m[memberKey{group, id}]
	if !ok {
		return nil, fmt.Errorf("%w %q of group %q: join first", engine.ErrGroupUnknownMember, id, group)
	}
	return m, nil
}

func (b *Backend) join(group string, j *engine.GroupJoin) error {
	b.groups.mu.Lock()
	defer b.groups.mu.Unlock()
	if b.ctx.Err() != nil {
		return engine.ErrClosed
	}
	key := memberKey{group, j.Member}
	if m, ok := b.groups.m[key]; ok {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.yield, m.apps = false, j.Consumers
		if m.cl == nil {
			return m.start()
		}
		return nil
	}
	kgroup, _ := b.kafkaGroup(group, "")
	m := &member{b: b, group: group, id: j.Member, kgroup: kgroup, topics: map[string]string{}, owned: map[engine.GroupTopicPartition]*ownedPart{},
		session: time.Duration(cmp.Or(j.SessionTimeoutMs, engine.GroupDefaultSessionTimeoutMs)) * time.Millisecond,
		revoke:  time.Duration(cmp.Or(j.RevokeTimeoutMs, engine.GroupDefaultRevokeTimeoutMs)) * time.Millisecond, apps: j.Consumers}
	for _, t := range j.Topics {
		m.topics[b.cfg.Prefix+t.Name] = t.Name
	}
	if len(m.topics) == 0 {
		return fmt.Errorf("kafka: group %q: member %q joins with no topic", group, j.Member)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.start(); err != nil {
		return err
	}
	if b.groups.m == nil {
		b.groups.m = map[memberKey]*member{}
	}
	b.groups.m[key] = m
	return nil
}

// start makes the member's group client: it joins the Kafka group in the
// background. m.mu held.
func (m *member) start() error {
	ktopics := slices.Sorted(maps.Keys(m.topics))
	opts := append(m.b.cfg.connOpts(),
		kgo.ConsumerGroup(m.kgroup),
		kgo.ConsumeTopics(ktopics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(m.session),
		// A member learns of a rebalance from a heartbeat's answer.
		kgo.HeartbeatInterval(max(m.session/10, 100*time.Millisecond)),
		// A member revoking partitions rejoins once they are handed over.
		kgo.RebalanceTimeout(m.revoke+m.session),
	)
	opts = append(opts,
		kgo.OnPartitionsAssigned(func(_ context.Context, c *kgo.Client, a map[string][]int32) { m.assigned(c, a) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, c *kgo.Client, r map[string][]int32) { m.revoked(ctx, c, r) }),
		kgo.OnPartitionsLost(func(_ context.Context, c *kgo.Client, l map[string][]int32) { m.lost(c, l) }),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: group %q: member %q: %w", m.group, m.id, err)
	}
	cl.PauseFetchTopics(ktopics...) // Spool reads by offset; the client only keeps the membership
	m.cl, m.draining = cl, false
	m.b.cfg.Logger.Info("kafka: joining the consumer group", "group", m.kgroup, "member", m.id, "topics", ktopics)
	return nil
}

// tps are the partitions of a callback's map that are the member's topics.
func (m *member) tps(parts map[string][]int32) []engine.GroupTopicPartition {
	var out []engine.GroupTopicPartition
	for kt, ps := range parts {
		t, ok := m.topics[kt]
		if !ok {
			continue
		}
		for _, p := range ps {
			out = append(out, engine.GroupTopicPartition{Topic: t, Partition: p})
		}
	}
	return out
}

// assigned: Kafka granted partitions (cooperative: only the new ones).
func (m *member) assigned(cl *kgo.Client, a map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cl != m.cl {
		return // a client that left
	}
	tps := m.tps(a)
	for _, tp := range tps {
		if _, ok := m.owned[tp]; ok {
			continue
		}
		op := &ownedPart{}
		if m.draining {
			op.revoking, op.released = true, make(chan struct{})
		}
		m.owned[tp] = op
	}
	if len(tps) > 0 {
		m.gen++
		m.b.cfg.Logger.Info("kafka: partitions assigned", "group", m.kgroup, "member", m.id, "partitions", tps)
	}
}

// revoked: Kafka takes partitions away. It marks them revoking and waits,
// at most the revoke timeout, until the sidecar has let each go
// (RevokeDone); then it drops what is left and returns, and Kafka may
// grant them to another member.
func (m *member) revoked(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
	tps := m.tps(r)
	if len(tps) == 0 {
		return // franz-go calls it at the end of every session
	}
	m.mu.Lock()
	if cl != m.cl {
		m.mu.Unlock()
		return // a client that left: its partitions were let go before it left
	}
	var wait []chan struct{}
	for _, tp := range tps {
		op, ok := m.owned[tp]
		if !ok {
			continue
		}
		if !op.revoking {
			op.revoking, op.released = true, make(chan struct{})
		}
		wait = append(wait, op.released)
	}
	m.gen++
	m.mu.Unlock()
	m.b.cfg.Logger.Info("kafka: partitions revoked: waiting until they are handed over", "group", m.kgroup, "member", m.id, "partitions", tps, "bound", m.revoke)

	bound := time.NewTimer(m.revoke)
	defer bound.Stop()
	timedOut := false
	for _, c := range wait {
		select {
		case <-c:
		case <-bound.C:
			timedOut = true
		case <-ctx.Done():
			timedOut = true
		}
		if timedOut {
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var left []engine.GroupTopicPartition
	for _, tp := range tps {
		if _, ok := m.owned[tp]; ok {
			left = append(left, tp)
		}
	}
	m.drop(left)
	if len(left) > 0 {
		m.b.cfg.Logger.Warn("kafka: revoked partitions not handed over within the revoke timeout: releasing them (the ledger fences what is still in flight)",
			"group", m.kgroup, "member", m.id, "partitions", left, "revoke_timeout", m.revoke)
	}
	m.maybeLeave()
}

// lost: the member's session ended; its partitions may already be
// another's. They are dropped at once.
func (m *member) lost(cl *kgo.Client, l map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cl != m.cl {
		return
	}
	tps := m.tps(l)
	m.drop(tps)
	if len(tps) > 0 {
		// The next read says the member is unknown, as the coordinator
		// does after an expiry: the sidecar stops every partition at
		// once, forgetting what was in flight, and joins again; a
		// partition Kafka grants it again starts from the committed
		// position, even when the loss and the grant fall between two
		// reads.
		m.losses++
		m.b.cfg.Logger.Warn("kafka: partitions lost (the member's Kafka session ended): stopped at once", "group", m.kgroup, "member", m.id, "partitions", tps)
	}
	m.maybeLeave()
}

// drop lets partitions go. m.mu held.
func (m *member) drop(tps []engine.GroupTopicPartition) {
	for _, tp := range tps {
		op, ok := m.owned[tp]
		if !ok {
			continue
		}
		if op.released != nil {
			close(op.released)
		}
		delete(m.owned, tp)
		m.gen++
	}
}

// maybeLeave leaves the Kafka group once a yielding member has let every
// partition go (or its drain bound passed), and joins again at once if it
// no longer yields. m.mu held.
func (m *member) maybeLeave() {
	if !m.draining || m.cl == nil {
		return
	}
	if len(m.owned) > 0 && time.Now().Before(m.drainBy) {
		return
	}
	m.drop(slices.Collect(maps.Keys(m.owned)))
	// A nil context only starts the leave (franz-go's documented way to
	// leave from a callback without waiting for it); Close waits for it.
	// A canceled context instead would not send the LeaveGroup at all.
	//lint:ignore SA1012 nil is franz-go's "start the leave, do not wait"
	_ = m.cl.LeaveGroupContext(nil)
	m.old = append(m.old, m.cl)
	m.cl, m.draining = nil, false
	m.b.cfg.Logger.Info("kafka: left the consumer group (no app connected)", "group", m.kgroup, "member", m.id)
	if !m.yield {
		if err := m.start(); err != nil {
			m.b.cfg.Logger.Error("kafka: joining the consumer group again failed", "group", m.kgroup, "member", m.id, "err", err)
		}
	}
}

func (b *Backend) heartbeat(group string, h *engine.GroupHeartbeat) error {
	m, err := b.member(group, h.Member)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.apps = h.Consumers
	if h.Degraded != m.degraded {
		m.degraded = h.Degraded
		if h.Degraded {
			m.b.cfg.Logger.Warn("kafka: the member is degraded (its breakers have held deliveries), but Kafka's assignment has no such notion: it keeps its partitions",
				"group", m.kgroup, "member", m.id)
		}
	}
	switch {
	case h.Yield && !m.yield:
		m.yield = true
		if m.cl != nil && !m.draining {
			m.draining, m.drainBy = true, time.Now().Add(m.revoke)
			for _, op := range m.owned {
				if !op.revoking {
					op.revoking, op.released = true, make(chan struct{})
				}
			}
			m.gen++
			m.b.cfg.Logger.Info("kafka: no app connected: handing the member's partitions over, then leaving the consumer group", "group", m.kgroup, "member", m.id, "partitions", len(m.owned))
		}
	case !h.Yield:
		m.yield = false
		if m.cl == nil {
			return m.start() // an earlier start failed, or it left while yielding
		}
		// While still draining, it joins again once it has left.
	}
	m.maybeLeave()
	return nil
}

// leave leaves the Kafka group for good (the sidecar drained and committed).
func (b *Backend) leave(ctx context.Context, group, id string) error {
	b.groups.mu.Lock()
	m, ok := b.groups.m[memberKey{group, id}]
	delete(b.groups.m, memberKey{group, id})
	b.groups.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w %q of group %q", engine.ErrGroupUnknownMember, id, group)
	}
	return m.close(ctx)
}

// close leaves the Kafka group and closes the member's clients.
func (m *member) close(ctx context.Context) error {
	m.mu.Lock()
	cl, old := m.cl, m.old
	m.drop(slices.Collect(maps.Keys(m.owned)))
	m.cl, m.old, m.draining = nil, nil, false
	m.mu.Unlock()
	var err error
	if cl != nil {
		err = cl.LeaveGroupContext(ctx)
		cl.Close()
	}
	for _, c := range old {
		c.Close()
	}
	if err != nil {
		return fmt.Errorf("kafka: group %q: member %q leaving: %w (Kafka moves its partitions after its session timeout)", m.kgroup, m.id, err)
	}
	return nil
}

// closeGroups closes every member (Backend.Close).
func (b *Backend) closeGroups() {
	b.groups.mu.Lock()
	ms := slices.Collect(maps.Values(b.groups.m))
	b.groups.m = nil
	b.groups.mu.Unlock()
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		_ = m.close(ctx)
		cancel()
	}
}

func (b *Backend) revokeDone(group string, d *engine.GroupRevokeDone) error {
	m, err := b.member(group, d.Member)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, tp := range d.Partitions {
		if op, ok := m.owned[tp]; !ok || !op.revoking {
			return fmt.Errorf("%w: %s/%d is not being revoked from member %q of group %q", engine.ErrGroupNotRevoking, tp.Topic, tp.Partition, d.Member, group)
		}
	}
	m.drop(d.Partitions)
	m.maybeLeave()
	return nil
}

// commit commits a position of a partition the member owns, as the Kafka
// group member it is (its member id and generation).
func (b *Backend) commit(ctx context.Context, group string, c *engine.GroupCommit) error {
	m, err := b.member(group, c.Member)
	if err != nil {
		return err
	}
	m.mu.Lock()
	_, owned := m.owned[c.TopicPartition]
	cl := m.cl
	m.mu.Unlock()
	if !owned || cl == nil {
		return fmt.Errorf("%w: member %q of group %q no longer owns %s/%d", engine.ErrGroupFenced, c.Member, group, c.Topic, c.Partition)
	}
	meta, dropped := encodeDone(c.Position.Next, c.Position.Done, b.cfg.MetadataMaxBytes)
	if dropped > 0 && b.cfg.Hooks.PositionsTruncated != nil {
		b.cfg.Hooks.PositionsTruncated(group, c.Topic, c.Partition, dropped)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	fenced := func(err error) error {
		return fmt.Errorf("%w: Kafka refused the commit of %s/%d by member %q of group %q: %w (the partition moved to another member)", engine.ErrGroupFenced, c.Topic, c.Partition, c.Member, m.kgroup, err)
	}
	for {
		memberID, gen := cl.GroupMetadata()
		err = retryCoordinator(ctx, func() error { return b.offsetCommit(ctx, cl, m.kgroup, memberID, gen, c, meta) })
		switch {
		case err == nil:
			return nil
		case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.FencedInstanceID), errors.Is(err, kerr.StaleMemberEpoch):
			return fenced(err) // the session ended: the partition may be another's already
		case !errors.Is(err, kerr.IllegalGeneration) && !errors.Is(err, kerr.RebalanceInProgress):
			return fmt.Errorf("kafka: commit of %s/%d by member %q of group %q: %w", c.Topic, c.Partition, c.Member, m.kgroup, err)
		}
		// The group is rebalancing. A cooperative rebalance leaves the
		// member the partitions it is not asked to revoke, and one it
		// is asked for stays its own until it lets it go: while the
		// member (the same Kafka member) still owns the partition here,
		// commit again with the generation it gets.
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: commit of %s/%d by member %q of group %q: the group is still rebalancing: %w", c.Topic, c.Partition, c.Member, m.kgroup, err)
		case <-time.After(50 * time.Millisecond): // a rebalance's join and sync take about this
		}
		m.mu.Lock()
		_, owned := m.owned[c.TopicPartition]
		same := m.cl == cl
		m.mu.Unlock()
		if id, _ := cl.GroupMetadata(); !owned || !same || id != memberID {
			return fenced(err)
		}
	}
}

// offsetCommit commits one position as the Kafka member memberID in
// generation gen.
func (b *Backend) offsetCommit(ctx context.Context, cl *kgo.Client, kgroup, memberID string, gen int32, c *engine.GroupCommit, meta string) error {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = kgroup, memberID, gen
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = b.cfg.Prefix + c.Topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = c.Partition, c.Position.Next, -1, &meta
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
		}
	}
	return nil
}

// reset commits positions without a generation: Kafka takes it only while
// the group has no member.
func (b *Backend) reset(group string, r *engine.GroupReset) error {
	pos := map[int32]engine.Position{}
	for _, pn := range r.Next {
		pos[pn.Partition] = engine.Position{Next: pn.Next}
	}
	err := b.CommitPositions(group, r.Topic, pos)
	if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
		return fmt.Errorf("%w: the Kafka group %q has members: stop the group's apps on every sidecar first (%w)", engine.ErrGroupActive, b.cfg.Prefix+group, err)
	}
	return err
}

// GroupView is a Kafka group as the sidecar's delivery driver reads it:
// this process's members' assignments, the group's committed positions and
// its Kafka members. It answers what *engine.GroupState answers.
type GroupView struct {
	group     string
	assigns   map[string]engine.GroupAssignmentOf
	members   []engine.GroupMember
	positions []engine.GroupPartitionState
}

// Assignment is a member's assignment; false when the member is not one
// of this process's (it must Join).
func (v *GroupView) Assignment(group, member string) (engine.GroupAssignmentOf, bool) {
	if group != v.group {
		return engine.GroupAssignmentOf{}, false
	}
	a, ok := v.assigns[member]
	return a, ok
}

// Members are the Kafka group's members (Kafka's member ids), with the
// topics they subscribe to and their apps: this process's members' count
// as the sidecar said it, 1 for the others (in the Kafka group only while
// an app is connected to their sidecar; Kafka does not carry the count).
func (v *GroupView) Members(group string) []engine.GroupMember {
	if group != v.group {
		return nil
	}
	return v.members
}

// LagInputs are the group's committed positions (owners are not filled).
func (v *GroupView) LagInputs(group string) []engine.GroupPartitionState {
	if group != v.group {
		return nil
	}
	return v.positions
}

// DescribeGroup reads the group: the assignments first, then the
// committed positions and the Kafka group's members.
func (b *Backend) DescribeGroup(ctx context.Context, group string) (*GroupView, error) {
	v := &GroupView{group: group, assigns: map[string]engine.GroupAssignmentOf{}}
	b.groups.mu.Lock()
	var ms []*member
	for k, m := range b.groups.m {
		if k.group == group {
			ms = append(ms, m)
		}
	}
	b.groups.mu.Unlock()
	lossesOf := map[*member]uint64{}
	apps := map[string]uint32{} // Kafka member id → apps, of this process's members
	for _, m := range ms {
		m.mu.Lock()
		if m.cl != nil {
			if id, _ := m.cl.GroupMetadata(); id != "" {
				apps[id] = m.apps
			}
		}
		m.maybeLeave() // a drain past its bound
		if m.losses != m.reported {
			lossesOf[m] = m.losses
			m.mu.Unlock()
			continue
		}
		a := engine.GroupAssignmentOf{Generation: m.gen}
		for tp, op := range m.owned {
			a.Owned = append(a.Owned, tp)
			if op.revoking {
				a.Revoking = append(a.Revoking, tp)
			}
		}
		m.mu.Unlock()
		slices.SortFunc(a.Owned, compareTP)
		slices.SortFunc(a.Revoking, compareTP)
		v.assigns[m.id] = a
	}
	kgroup, _ := b.kafkaGroup(group, "")
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var offs kadm.OffsetResponses
	err := retryCoordinator(ctx, func() (err error) {
		offs, err = b.admin.FetchOffsets(ctx, kgroup)
		if err == nil {
			err = offs.Error()
		}
		return err
	})
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("kafka: group %q (Kafka group %q): committed offsets: %w", group, kgroup, err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		t, ok := strings.CutPrefix(o.Topic, b.cfg.Prefix)
		if !ok || o.At < 0 {
			return
		}
		done, _ := decodeDone(o.At, o.Metadata)
		v.positions = append(v.positions, engine.GroupPartitionState{TopicPartition: engine.GroupTopicPartition{Topic: t, Partition: o.Partition},
			Position: engine.GroupPosition{Next: o.At, Done: done}, Committed: true})
	})
	slices.SortFunc(v.positions, func(a, b engine.GroupPartitionState) int { return compareTP(a.TopicPartition, b.TopicPartition) })
	described, err := b.admin.DescribeGroups(ctx, kgroup)
	if err != nil {
		return nil, fmt.Errorf("kafka: group %q (Kafka group %q): members: %w", group, kgroup, err)
	}
	for _, d := range described {
		for _, dm := range d.Members {
			// A member of another process is in the Kafka group only while
			// an app is connected to its sidecar (it leaves when it yields),
			// or it is a plain Kafka consumer: one app at least, and Kafka
			// knows no more.
			gm := engine.GroupMember{ID: dm.MemberID, Consumers: 1}
			if n, ok := apps[dm.MemberID]; ok {
				gm.Consumers = n
			}
			if c, ok := dm.Join.AsConsumer(); ok {
				for _, kt := range c.Topics {
					if t, ok := strings.CutPrefix(kt, b.cfg.Prefix); ok {
						gm.Topics = append(gm.Topics, t)
					}
				}
			}
			v.members = append(v.members, gm)
		}
	}
	for m, n := range lossesOf { // this view says so: the next one shows the member again
		m.mu.Lock()
		m.reported = max(m.reported, n)
		m.mu.Unlock()
	}
	return v, nil
}

func compareTP(a, b engine.GroupTopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition - b.Partition)
}
