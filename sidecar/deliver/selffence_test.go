package deliver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/ledger"
)

// cutCoord is the in-process coordinator that this sidecar can be cut off
// from (a network partition): while cut, its every call fails. The test's
// own commands (another member's, the driver's Expire) still apply.
type cutCoord struct {
	*inProcCoord
	cut atomic.Bool
}

var errCut = errors.New("coordinator unreachable")

func (c *cutCoord) Coordinate(ctx context.Context, cmd engine.GroupCommand) (engine.GroupResult, error) {
	if c.cut.Load() {
		return engine.GroupResult{}, errCut
	}
	return c.inProcCoord.Coordinate(ctx, cmd)
}

func (c *cutCoord) DescribeGroup(ctx context.Context, group string) (GroupView, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.inProcCoord.DescribeGroup(ctx, group)
}

// sessionEnds is when the coordinator may expire member.
func (c *inProcCoord) sessionEnds(t *testing.T, member string) time.Time {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.st.Members(tGroup) {
		if m.ID == member {
			return time.UnixMilli(m.SessionEndsMs())
		}
	}
	t.Fatalf("coordinator does not know %s", member)
	return time.Time{}
}

// A member cut off from its coordinator stops delivering on its own once
// its session timeout has passed since the last heartbeat the coordinator
// took (counted from when it was sent: the coordinator counts from when it
// arrived), so by the time the coordinator can expire it and grant its
// partitions to another member, it delivers nothing more (docs/groups.md,
// "Self-fencing"). What its app completes after that still reaches the
// ledger under its token, so the new owner does not deliver it again; what
// it does not complete is taken over by the new owner (a newer generation)
// with its attempt counted.
func TestSilentMemberFencesItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 1, tDLQ: 1})
		co := &cutCoord{inProcCoord: newInProcCoord()}
		led := &countLedger{Ledger: ledger.NewMemory(nil)}
		cfg := clusterGroup(co.inProcCoord, 500*time.Millisecond)
		cfg.Coordinator, cfg.Ledger, cfg.Owner = co, led, "node-a"
		cfg.Membership.SessionTimeout = 10 * time.Second
		h := startGroup(t, eng, cfg)
		c := h.join(16, 8)
		await(t, 10*time.Second, "member a owns the partition", func() bool { return len(co.assignment(memberA).Owned) == 1 })
		eng.publish(tTopic, 0, msg("m0", nil), msg("m1", nil))
		ds := c.deliveries(2, 10*time.Second)

		co.cut.Store(true)
		ends := co.sessionEnds(t, memberA)
		time.Sleep(time.Until(ends)) // fake time: to the instant the coordinator may expire a
		synctest.Wait()
		own := ownNone
		h.query(func(g *Group, _ time.Time) { own = g.mc.subs[0].parts[0].own })
		if own != ownNone {
			t.Errorf("at the end of its session at the coordinator, member a still owns the partition (state %d): it was not fenced", own)
		}

		// The coordinator expires a; b takes the partition in a newer generation.
		co.apply(t, engine.GroupCommand{Expire: &engine.GroupExpire{Member: memberA}})
		co.apply(t, engine.GroupCommand{Join: &engine.GroupJoin{Member: "b/" + tTopic, Session: "sb", Node: 2,
			Topics: []engine.GroupTopic{{Name: tTopic, Partitions: 1}}, SessionTimeoutMs: 300_000}})
		genB := co.assignment("b/" + tTopic).Generation

		// Nothing new is delivered by a.
		eng.publish(tTopic, 0, msg("m2", nil))
		if f := c.frame(3 * time.Second); f != nil && len(f.GetDeliveries()) > 0 {
			t.Errorf("member a delivered %v after it was fenced", f.GetDeliveries())
		}
		// a's app completes m0 after the fence: the completion reaches the ledger.
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(ds[0])}}})
		await(t, 10*time.Second, "m0's completion written to the ledger", func() bool { return len(led.completes()) > 0 })

		res, err := led.Claim(context.Background(), tGroup, "node-b", time.Now(), 0, []ledger.Claim{
			{ID: "m0", Lease: time.Now().Add(time.Minute), Generation: genB},
			{ID: "m1", Lease: time.Now().Add(time.Minute), Generation: genB},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Status != ledger.Done {
			t.Errorf("b's claim of m0 (completed by a's app after the fence): %+v, want done", res[0])
		}
		if res[1].Status != ledger.Granted || res[1].Attempts != 2 || res[1].Token != 2 {
			t.Errorf("b's claim of m1 (not completed): %+v, want granted at attempt 2, token 2", res[1])
		}
	})
}

// A member that learns it was expired (the coordinator no longer knows
// it; here without being cut off: the coordinator's clock ran ahead)
// stops its partitions at once, but leaves its deliveries' ledger entries
// as they are: its app's later completion of one still reaches the ledger
// under its token, and the new owner takes the others over with their
// attempts counted. (It handed them back uncounted before: the app's
// completion was refused and lost, and the new owner delivered the message
// again at attempt 1.)
func TestExpiredMemberKeepsCompletionsAndAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := newFakeEngine(map[string]int32{tTopic: 1, tDLQ: 1})
		co := newInProcCoord()
		led := &countLedger{Ledger: ledger.NewMemory(nil)}
		cfg := clusterGroup(co, 500*time.Millisecond)
		cfg.Ledger, cfg.Owner = led, "node-a"
		h := startGroup(t, eng, cfg)
		c := h.join(16, 8)
		await(t, 10*time.Second, "member a owns the partition", func() bool { return len(co.assignment(memberA).Owned) == 1 })
		eng.publish(tTopic, 0, msg("m0", nil), msg("m1", nil))
		ds := c.deliveries(2, 10*time.Second)

		co.mu.Lock()
		co.skew = 6 * time.Minute
		co.mu.Unlock()
		co.apply(t, engine.GroupCommand{Expire: &engine.GroupExpire{Member: memberA}})
		co.apply(t, engine.GroupCommand{Join: &engine.GroupJoin{Member: "b/" + tTopic, Session: "sb", Node: 2,
			Topics: []engine.GroupTopic{{Name: tTopic, Partitions: 1}}, SessionTimeoutMs: 300_000}})
		genB := co.assignment("b/" + tTopic).Generation
		await(t, 10*time.Second, "member a stops the partition", func() bool {
			own := ownActive
			h.query(func(g *Group, _ time.Time) { own = g.mc.subs[0].parts[0].own })
			return own == ownNone
		})
		n := len(led.completes())
		c.send(&spoolv1.SubscribeRequest{Acks: []*spoolv1.Ack{{Ref: refOf(ds[0])}}})
		if !awaitOr(5*time.Second, func() bool { return len(led.completes()) > n }) {
			t.Errorf("m0's completion by a's app after the stop never reached the ledger")
		}
		res, err := led.Claim(context.Background(), tGroup, "node-b", time.Now(), 0, []ledger.Claim{
			{ID: "m0", Lease: time.Now().Add(time.Minute), Generation: genB},
			{ID: "m1", Lease: time.Now().Add(time.Minute), Generation: genB},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Status != ledger.Done {
			t.Errorf("b's claim of m0 (completed by a's app after the stop): %+v, want done", res[0])
		}
		if res[1].Status != ledger.Granted || res[1].Attempts != 2 {
			t.Errorf("b's claim of m1 (not completed): %+v, want granted at attempt 2", res[1])
		}
	})
}
