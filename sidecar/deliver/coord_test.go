package deliver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// inProcCoord runs the real coordinator state machine in process, stamped
// with the (fake, under synctest) clock, and records every command.
type inProcCoord struct {
	mu   sync.Mutex
	st   *engine.GroupState
	log  []string // "member cmd topic/partition", in apply order
	skew time.Duration
	// old: refuse a Join or Heartbeat carrying a count of apps, as a node
	// of a release before the count does (it rejects unknown fields).
	old bool
	// failCounted: the next this many commands carrying a count of apps
	// fail as a coordinator that is briefly unavailable answers.
	failCounted int
}

func newInProcCoord() *inProcCoord { return &inProcCoord{st: engine.NewGroupState()} }

func (c *inProcCoord) Coordinate(_ context.Context, cmd engine.GroupCommand) (engine.GroupResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd.AtMs = time.Now().Add(c.skew).UnixMilli()
	counted := cmd.Join != nil && cmd.Join.Consumers > 0 || cmd.Heartbeat != nil && cmd.Heartbeat.Consumers > 0
	if c.old && counted {
		return engine.GroupResult{}, fmt.Errorf("%w: node 1: coord: malformed command: unknown field 7", engine.ErrGroupCommandUnreadable)
	}
	if c.failCounted > 0 && counted {
		c.failCounted--
		return engine.GroupResult{}, errors.New("engine: coordinator unavailable here: __groups/0 replica stopped (disk full)")
	}
	res := c.st.Apply(cmd)
	switch {
	case cmd.Commit != nil:
		c.log = append(c.log, fmt.Sprintf("%s commit %s/%d@%d err=%v", cmd.Commit.Member, cmd.Commit.Topic, cmd.Commit.Partition, cmd.Commit.Position.Next, res.Err != nil))
	case cmd.RevokeDone != nil:
		for _, tp := range cmd.RevokeDone.Partitions {
			c.log = append(c.log, fmt.Sprintf("%s revokedone %s/%d err=%v", cmd.RevokeDone.Member, tp.Topic, tp.Partition, res.Err != nil))
		}
	}
	return res, res.Err
}

func (c *inProcCoord) DescribeGroup(context.Context, string) (GroupView, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Clone(), nil
}

func (c *inProcCoord) Node() (uint64, bool)             { return 1, true }
func (c *inProcCoord) Replicas(topic string) [][]uint64 { return nil }

func (c *inProcCoord) events() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

func (c *inProcCoord) assignment(member string) engine.GroupAssignmentOf {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, _ := c.st.Assignment(tGroup, member)
	return a
}

// apply runs a command of another member (or the driver's Expire).
func (c *inProcCoord) apply(t *testing.T, cmd engine.GroupCommand) {
	t.Helper()
	cmd.Group = tGroup
	if _, err := c.Coordinate(context.Background(), cmd); err != nil {
		t.Fatal(err)
	}
}

func clusterGroup(co *inProcCoord, poll time.Duration) GroupConfig {
	return GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{MaxInFlight: 16, VisibilityTimeout: time.Minute})},
		Coordinator: co, Membership: Membership{MemberPrefix: "a", Session: "s1", SessionTimeout: 5 * time.Minute,
			RevokeTimeout: 30 * time.Second, PollInterval: poll, CommitInterval: 100 * time.Millisecond}}
}

const memberA = "a/" + tTopic

// A revoked partition is handed over only after its in-flight delivery is
// settled, and in this order: the commit of its position (past the
// settled message), then RevokeDone. Meanwhile nothing new of it is
// delivered, and the partition that stays keeps flowing.
func TestRevokeDrainsThenCommitsThenRevokeDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 2, tDLQ: 1})
		co := newInProcCoord()
		h := startGroup(t, eng, clusterGroup(co, 50*time.Millisecond))
		c := h.join(16, 2)
		await(t, 10*time.Second, "member a owns both partitions", func() bool { return len(co.assignment(memberA).Owned) == 2 })
		eng.publish(tTopic, 0, msg("p0-0", nil))
		eng.publish(tTopic, 1, msg("p1-0", nil))
		ds := c.deliveries(2, 10*time.Second) // one in flight of each partition

		// Member b joins: one partition is revoked from a.
		co.apply(t, engine.GroupCommand{Join: &engine.GroupJoin{Member: "b/" + tTopic, Session: "sb", Node: 2,
			Topics: []engine.GroupTopic{{Name: tTopic, Partitions: 2}}, SessionTimeoutMs: 300_000}})
		rev := co.assignment(memberA).Revoking
		if len(rev) != 1 {
			t.Fatalf("revoking %v, want one partition", rev)
		}
		revoked := rev[0].Partition
		d, dk := ds[0], ds[1]
		if d.GetPartition() != revoked {
			d, dk = dk, d
		}
		time.Sleep(5 * time.Second) // sleep-ok: fake time; many polls and commit intervals pass
		for _, e := range co.events() {
			if e == fmt.Sprintf("%s revokedone %s/%d err=false", memberA, tTopic, revoked) {
				t.Fatalf("RevokeDone before the in-flight delivery of the partition was settled: %v", co.events())
			}
		}
		// Settle, give credit: the partition is handed over; the other one
		// still delivers.
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(d)}}, Credit: 4})
		await(t, 10*time.Second, "the revoked partition handed over", func() bool { return len(co.assignment(memberA).Revoking) == 0 })
		ev := co.events()
		var commitAt, doneAt = -1, -1
		for i, e := range ev {
			if e == fmt.Sprintf("%s revokedone %s/%d err=false", memberA, tTopic, revoked) {
				doneAt = i
			}
			var next int64
			if _, err := fmt.Sscanf(e, memberA+" commit "+tTopic+"/%d@%d err=false", new(int32), &next); err == nil && doneAt < 0 {
				if e == fmt.Sprintf("%s commit %s/%d@%d err=false", memberA, tTopic, revoked, next) && next == 1 {
					commitAt = i
				}
			}
		}
		if commitAt < 0 || doneAt < 0 || commitAt > doneAt {
			t.Fatalf("want a commit of %s/%d at 1, then RevokeDone; got %v", tTopic, revoked, ev)
		}
		if pos, ok := co.st.Position(tGroup, tTopic, revoked); !ok || pos.Next != 1 {
			t.Fatalf("committed position of the revoked partition: %+v, want next 1", pos)
		}
		kept := 1 - revoked
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(dk)}}})
		eng.publish(tTopic, revoked, msg("moved", nil))
		eng.publish(tTopic, kept, msg("stays", nil))
		got := c.deliveries(1, 10*time.Second)
		for _, x := range got {
			if x.GetPartition() == revoked {
				t.Fatalf("delivered %s of the revoked partition after it was handed over", x.GetMessageId())
			}
		}
	})
}

// Revoked partitions that are ready together are handed over together:
// their positions are committed, then RevokeDone is said for each, in one
// round. (One at a time, a coordinator that waits for all of them at once
// — Kafka's revoke callback — waited for as many rounds as partitions.)
func TestRevokedPartitionsHandedOverTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 4, tDLQ: 1})
		co := newInProcCoord()
		h := startGroup(t, eng, clusterGroup(co, 50*time.Millisecond))
		h.join(16, 4)
		await(t, 10*time.Second, "member a owns every partition", func() bool { return len(co.assignment(memberA).Owned) == 4 })

		co.apply(t, engine.GroupCommand{Join: &engine.GroupJoin{Member: "b/" + tTopic, Session: "sb", Node: 2,
			Topics: []engine.GroupTopic{{Name: tTopic, Partitions: 4}}, SessionTimeoutMs: 300_000}})
		rev := co.assignment(memberA).Revoking
		if len(rev) != 2 {
			t.Fatalf("revoking %v, want two partitions", rev)
		}
		await(t, 10*time.Second, "the revoked partitions handed over", func() bool { return len(co.assignment(memberA).Revoking) == 0 })
		var order []string
		for _, e := range co.events() {
			for _, tp := range rev {
				switch {
				case strings.HasPrefix(e, fmt.Sprintf("%s commit %s/%d@", memberA, tTopic, tp.Partition)):
					order = append(order, "commit")
				case e == fmt.Sprintf("%s revokedone %s/%d err=false", memberA, tTopic, tp.Partition):
					order = append(order, "revokedone")
				}
			}
		}
		if strings.Join(order, " ") != "commit commit revokedone revokedone" {
			t.Fatalf("commands for the revoked partitions: %v; want both commits, then both RevokeDones (%v)", order, co.events())
		}
	})
}

// A commit refused as fenced (the partition moved while this member was
// not looking: its session was expired) stops the partition at once: the
// delivery outstanding is no longer accepted, nothing more of it is
// delivered, and nothing more of it is committed.
func TestFencedCommitStopsThePartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 1, tDLQ: 1})
		co := newInProcCoord()
		// A poll interval longer than the test: only the commit can tell.
		h := startGroup(t, eng, clusterGroup(co, time.Hour))
		c := h.join(16, 4)
		await(t, 10*time.Second, "member a owns the partition", func() bool { return len(co.assignment(memberA).Owned) == 1 })
		eng.publish(tTopic, 0, msg("m0", nil), msg("m1", nil))
		ds := c.deliveries(2, 10*time.Second)

		// a's session is expired; b takes the partition.
		co.mu.Lock()
		co.skew = 6 * time.Minute
		co.mu.Unlock()
		co.apply(t, engine.GroupCommand{Expire: &engine.GroupExpire{Member: memberA}})
		co.apply(t, engine.GroupCommand{Join: &engine.GroupJoin{Member: "b/" + tTopic, Session: "sb", Node: 2,
			Topics: []engine.GroupTopic{{Name: tTopic, Partitions: 1}}, SessionTimeoutMs: 300_000}})

		// a's next commit (after an ack) is fenced.
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(ds[0])}}})
		await(t, 10*time.Second, "a fenced commit", func() bool {
			for _, e := range co.events() {
				if e == fmt.Sprintf("%s commit %s/0@1 err=true", memberA, tTopic) {
					return true
				}
			}
			return false
		})
		n := len(co.events())
		// The other outstanding delivery is refused, nothing more comes.
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(ds[1])}}, Credit: 4})
		var f *spoolv1.SubscribeResponse
		await(t, 10*time.Second, "the late ack refused", func() bool {
			f = c.frame(100 * time.Millisecond)
			return f != nil && len(f.GetSettleErrors()) > 0
		})
		if r := f.GetSettleErrors()[0].GetReason(); r != "NOT_IN_FLIGHT" {
			t.Fatalf("late ack: %s, want NOT_IN_FLIGHT", r)
		}
		eng.publish(tTopic, 0, msg("m2", nil))
		if f := c.frame(5 * time.Second); f != nil && len(f.GetDeliveries()) > 0 {
			t.Fatalf("delivered %v after the fenced commit", f.GetDeliveries())
		}
		for _, e := range co.events()[n:] {
			if strings.HasPrefix(e, memberA+" ") {
				t.Fatalf("member a sent %q after it was fenced", e)
			}
		}
	})
}

// In a cluster an offset reset goes through the group's coordinator: it is
// refused while this sidecar's app is connected (its member owns the
// partitions), a dry run changes nothing, and once the app has gone (the
// member yields and hands the partitions back) the positions move back to
// the start; the app connecting again is delivered everything from there.
func TestResetThroughCoordinator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 2, tDLQ: 1})
		co := newInProcCoord()
		h := startGroup(t, eng, clusterGroup(co, 50*time.Millisecond))
		c := h.join(16, 8)
		await(t, 10*time.Second, "member a owns both partitions", func() bool { return len(co.assignment(memberA).Owned) == 2 })
		for p := range int32(2) {
			for i := range 3 {
				eng.publish(tTopic, p, msg(fmt.Sprintf("p%d-%d", p, i), nil))
			}
		}
		var acks []*spoolv1.Ack
		for _, d := range c.deliveries(6, 10*time.Second) {
			acks = append(acks, &spoolv1.Ack{Ref: refOf(d)})
		}
		c.send(&spoolv1.SubscribeRequest{Acks: acks})
		positions := func() [2]int64 {
			co.mu.Lock()
			defer co.mu.Unlock()
			var out [2]int64
			for p := range int32(2) {
				pos, _ := co.st.Position(tGroup, tTopic, p)
				out[p] = pos.Next
			}
			return out
		}
		await(t, 10*time.Second, "both positions committed at 3", func() bool { return positions() == [2]int64{3, 3} })
		earliest := func(_ int32, start, _ int64) (int64, error) { return start, nil }
		ctx := context.Background()

		if _, err := h.g.ResetOffsets(ctx, tTopic, earliest, false); !errors.Is(err, ErrConsumersConnected) || !strings.Contains(err.Error(), "stop the group's apps on every sidecar") {
			t.Fatalf("reset with the app connected: %v, want ErrConsumersConnected saying what to do", err)
		}
		if err := h.g.post(ctx, leaveEvent{c.c}); err != nil {
			t.Fatal(err)
		}
		await(t, 30*time.Second, "the partitions handed back", func() bool { return len(co.assignment(memberA).Owned) == 0 })
		out, err := h.g.ResetOffsets(ctx, tTopic, earliest, true)
		if err != nil || len(out) != 2 || out[0].Committed != 0 || out[0].LagMessages != 3 {
			t.Fatalf("dry run: %+v, %v", out, err)
		}
		if got := positions(); got != [2]int64{3, 3} {
			t.Fatalf("a dry run moved the positions to %v", got)
		}
		if _, err := h.g.ResetOffsets(ctx, tTopic, earliest, false); err != nil {
			t.Fatalf("reset with no app connected: %v", err)
		}
		if got := positions(); got != [2]int64{0, 0} {
			t.Fatalf("positions after the reset: %v, want 0 and 0", got)
		}
		c2 := h.join(16, 8)
		ids := map[string]bool{}
		for _, d := range c2.deliveries(6, 30*time.Second) {
			ids[d.GetMessageId()] = true
		}
		if len(ids) != 6 {
			t.Fatalf("after the reset the app got %d distinct messages, want all 6: %v", len(ids), ids)
		}
	})
}

// A member whose breakers hold its deliveries past DegradeAfter says it is
// degraded, and the coordinator moves its partitions to the healthy member;
// left with none, it forgets its breakers' state after DegradeAfter more,
// says it is healthy and takes its share back.
func TestDegradedMemberGivesItsPartitionsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 2, tDLQ: 1})
		co := newInProcCoord()
		cfg := clusterGroup(co, 50*time.Millisecond)
		cfg.Subscriptions[0].Breaker = &breaker.Config{ConsecutiveFailures: 2, OpenTimeout: 5 * time.Second, MaxOpenTimeout: 5 * time.Second}
		cfg.Membership.DegradeAfter = 30 * time.Second
		h := startGroup(t, eng, cfg)
		c := h.join(16, 64)
		await(t, 10*time.Second, "member a owns both partitions", func() bool { return len(co.assignment(memberA).Owned) == 2 })
		const memberB = "b/" + tTopic
		co.apply(t, engine.GroupCommand{Join: &engine.GroupJoin{Member: memberB, Session: "sb", Node: 2,
			Topics: []engine.GroupTopic{{Name: tTopic, Partitions: 2}}, SessionTimeoutMs: 300_000}})
		await(t, 10*time.Second, "one partition handed to b", func() bool {
			return len(co.assignment(memberA).Owned) == 1 && len(co.assignment(memberA).Revoking) == 0
		})
		mine := co.assignment(memberA).Owned[0].Partition
		for i := range 4 {
			eng.publish(tTopic, mine, msg(fmt.Sprintf("m%d", i), nil))
		}
		degraded := func() float64 {
			return testutil.ToFloat64(h.m.MemberDegraded.WithLabelValues(tGroup, tTopic))
		}
		// The app fails every delivery toward one downstream: the breaker
		// opens, probes fail, and it keeps holding the deliveries.
		fail := func(d time.Duration) {
			if f := c.frame(d); f != nil {
				var nacks []*spoolv1.Nack
				for _, x := range f.GetDeliveries() {
					nacks = append(nacks, &spoolv1.Nack{Ref: refOf(x), Outcome: spoolv1.Outcome_OUTCOME_RETRY, Error: "503", Downstream: "email"})
				}
				c.send(&spoolv1.SubscribeRequest{Nacks: nacks, Credit: uint32(len(nacks))})
			}
		}
		start := time.Now()
		for len(co.assignment(memberA).Owned) > 0 {
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("member a still owns %v two minutes into the outage", co.assignment(memberA).Owned)
			}
			fail(time.Second)
		}
		if held := time.Since(start); held < 30*time.Second {
			t.Fatalf("a gave its partition up %v into the outage, before DegradeAfter (30s)", held)
		}
		if degraded() != 1 {
			t.Fatalf("spool_group_member_degraded = %v, want 1", degraded())
		}
		if got := co.assignment(memberB).Owned; len(got) != 2 {
			t.Fatalf("b owns %v, want both partitions", got)
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"moves in", testutil.ToFloat64(h.m.GroupPartitionMoves.WithLabelValues(tGroup, tTopic, "in")), 2},
			{"moves out", testutil.ToFloat64(h.m.GroupPartitionMoves.WithLabelValues(tGroup, tTopic, "out")), 2},
			{"owned", testutil.ToFloat64(h.m.GroupPartitionsOwned.WithLabelValues(tGroup, tTopic)), 0},
			{"members", testutil.ToFloat64(h.m.GroupMembers.WithLabelValues(tGroup, tTopic)), 2},
		} {
			if c.got != c.want {
				t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		}
		// Idle and degraded for DegradeAfter: a tries again and takes its
		// share back from b (b answers the revocation).
		idle := time.Now()
		await(t, time.Minute, "a taking a partition again", func() bool {
			if rev := co.assignment(memberB).Revoking; len(rev) > 0 {
				co.apply(t, engine.GroupCommand{RevokeDone: &engine.GroupRevokeDone{Member: memberB, Generation: co.assignment(memberB).Generation, Partitions: rev}})
			}
			return len(co.assignment(memberA).Owned) == 1
		})
		// a counts its idle time from when its own view lost the partition,
		// a little before the coordinator's state showed it.
		if back := time.Since(idle); back < 25*time.Second {
			t.Fatalf("a took a partition back %v after losing its last, well before DegradeAfter (30s)", back)
		}
		if degraded() != 0 {
			t.Fatalf("spool_group_member_degraded = %v after a forgot its breakers, want 0", degraded())
		}
	})
}

// An app that crashes with a delivery in flight and comes back gets its
// messages at once, whatever the commit interval: when its last app
// leaves, the member hands its in-flight deliveries back and yields its
// partitions (commit, then RevokeDone, without waiting for the commit
// interval or the revoke drain bound), and takes them back when an app
// returns. (Suspected when the shared groups of the JetStream backend
// waited out the revoke bound with commit_interval 1h; the delivery
// driver does not.)
func TestReconnectWithLongCommitInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 1, tDLQ: 1})
		co := newInProcCoord()
		cfg := clusterGroup(co, 50*time.Millisecond)
		cfg.Membership.CommitInterval = time.Hour
		h := startGroup(t, eng, cfg)
		c := h.join(16, 4)
		await(t, 10*time.Second, "member a owns the partition", func() bool { return len(co.assignment(memberA).Owned) == 1 })
		eng.publish(tTopic, 0, msg("m0", nil))
		c.deliveries(1, 10*time.Second) // left in flight: the app crashes
		if err := h.g.post(context.Background(), leaveEvent{c.c}); err != nil {
			t.Fatal(err)
		}
		left := time.Now()
		time.Sleep(2 * time.Second) // sleep-ok: fake time; the app stays away for a few polls
		c2 := h.join(16, 4)
		eng.publish(tTopic, 0, msg("m1", nil))
		got := c2.deliveries(1, 60*time.Second)
		if took := time.Since(left); took > 5*time.Second {
			t.Fatalf("after a reconnect %s came %v later; want it within a few polls. Coordinator: %v", got[0].GetMessageId(), took, co.events())
		}
		if ev := co.events(); len(ev) < 2 || ev[0] != memberA+" commit "+tTopic+"/0@0 err=false" || ev[1] != memberA+" revokedone "+tTopic+"/0 err=false" {
			t.Fatalf("coordinator saw %v; want the yielded partition committed at 0, then RevokeDone", ev)
		}
	})
}

// Two sidecars' members of one group on one coordinator, with one and two
// apps connected: the group's consumers, as spool group describe shows
// them on either sidecar, are three. (Each sidecar counted only its own.)
func TestGroupConsumersCountedAcrossSidecars(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 2, tDLQ: 1})
		co := newInProcCoord()
		a := startGroup(t, eng, clusterGroup(co, 50*time.Millisecond))
		cfgB := clusterGroup(co, 50*time.Millisecond)
		cfgB.Membership.MemberPrefix, cfgB.Membership.Session = "b", "sb"
		b := startGroup(t, eng, cfgB)
		a.join(16, 2)
		b1 := b.join(16, 2)
		b2 := b.join(16, 2)
		await(t, 10*time.Second, "both sidecars' members joined", func() bool {
			co.mu.Lock()
			defer co.mu.Unlock()
			return len(co.st.Members(tGroup)) == 2
		})
		for i, h := range []*harness{a, b} {
			got := -1
			ok := awaitOr(10*time.Second, func() bool {
				snap, err := h.g.Snapshot(context.Background())
				if err != nil || len(snap.Topics) != 1 {
					return false
				}
				got = snap.Topics[0].Consumers
				return got == 3
			})
			if !ok {
				t.Fatalf("sidecar %c describes the group with %d consumers after 10s, want 3 (1 on sidecar a, 2 on b)", 'a'+i, got)
			}
			if snap, err := h.g.Snapshot(context.Background()); err != nil || snap.Consumers != i+1 {
				t.Fatalf("sidecar %c's own consumers: %d, %v; want %d (readiness counts its own)", 'a'+i, snap.Consumers, err, i+1)
			}
		}

		// b's apps leave: b yields, and the group has a's one app.
		for _, c := range []*tconsumer{b1, b2} {
			if err := b.g.post(context.Background(), leaveEvent{c.c}); err != nil {
				t.Fatal(err)
			}
		}
		await(t, 10*time.Second, "the group's consumers down to a's one", func() bool {
			snap, err := a.g.Snapshot(context.Background())
			return err == nil && len(snap.Topics) == 1 && snap.Topics[0].Consumers == 1
		})
	})
}

// A coordinator of a release before the count refuses commands carrying
// it (a rolling upgrade): the member joins and heartbeats without the
// count, takes its partitions as ever, and reports the count again once
// the coordinator takes it.
func TestConsumersCountLeftOutForAnOlderCoordinator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 2, tDLQ: 1})
		co := newInProcCoord()
		co.old = true
		h := startGroup(t, eng, clusterGroup(co, 50*time.Millisecond))
		h.join(16, 2)
		await(t, 10*time.Second, "member a owns both partitions", func() bool { return len(co.assignment(memberA).Owned) == 2 })
		count := func() uint32 {
			co.mu.Lock()
			defer co.mu.Unlock()
			for _, m := range co.st.Members(tGroup) {
				if m.ID == memberA {
					return m.Consumers
				}
			}
			return 99
		}
		if n := count(); n != 0 {
			t.Fatalf("count of apps at an older coordinator: %d, want none", n)
		}
		co.mu.Lock()
		co.old = false // the coordinator's node is upgraded
		co.mu.Unlock()
		await(t, 2*countsOffFor, "the count reported again", func() bool { return count() == 1 })
		if got := len(co.assignment(memberA).Owned); got != 2 {
			t.Fatalf("member a owns %d partitions, want 2", got)
		}
	})
}

// A coordinator that fails once while the member reports its count (its
// replica briefly stopped, a leader change) is not taken for one of an
// older release: the count stays reported.
func TestConsumersCountKeptThroughATransientFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 2, tDLQ: 1})
		co := newInProcCoord()
		h := startGroup(t, eng, clusterGroup(co, 50*time.Millisecond))
		h.join(16, 2)
		count := func() uint32 {
			co.mu.Lock()
			defer co.mu.Unlock()
			for _, m := range co.st.Members(tGroup) {
				if m.ID == memberA {
					return m.Consumers
				}
			}
			return 99
		}
		await(t, 10*time.Second, "the count reported", func() bool { return count() == 1 })
		co.mu.Lock()
		co.failCounted = 1
		co.mu.Unlock()
		await(t, 10*time.Minute, "the failure answered (the next heartbeat)", func() bool {
			co.mu.Lock()
			defer co.mu.Unlock()
			return co.failCounted == 0
		})
		// The heartbeats after the failure, sent again at once and every
		// third of the session, carry the count.
		for range 20 {
			time.Sleep(10 * time.Second) // sleep-ok: virtual time (synctest)
			if n := count(); n != 1 {
				t.Fatalf("count of apps after one failed heartbeat: %d, want 1 (taken for a coordinator of an older release)", n)
			}
		}
	})
}
