package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/meta"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// Every refusal the coordinator can answer with has a reason on the wire,
// so that errors.Is matches it across a forward.
func TestRefusalsOnTheWire(t *testing.T) {
	for v, name := range clusterv1.GroupsRefusal_name {
		if v == 0 {
			continue
		}
		if !slices.ContainsFunc(refusals, func(r struct {
			err    error
			reason clusterv1.GroupsRefusal
		}) bool {
			return r.reason == clusterv1.GroupsRefusal(v)
		}) {
			t.Errorf("%s has no sentinel in refusals", name)
		}
	}
	for _, r := range refusals {
		if got := refusalToProto(fmt.Errorf("wrapped: %w", r.err)); got != r.reason {
			t.Errorf("%v: reason %v, want %v", r.err, got, r.reason)
		}
	}
}

// Only a command the coordinator's node could not read (INVALID: a node of
// another release) is ErrGroupCommandUnreadable, on which a member sends
// its command again without the fields an older release does not know; a
// proposal that failed otherwise (FAILED) is not.
func TestCoordinateErrorUnreadableOnlyForInvalid(t *testing.T) {
	part := &partition{}
	for code := range clusterv1.CoordinateError_name {
		err := coordinateError(2, part, clusterv1.CoordinateError(code), 0, "msg")
		want := clusterv1.CoordinateError(code) == clusterv1.CoordinateError_COORDINATE_ERROR_INVALID
		if got := errors.Is(err, engine.ErrGroupCommandUnreadable); got != want {
			t.Errorf("%v: unreadable %v, want %v (err %v)", clusterv1.CoordinateError(code), got, want, err)
		}
	}
}

// The group → coordinator partition mapping never changes: a group's state
// lives in that partition's log.
func TestCoordinatorPartitionStable(t *testing.T) {
	for _, g := range []struct {
		group string
		n     int32
		want  int32
	}{
		{"billing", 8, 4}, {"orders-app", 8, 6}, {"a", 8, 4}, {"payments.v2", 8, 0},
		{"g-0", 8, 3}, {"g-1", 8, 0}, {"g-2", 8, 1}, {"g-3", 8, 6},
		{"billing", 50, 24}, {"a", 50, 46}, {"billing", 1, 0},
	} {
		if got := CoordinatorPartition(g.group, g.n); got != g.want {
			t.Errorf("CoordinatorPartition(%q, %d) = %d, want %d", g.group, g.n, got, g.want)
		}
		if got := engine.PartitionForKey([]byte(g.group), g.n); got != g.want {
			t.Errorf("PartitionForKey(%q, %d) = %d: CoordinatorPartition must stay FNV-1a of the name", g.group, g.n, got)
		}
	}
}

// testMember is one member of a group, talking to the coordinator through
// one node.
type testMember struct {
	group, id, session string
	via                *clusterNode
	sessionTimeoutMs   int64
}

func (m *testMember) join(t *testing.T, topics ...coord.Topic) (coord.Result, error) {
	t.Helper()
	return m.via.n.Coordinate(context.Background(), coord.Command{Group: m.group, Join: &coord.Join{
		Member: m.id, Session: m.session, Node: m.via.n.id.NodeID, Topics: topics, SessionTimeoutMs: m.sessionTimeoutMs}})
}

// tend heartbeats the member and answers its revocations (it has nothing in
// flight: it lets them go at once).
func (m *testMember) tend() error {
	ctx := context.Background()
	if _, err := m.via.n.Coordinate(ctx, coord.Command{Group: m.group, Heartbeat: &coord.Heartbeat{Member: m.id, Session: m.session}}); err != nil {
		return fmt.Errorf("heartbeat %s: %w", m.id, err)
	}
	a, err := m.via.n.GroupAssignment(ctx, m.group, m.id)
	if err != nil {
		return fmt.Errorf("assignment of %s: %w", m.id, err)
	}
	if len(a.Revoking) > 0 {
		if _, err := m.via.n.Coordinate(ctx, coord.Command{Group: m.group, RevokeDone: &coord.RevokeDone{Member: m.id, Generation: a.Generation, Partitions: a.Revoking}}); err != nil {
			return fmt.Errorf("revoke done %s: %w", m.id, err)
		}
	}
	return nil
}

// settled checks that every partition of topic is owned by exactly one of
// the members, none is being revoked, and counts are at most one apart.
func settled(s *coord.State, group, topic string, partitions int32, members []*testMember) error {
	owners := map[int32]string{}
	counts := map[string]int{}
	for _, m := range members {
		a, ok := s.Assignment(group, m.id)
		if !ok {
			return fmt.Errorf("member %s is not in group %s", m.id, group)
		}
		if len(a.Revoking) > 0 {
			return fmt.Errorf("member %s is giving up %v", m.id, a.Revoking)
		}
		for _, tp := range a.Owned {
			if tp.Topic != topic {
				continue
			}
			if o, dup := owners[tp.Partition]; dup {
				return fmt.Errorf("partition %d owned by %s and %s", tp.Partition, o, m.id)
			}
			owners[tp.Partition] = m.id
			counts[m.id]++
		}
	}
	if int32(len(owners)) != partitions {
		return fmt.Errorf("%d of %d partitions owned: %v", len(owners), partitions, owners)
	}
	lo, hi := int(partitions), 0
	for _, m := range members {
		lo, hi = min(lo, counts[m.id]), max(hi, counts[m.id])
	}
	if hi-lo > 1 {
		return fmt.Errorf("unbalanced: %v", counts)
	}
	return nil
}

// settle tends the members until the group's assignment is settled.
func settle(t *testing.T, group, topic string, partitions int32, members []*testMember) *coord.State {
	t.Helper()
	var s *coord.State
	awaitCond(t, 20*time.Second, "group "+group+" settled", func() error {
		for _, m := range members {
			if err := m.tend(); err != nil {
				return err
			}
		}
		var err error
		if s, err = members[0].via.n.DescribeGroup(context.Background(), group); err != nil {
			return err
		}
		return settled(s, group, topic, partitions, members)
	})
	return s
}

// awaitCoordinators waits until the groups topic is placed and every node
// can reach the coordinator of group.
func awaitCoordinators(t *testing.T, nodes []*clusterNode, group string) {
	t.Helper()
	awaitCond(t, 30*time.Second, "the coordinator of "+group+" answering on every node", func() error {
		for _, cn := range nodes {
			if _, err := cn.n.DescribeGroup(context.Background(), group); err != nil {
				return fmt.Errorf("node %s: %w", cn.addr, err)
			}
		}
		return nil
	})
}

// coordLeader is the node leading the coordinator partition of group.
func coordLeader(t *testing.T, nodes []*clusterNode, group string) (*clusterNode, *partition) {
	t.Helper()
	for _, cn := range nodes {
		part, err := cn.n.coord.partitionOf(context.Background(), group)
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := cn.n.asMember().host.Status(part.X.raftGroup); ok && st.IsLeader {
			return cn, part
		}
	}
	t.Fatalf("no node leads the coordinator partition of %s", group)
	return nil, nil
}

// groupBytes encodes a group's state alone, for comparing two views of it.
func groupBytes(t *testing.T, s *coord.State, group string) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(groupProto(s, group))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Members joining through different nodes get one consistent assignment;
// commits go through any node; stale generations and non-owners are fenced
// through a forward too; two groups on different coordinator partitions
// are independent.
func TestClusterGroupsCoordinate(t *testing.T) {
	tc := newTestCluster(t, 3)
	const group, topic, parts = "billing", "orders", int32(6)
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: topic, Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCoordinators(t, tc.nodes, group) // creates the groups topic
	for _, cn := range tc.nodes {
		if _, err := cn.n.partition(meta.GroupsTopic, 0); err != nil {
			t.Fatalf("the groups topic is not known on %s: %v", cn.addr, err)
		}
		for _, ts := range cn.n.Topics() {
			if ts.Name == meta.GroupsTopic {
				t.Fatalf("Topics lists the internal topic %s", meta.GroupsTopic)
			}
		}
	}
	orders := coord.Topic{Name: topic, Partitions: parts}
	var members []*testMember
	for i, cn := range tc.nodes {
		m := &testMember{group: group, id: fmt.Sprintf("m%d", i), session: "s1", via: cn}
		if _, err := m.join(t, orders); err != nil {
			t.Fatalf("join %s through node %d: %v", m.id, i, err)
		}
		members = append(members, m)
	}
	s := settle(t, group, topic, parts, members)
	want := groupBytes(t, s, group)
	for i, cn := range tc.nodes {
		got, err := cn.n.DescribeGroup(context.Background(), group)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(groupBytes(t, got, group), want) {
			t.Fatalf("node %d describes group %s otherwise than node 0", i, group)
		}
	}

	// Commits through every node.
	leader, _ := coordLeader(t, tc.nodes, group)
	var follower *clusterNode
	for _, cn := range tc.nodes {
		if cn != leader {
			follower = cn
		}
	}
	gen := s.Generation(group)
	for i, m := range members {
		a, _ := s.Assignment(group, m.id)
		for k, tp := range a.Owned {
			via := tc.nodes[(i+k+1)%len(tc.nodes)]
			cmd := coord.Command{Group: group, Commit: &coord.Commit{Member: m.id, Generation: gen, TopicPartition: tp, Position: coord.Position{Next: int64(100 + tp.Partition), Done: []int64{int64(102 + tp.Partition)}}}}
			if _, err := via.n.Coordinate(context.Background(), cmd); err != nil {
				t.Fatalf("commit %s/%d by %s through %s: %v", tp.Topic, tp.Partition, m.id, via.addr, err)
			}
		}
	}
	// A commit behind the committed position changes nothing.
	a0, _ := s.Assignment(group, "m0")
	behind := coord.Command{Group: group, Commit: &coord.Commit{Member: "m0", Generation: gen, TopicPartition: a0.Owned[0], Position: coord.Position{Next: 3}}}
	if _, err := follower.n.Coordinate(context.Background(), behind); err != nil {
		t.Fatalf("a commit behind the position: %v", err)
	}
	lag, err := tc.nodes[2].n.GroupLagInputs(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	if len(lag) != int(parts) {
		t.Fatalf("lag inputs of %d partitions, want %d: %+v", len(lag), parts, lag)
	}
	for _, ps := range lag {
		want := coord.Position{Next: int64(100 + ps.Partition), Done: []int64{int64(102 + ps.Partition)}}
		if !ps.Committed || !ps.Position.Equal(want) || ps.Owner == "" {
			t.Fatalf("partition %d: %+v, want committed %+v and an owner", ps.Partition, ps, want)
		}
	}

	// Fencing, through the leader and through a forward.
	a1, _ := s.Assignment(group, "m1")
	notOwner := coord.Command{Group: group, Commit: &coord.Commit{Member: "m0", Generation: gen, TopicPartition: a1.Owned[0], Position: coord.Position{Next: 500}}}
	for _, via := range []*clusterNode{leader, follower} {
		res, err := via.n.Coordinate(context.Background(), notOwner)
		if !errors.Is(err, coord.ErrFenced) || !errors.Is(res.Err, coord.ErrFenced) {
			t.Fatalf("a commit of another member's partition through %s: %v, want ErrFenced", via.addr, err)
		}
	}
	restarted := &testMember{group: group, id: "m0", session: "s2", via: tc.nodes[0]}
	res, err := restarted.join(t, orders)
	if err != nil {
		t.Fatalf("restart of m0: %v", err)
	}
	if res.Generation <= gen {
		t.Fatalf("a restart kept generation %d (before %d): the previous incarnation is not fenced", res.Generation, gen)
	}
	stale := coord.Command{Group: group, Commit: &coord.Commit{Member: "m0", Generation: gen, TopicPartition: a0.Owned[0], Position: coord.Position{Next: 900}}}
	for _, via := range []*clusterNode{follower, leader} {
		if _, err := via.n.Coordinate(context.Background(), stale); !errors.Is(err, coord.ErrFenced) {
			t.Fatalf("a commit with the stale generation %d through %s: %v, want ErrFenced", gen, via.addr, err)
		}
	}
	if _, err := follower.n.Coordinate(context.Background(), coord.Command{Group: group, Heartbeat: &coord.Heartbeat{Member: "m0", Session: "s1"}}); !errors.Is(err, coord.ErrStaleSession) {
		t.Fatalf("a heartbeat of the previous incarnation through a forward: %v, want ErrStaleSession", err)
	}
	if _, err := follower.n.Coordinate(context.Background(), coord.Command{Group: group, Heartbeat: &coord.Heartbeat{Member: "nobody", Session: "s"}}); !errors.Is(err, coord.ErrUnknownMember) {
		t.Fatalf("a heartbeat of an unknown member through a forward: %v, want ErrUnknownMember", err)
	}
	if _, err := follower.n.Coordinate(context.Background(), coord.Command{Group: "bad/name", Heartbeat: &coord.Heartbeat{Member: "m", Session: "s"}}); !errors.Is(err, coord.ErrInvalid) {
		t.Fatalf("a bad group name: %v, want ErrInvalid", err)
	}
	if p, ok := mustDescribe(t, follower, group).Position(group, topic, a0.Owned[0].Partition); !ok || p.Next != int64(100+a0.Owned[0].Partition) {
		t.Fatalf("the fenced commits moved the position: %+v", p)
	}
	reset := coord.Command{Group: group, Reset: &coord.ResetPositions{Topic: topic, Next: []coord.PartitionNext{{Partition: a0.Owned[0].Partition, Next: 0}}}}
	if _, err := follower.n.Coordinate(context.Background(), reset); !errors.Is(err, coord.ErrGroupActive) {
		t.Fatalf("an offset reset while members own the partitions, through a forward: %v, want ErrGroupActive", err)
	}

	// A second group on another coordinator partition.
	other := ""
	for i := 0; other == ""; i++ {
		if name := fmt.Sprintf("reports-%d", i); CoordinatorPartition(name, DefaultGroupsPartitions) != CoordinatorPartition(group, DefaultGroupsPartitions) {
			other = name
		}
	}
	awaitCoordinators(t, tc.nodes, other)
	o := &testMember{group: other, id: "r0", session: "s1", via: tc.nodes[1]}
	if _, err := o.join(t, orders); err != nil {
		t.Fatal(err)
	}
	so := settle(t, other, topic, parts, []*testMember{o})
	if got := so.Groups(); !slices.Equal(got, []string{other}) {
		t.Fatalf("describing %s shows groups %v", other, got)
	}
	if sb := mustDescribe(t, tc.nodes[2], group); sb.Generation(group) != res.Generation || len(sb.Members(group)) != 3 {
		t.Fatalf("group %s changed by %s's commands: generation %d, members %d", group, other, sb.Generation(group), len(sb.Members(group)))
	}
	_, p1 := coordLeader(t, tc.nodes, group)
	_, p2 := coordLeader(t, tc.nodes, other)
	if p1.Num == p2.Num || p1.X.raftGroup == p2.X.raftGroup {
		t.Fatalf("groups %s and %s share coordinator partition %d", group, other, p1.Num)
	}
}

func mustDescribe(t *testing.T, cn *clusterNode, group string) *coord.State {
	t.Helper()
	s, err := cn.n.DescribeGroup(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Stopping the node leading a group's coordinator partition: a new leader
// answers with the same members, generation and positions; positions never
// move back; the old leader, started again, rebuilds the same state from
// its log.
func TestClusterGroupsFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	const group, topic, parts = "orders-app", "orders", int32(4)
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: topic, Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCoordinators(t, tc.nodes, group)
	orders := coord.Topic{Name: topic, Partitions: parts}
	members := []*testMember{
		{group: group, id: "a", session: "s1", via: tc.nodes[0]},
		{group: group, id: "b", session: "s1", via: tc.nodes[1]},
	}
	for _, m := range members {
		if _, err := m.join(t, orders); err != nil {
			t.Fatal(err)
		}
	}
	s := settle(t, group, topic, parts, members)
	gen := s.Generation(group)
	for _, m := range members {
		a, _ := s.Assignment(group, m.id)
		for _, tp := range a.Owned {
			cmd := coord.Command{Group: group, Commit: &coord.Commit{Member: m.id, Generation: gen, TopicPartition: tp, Position: coord.Position{Next: 50 + int64(tp.Partition)}}}
			if _, err := m.via.n.Coordinate(context.Background(), cmd); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := mustDescribe(t, tc.nodes[2], group)
	leader, _ := coordLeader(t, tc.nodes, group)
	tc.stop(leader)
	var live []*clusterNode
	for _, cn := range tc.nodes {
		if cn != leader {
			live = append(live, cn)
		}
	}
	var after *coord.State
	awaitCond(t, 20*time.Second, "a new coordinator of "+group, func() error {
		var err error
		after, err = live[0].n.DescribeGroup(context.Background(), group)
		return err
	})
	if !bytes.Equal(groupBytes(t, after, group), groupBytes(t, before, group)) {
		t.Fatalf("the new coordinator holds another state:\nbefore %v\nafter  %v", groupProto(before, group), groupProto(after, group))
	}
	// Members go on through the survivors; positions move forward only.
	for _, m := range members {
		if m.via == leader {
			m.via = live[1]
		}
	}
	for _, m := range members {
		if err := m.tend(); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := after.Assignment(group, "a")
	tp := a.Owned[0]
	for _, next := range []int64{70, 60, 80} {
		cmd := coord.Command{Group: group, Commit: &coord.Commit{Member: "a", Generation: gen, TopicPartition: tp, Position: coord.Position{Next: next}}}
		if _, err := live[1].n.Coordinate(context.Background(), cmd); err != nil {
			t.Fatalf("commit %d after the failover: %v", next, err)
		}
		want := max(next, 70)
		if p, _ := mustDescribe(t, live[0], group).Position(group, topic, tp.Partition); p.Next != want {
			t.Fatalf("after committing %d: position %d, want %d (never back)", next, p.Next, want)
		}
	}

	// The old leader comes back and rebuilds the state from its log.
	tc.start(leader)
	awaitCond(t, 20*time.Second, "the restarted node's coordinator state", func() error {
		want := groupBytes(t, mustDescribe(t, live[0], group), group)
		part, err := leader.n.coord.partitionOf(context.Background(), group) // the restarted node's
		if err != nil {
			return err
		}
		cp, err := leader.n.coord.lookup(part)
		if err != nil {
			return err
		}
		cp.mu.Lock()
		got := groupBytes(t, cp.state, group)
		cp.mu.Unlock()
		if !bytes.Equal(got, want) {
			return errors.New("differs from the leader's")
		}
		return nil
	})
}

// A member that stops heartbeating is expired by the driver once its
// session timeout passes, and its partitions go to the others at once.
func TestClusterGroupsExpiry(t *testing.T) {
	tc := newTestCluster(t, 3)
	const group, topic, parts = "g-2", "orders", int32(4)
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: topic, Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCoordinators(t, tc.nodes, group)
	orders := coord.Topic{Name: topic, Partitions: parts}
	alive := &testMember{group: group, id: "alive", session: "s1", via: tc.nodes[0], sessionTimeoutMs: coord.MinSessionTimeoutMs}
	gone := &testMember{group: group, id: "gone", session: "s1", via: tc.nodes[1], sessionTimeoutMs: coord.MinSessionTimeoutMs}
	for _, m := range []*testMember{alive, gone} {
		if _, err := m.join(t, orders); err != nil {
			t.Fatal(err)
		}
	}
	s := settle(t, group, topic, parts, []*testMember{alive, gone})
	if a, _ := s.Assignment(group, "gone"); len(a.Owned) != int(parts)/2 {
		t.Fatalf("gone owns %v, want half", a.Owned)
	}
	lastHeard := time.Now()
	awaitCond(t, 20*time.Second, "gone expired and its partitions granted to alive", func() error {
		if err := alive.tend(); err != nil {
			return err
		}
		s, err := alive.via.n.DescribeGroup(context.Background(), group)
		if err != nil {
			return err
		}
		if _, ok := s.Assignment(group, "gone"); ok {
			return errors.New("gone is still a member")
		}
		return settled(s, group, topic, parts, []*testMember{alive})
	})
	// gone was last heard from in settle's last round, just before lastHeard.
	if since := time.Since(lastHeard); since < coord.MinSessionTimeoutMs*time.Millisecond-time.Second {
		t.Fatalf("gone expired %v after it was last heard from, before its session timeout", since)
	}
	if _, err := gone.via.n.Coordinate(context.Background(), coord.Command{Group: group, Heartbeat: &coord.Heartbeat{Member: "gone", Session: "s1"}}); !errors.Is(err, coord.ErrUnknownMember) {
		t.Fatalf("a heartbeat of the expired member: %v, want ErrUnknownMember", err)
	}
}

// A new coordinator leader counts every member as heard from when it took
// over: a member silent since before the failover is expired only one
// session timeout after it, not when its session would have ended at the
// old leader.
func TestClusterGroupsGraceAfterFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	const group, topic, parts = "g-0", "orders", int32(2)
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: topic, Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCoordinators(t, tc.nodes, group)
	leader, _ := coordLeader(t, tc.nodes, group)
	var live []*clusterNode
	for _, cn := range tc.nodes {
		if cn != leader {
			live = append(live, cn)
		}
	}
	orders := coord.Topic{Name: topic, Partitions: parts}
	alive := &testMember{group: group, id: "alive", session: "s1", via: live[0], sessionTimeoutMs: coord.MinSessionTimeoutMs}
	quiet := &testMember{group: group, id: "quiet", session: "s1", via: live[1], sessionTimeoutMs: coord.MinSessionTimeoutMs}
	for _, m := range []*testMember{alive, quiet} {
		if _, err := m.join(t, orders); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, group, topic, parts, []*testMember{alive, quiet})
	heard := time.Now() // quiet's last heartbeat was before this
	// Two thirds of quiet's session pass (alive keeps heartbeating), then
	// the coordinator's leader stops.
	awaitCond(t, 10*time.Second, "two thirds of a session timeout", func() error {
		if err := alive.tend(); err != nil {
			return err
		}
		if since := time.Since(heard); since < 2*coord.MinSessionTimeoutMs*time.Millisecond/3 {
			return fmt.Errorf("%v passed", since)
		}
		return nil
	})
	if now, _ := coordLeader(t, tc.nodes, group); now != leader {
		leader = now
		for _, cn := range tc.nodes {
			if cn != leader {
				alive.via = cn
			}
		}
	}
	stopped := time.Now()
	tc.stop(leader)
	awaitCond(t, 20*time.Second, "quiet expired by the new leader", func() error {
		if err := alive.tend(); err != nil {
			return err
		}
		s, err := alive.via.n.DescribeGroup(context.Background(), group)
		if err != nil {
			return err
		}
		if _, ok := s.Assignment(group, "quiet"); ok {
			return errors.New("quiet is still a member")
		}
		return nil
	})
	if since := time.Since(stopped); since < coord.MinSessionTimeoutMs*time.Millisecond {
		t.Fatalf("quiet expired %v after the failover, within the new leader's grace period (%d ms)", since, coord.MinSessionTimeoutMs)
	}
}

// coordLog is a node's replica of the coordinator partition of group and
// its coordinator state.
func coordLog(t *testing.T, cn *clusterNode, group string) (*partition, *coordPart, error) {
	t.Helper()
	part, err := cn.n.coord.partitionOf(context.Background(), group)
	if err != nil {
		return nil, nil, err
	}
	cp, err := cn.n.coord.lookup(part)
	return part, cp, err
}

// The offsets topic's log does not grow forever: the coordinator's leader
// writes checkpoints of its state, every replica's log then starts at the
// newest one, a node started again rebuilds the same state from the
// checkpoint its log starts with, and a node that was down while the others
// compacted past its log catches up from a snapshot and rebuilds the same
// state too.
func TestClusterGroupsCheckpoint(t *testing.T) {
	const every = 40
	tc := newTestCluster(t, 3, func(_ int, cn *clusterNode) { cn.ckEvery = every })
	const group, topic, parts = "ledger-app", "orders", int32(4)
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: topic, Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCoordinators(t, tc.nodes, group)
	orders := coord.Topic{Name: topic, Partitions: parts}
	members := []*testMember{
		{group: group, id: "a", session: "s1", via: tc.nodes[0]},
		{group: group, id: "b", session: "s1", via: tc.nodes[1]},
	}
	for _, m := range members {
		if _, err := m.join(t, orders); err != nil {
			t.Fatal(err)
		}
	}
	next := int64(0)
	// work heartbeats and commits rounds times: every member commits each
	// partition it owns one further.
	// once retries a heartbeat or commit whose outcome was unknown (a
	// leadership moving as a node stops): both are idempotent, and clients
	// retry them the same way.
	once := func(f func() error) error {
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := f()
			if !errors.Is(err, engine.ErrOutcomeUnknown) || time.Now().After(deadline) {
				return err
			}
			time.Sleep(20 * time.Millisecond) // sleep-ok: a retry's pause, as a client's backoff
		}
	}
	work := func(rounds int) {
		t.Helper()
		for range rounds {
			next++
			for _, m := range members {
				if err := once(m.tend); err != nil {
					t.Fatal(err)
				}
				a, err := m.via.n.GroupAssignment(context.Background(), group, m.id)
				if err != nil {
					t.Fatal(err)
				}
				for _, tp := range a.Owned {
					cmd := coord.Command{Group: group, Commit: &coord.Commit{Member: m.id, Generation: a.Generation, TopicPartition: tp, Position: coord.Position{Next: next}}}
					if err := once(func() error { _, err := m.via.n.Coordinate(context.Background(), cmd); return err }); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	settle(t, group, topic, parts, members)
	work(30)
	// Every replica's log starts at a checkpoint past the first records,
	// and holds about a checkpoint period of records.
	awaitCompacted := func(nodes []*clusterNode, past int64) {
		t.Helper()
		awaitCond(t, 30*time.Second, "every replica's coordinator log starting at a checkpoint", func() error {
			for _, cn := range nodes {
				part, cp, err := coordLog(t, cn, group)
				if err != nil {
					return err
				}
				start := part.Log.StartOffset()
				cp.mu.Lock()
				at, applied := cp.checkpointAt, cp.app.Applied()
				cp.mu.Unlock()
				switch {
				case start <= past:
					return fmt.Errorf("node %s: log starts at %d, want past %d", cn.addr, start, past)
				case at < start:
					return fmt.Errorf("node %s: log starts at %d, newest checkpoint applied at %d", cn.addr, start, at)
				case applied-start > 3*every:
					return fmt.Errorf("node %s: the log holds %d records from %d, more than 3 checkpoint periods (%d)", cn.addr, applied-start, start, every)
				}
			}
			return nil
		})
	}
	awaitCompacted(tc.nodes, 0)
	want := groupBytes(t, mustDescribe(t, tc.nodes[2], group), group)
	if p, _ := mustDescribe(t, tc.nodes[2], group).Position(group, topic, 0); p.Next != next {
		t.Fatalf("position of partition 0: %d, want %d", p.Next, next)
	}

	// Every node started again rebuilds the state from its checkpoint.
	for _, cn := range tc.nodes {
		tc.stop(cn)
	}
	for _, cn := range tc.nodes {
		tc.start(cn)
	}
	awaitCoordinators(t, tc.nodes, group)
	for _, cn := range tc.nodes {
		if got := groupBytes(t, mustDescribe(t, cn, group), group); !bytes.Equal(got, want) {
			t.Fatalf("after a restart node %s describes another state", cn.addr)
		}
		awaitCond(t, 20*time.Second, "node "+cn.addr+"'s own state rebuilt from the checkpoint", func() error {
			part, cp, err := coordLog(t, cn, group)
			if err != nil {
				return err
			}
			cp.mu.Lock()
			defer cp.mu.Unlock()
			if cp.checkpointAt != part.Log.StartOffset() || cp.checkpointAt <= 0 {
				return fmt.Errorf("checkpoint at %d, log start %d", cp.checkpointAt, part.Log.StartOffset())
			}
			if !bytes.Equal(groupBytes(t, cp.state, group), want) {
				return errors.New("its state differs")
			}
			return nil
		})
	}

	// A node down while the others compact past its log catches up from a
	// snapshot and rebuilds the state from the checkpoint.
	down := tc.nodes[2]
	part, _, err := coordLog(t, down, group)
	if err != nil {
		t.Fatal(err)
	}
	downEnd := part.Log.NextOffset()
	tc.stop(down)
	members[0].via, members[1].via = tc.nodes[0], tc.nodes[1]
	for i := 0; ; i++ {
		work(10)
		leaderPart, _, err := coordLog(t, tc.nodes[0], group)
		if err != nil {
			t.Fatal(err)
		}
		if leaderPart.Log.StartOffset() > downEnd {
			break
		}
		if i > 100 {
			t.Fatalf("the live nodes' log still starts at %d, the stopped node's ends at %d", leaderPart.Log.StartOffset(), downEnd)
		}
	}
	tc.start(down)
	want = groupBytes(t, mustDescribe(t, tc.nodes[0], group), group)
	awaitCond(t, 30*time.Second, "the restarted node's state rebuilt after a snapshot", func() error {
		part, cp, err := coordLog(t, down, group)
		if err != nil {
			return err
		}
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if cp.checkpointAt <= downEnd {
			return fmt.Errorf("newest checkpoint applied at %d, before the end %d the node had", cp.checkpointAt, downEnd)
		}
		if part.Log.StartOffset() <= downEnd {
			return fmt.Errorf("log starts at %d", part.Log.StartOffset())
		}
		if !bytes.Equal(groupBytes(t, cp.state, group), want) {
			return errors.New("its state differs from the leader's")
		}
		return nil
	})
	awaitCompacted(tc.nodes, downEnd)
}
