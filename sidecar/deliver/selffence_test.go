package deliver

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"pgregory.net/rapid"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
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
		time.Sleep(time.Until(ends)) // sleep-ok: fake time, to the instant the coordinator may expire a
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

// The self-fencing decision, in the machine alone (no goroutines, no
// clock): for any history of heartbeats the coordinator took (their send
// times, fed in views) and reads, the machine owns no partition at or
// after the last heartbeat's send time + the session timeout, wakes up at
// that instant, and a read that arrives later with an old heartbeat starts
// nothing; a newer heartbeat starts the partitions again.
func TestMachineSelfFenceDecision(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const session = 10 * time.Second
		cfg := GroupConfig{Name: tGroup, Subscriptions: []Subscription{testSub(tracker.Config{})}, CommitInterval: time.Second,
			Membership: Membership{SessionTimeout: session, RevokeTimeout: 15 * time.Second}}
		if err := cfg.validate(); err != nil {
			rt.Fatal(err)
		}
		mc := &machine{cfg: cfg, byTop: map[string]*sub{}, expired: map[refKey]sent{}, cluster: true}
		s, err := mc.newSub(cfg.Subscriptions[0], 1, make([]int64, 2), nil)
		if err != nil {
			rt.Fatal(err)
		}
		mc.subs, mc.byTop[tTopic] = []*sub{s}, s
		now := time.Unix(1_000_000, 0)
		var heard time.Time // the newest heartbeat send time fed
		gen := uint64(1)
		owns := func() bool {
			for _, p := range s.parts {
				if p.own != ownNone {
					return true
				}
			}
			return false
		}
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			ev := rapid.IntRange(0, 2).Draw(rt, "event")
			switch ev {
			case 0: // time passes
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(2*session)).Draw(rt, "advance")))
			case 1: // a read of the group, with the newest heartbeat taken so far
				lag := time.Duration(rapid.Int64Range(0, int64(2*session)).Draw(rt, "heartbeatAge"))
				// A member is joined (the read says so) only after a Join
				// was taken: there is always a first heartbeat.
				if h := now.Add(-lag); (heard.IsZero() || rapid.Bool().Draw(rt, "newHeartbeat")) && h.After(heard) {
					heard = h
				}
				gen++
				mc.assigned(now, &assignView{s: s, member: true, generation: gen, sharedGens: true, heardAt: heard,
					owned: []int32{0, 1}, committed: map[int32]engine.Position{}, starts: map[int32]int64{}})
			case 2: // the machine's round
				mc.work(now)
			}
			mc.acts = mc.acts[:0]
			late := !heard.IsZero() && !now.Before(heard.Add(session))
			if late {
				if ev == 1 && owns() {
					rt.Fatalf("a read at %v with a heartbeat sent at %v (%v ago) started the partitions", now, heard, now.Sub(heard))
				}
				mc.work(now)
				if owns() {
					rt.Fatalf("at %v, %v after the last heartbeat taken was sent, the member still owns a partition", now, now.Sub(heard))
				}
			}
			if owns() {
				if w := mc.nextWake(now); w.After(heard.Add(session)) {
					rt.Fatalf("owning partitions with a heartbeat sent at %v, the machine wakes at %v, after the session ends (%v)", heard, w, heard.Add(session))
				}
			}
		}
	})
}

// silentSetup returns a cluster member's machine that owns partition 0 of
// its subscription, heard by the coordinator at now with session timeout
// session, with a stream consumer c granted 4 credits, and m0's ledger
// claim answered (granted) but not yet applied.
func silentSetup(t *testing.T, now time.Time, session time.Duration) (*machine, *sub, *consumer, *claimJob) {
	t.Helper()
	led := ledger.NewMemory(nil)
	cfg := GroupConfig{Name: tGroup, Subscriptions: []Subscription{testSub(tracker.Config{})}, CommitInterval: time.Second,
		Membership: Membership{SessionTimeout: session, RevokeTimeout: 15 * time.Second}, Ledger: led, Owner: "node-1"}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	mc := &machine{cfg: cfg, byTop: map[string]*sub{}, expired: map[refKey]sent{}, cluster: true}
	s, err := mc.newSub(cfg.Subscriptions[0], 1, make([]int64, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	mc.subs, mc.byTop[tTopic] = []*sub{s}, s
	mc.assigned(now, &assignView{s: s, member: true, generation: 1, sharedGens: true, heardAt: now,
		owned: []int32{0}, committed: map[int32]engine.Position{}, starts: map[int32]int64{}})
	c := newConsumer("c0", ModeStream, nil, 4)
	mc.join(c)
	mc.settle(now, c, &spoolv1.SubscribeRequest{Credit: 4})
	var claim *claimJob
	for range 5 {
		mc.fetches(now)
		mc.work(now)
		for _, a := range mc.take(nil) {
			switch a.kind {
			case actFetch:
				if a.offset == 0 {
					mc.fetched(now, a.s, a.p, 0, []engine.Record{{ID: []byte("m0"), Value: []byte("v"), Offset: 0}}, nil)
				}
			case actClaim:
				claim = a.claim
			}
		}
		if claim != nil {
			break
		}
	}
	if claim == nil {
		t.Fatal("no claim emitted for m0")
	}
	pl := &pipeline{led: led, group: tGroup, owner: "node-1"}
	pl.claim(context.Background(), claim)
	if claim.err != nil || len(claim.res) != 1 || claim.res[0].Status != ledger.Granted {
		t.Fatalf("claim of m0: %+v (%v)", claim.res, claim.err)
	}
	return mc, s, c, claim
}

// A ledger claim answered after the member went silent delivers nothing:
// the claim was made while the member still owned the partition, but its
// answer arrives (here, as after a SIGSTOP that outlasted the session,
// before the machine's own round) once the session has run out. The
// partition stops first and the grant goes back to the ledger. (Before:
// claimed sent the grant to the app at once — in a fault run, a sidecar
// resumed from SIGSTOP delivered a message under token 1 that its new
// owner had already completed under token 2.)
func TestClaimAnsweredAfterSilenceDeliversNothing(t *testing.T) {
	const session = 10 * time.Second
	now := time.Unix(1_000_000, 0)
	mc, s, c, claim := silentSetup(t, now, session)
	mc.claimed(now.Add(session+time.Second), claim)
	for _, a := range mc.take(nil) {
		if a.kind == actSend && a.c == c {
			t.Fatalf("the grant answered after the session ran out was sent to the app")
		}
	}
	select {
	case q := <-c.out:
		if len(q.f.GetDeliveries()) > 0 {
			t.Fatalf("the grant answered after the session ran out was delivered: %v", q.f.GetDeliveries())
		}
	default:
	}
	if s.parts[0].own != ownNone {
		t.Fatalf("the partition is still owned after the session ran out")
	}
}

// recStream is the send side of an app's Subscribe stream, recording.
type recStream struct {
	grpc.BidiStreamingServer[spoolv1.SubscribeRequest, spoolv1.SubscribeResponse]
	sent chan *spoolv1.SubscribeResponse
}

func (r *recStream) Send(f *spoolv1.SubscribeResponse) error {
	r.sent <- f
	return nil
}

// sendQueued runs c's stream sender (sendFrames) with clock until it has
// sent or dropped the frame queued for c; it returns which.
func sendQueued(t *testing.T, c *consumer, clock time.Time) (sent, dropped *spoolv1.SubscribeResponse) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := &recStream{sent: make(chan *spoolv1.SubscribeResponse, 1)}
	drops := make(chan *spoolv1.SubscribeResponse, 1)
	done := make(chan struct{})
	go func() { // owned: awaited below
		defer close(done)
		sendFrames(ctx, st, c.out, func() time.Time { return clock }, func(f *spoolv1.SubscribeResponse) { drops <- f })
	}()
	defer func() { cancel(); <-done }()
	select {
	case sent = <-st.sent:
	case dropped = <-drops:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's sender neither sent nor dropped the queued frame")
	}
	return sent, dropped
}

// A delivery frame queued for the app's stream while the member still
// owned its partition does not leave once the member has fenced itself
// (a SIGSTOP past the session timeout, then SIGCONT): the sender drops it
// whether it runs before the group's loop has noticed the silence or
// after, and the machine takes the delivery back (its credit returns).
// Before: the sender sent what was queued, whatever the time — a sidecar
// resumed after its session timeout handed the app deliveries whose
// fencing token the new owner had already superseded.
func TestFrameQueuedBeforeFencingNeverLeaves(t *testing.T) {
	const session = 10 * time.Second
	for _, tc := range []struct {
		name        string
		after       time.Duration // from the last heartbeat taken to the sender's turn
		loopFirst   bool          // the group's loop runs (and self-fences) before the sender
		wantDropped bool
	}{
		{name: "within the session", after: session - time.Millisecond},
		{name: "past the session, loop not yet run", after: session + time.Second, wantDropped: true},
		{name: "past the session, partition already stopped", after: session + time.Second, loopFirst: true, wantDropped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			mc, s, c, claim := silentSetup(t, now, session)
			mc.claimed(now, claim)
			queued := 0
			for _, a := range mc.take(nil) {
				if a.kind == actSend && a.c == c && len(a.frame.GetDeliveries()) > 0 {
					if !c.send(a.frame, a.fenceAt) { // as the driver does
						t.Fatal("frame not queued")
					}
					queued++
				}
			}
			if queued != 1 {
				t.Fatalf("%d delivery frames queued for the app, want 1", queued)
			}
			later := now.Add(tc.after)
			if tc.loopFirst {
				mc.work(later)
				mc.take(nil)
			}
			sent, dropped := sendQueued(t, c, later)
			if !tc.wantDropped {
				if sent == nil {
					t.Fatalf("a frame within the session was dropped")
				}
				return
			}
			if sent != nil {
				t.Fatalf("%v after the last heartbeat taken (session %v), the frame queued before left: %v", tc.after, session, sent.GetDeliveries())
			}
			mc.frameDropped(later, c, dropped)
			mc.work(later)
			if c.credit != 4 || len(c.outstanding) != 0 || len(mc.fenced) != 0 {
				t.Fatalf("after the drop: credit %d (want 4), outstanding %d, kept fenced %d (want 0, 0)", c.credit, len(c.outstanding), len(mc.fenced))
			}
			if s.parts[0].own != ownNone {
				t.Fatalf("the partition is still owned after the session ran out")
			}
		})
	}
}

// A frame with no fence time (a member outside a cluster's groups) is sent
// without reading the clock: the sender's hot path pays for fencing only
// where fencing exists.
func TestUnfencedFrameReadsNoClock(t *testing.T) {
	out := make(chan queued, 1)
	out <- queued{f: &spoolv1.SubscribeResponse{}}
	ctx, cancel := context.WithCancel(context.Background())
	st := &recStream{sent: make(chan *spoolv1.SubscribeResponse, 1)}
	reads := 0
	done := make(chan struct{})
	go func() { // owned: awaited below
		defer close(done)
		sendFrames(ctx, st, out, func() time.Time { reads++; return time.Now() }, func(*spoolv1.SubscribeResponse) {})
	}()
	select {
	case <-st.sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the frame was not sent")
	}
	cancel()
	<-done
	if reads != 0 {
		t.Fatalf("the sender read the clock %d times for a frame with no fence time", reads)
	}
}
