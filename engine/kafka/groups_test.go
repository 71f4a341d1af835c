package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/spoolmq/spool/engine"
)

// holders is who delivers each partition, as the test's drivers claim
// them: a driver claims a partition when its view first shows it owned
// (not revoking) and gives it up just before its RevokeDone. A claim of a
// partition another driver holds is a partition owned twice.
type holders struct {
	mu      sync.Mutex
	of      map[int32]string
	doubles []string
}

func (h *holders) claim(p int32, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o, ok := h.of[p]; ok && o != id {
		h.doubles = append(h.doubles, fmt.Sprintf("partition %d granted to %s while %s holds it", p, id, o))
	}
	h.of[p] = id
}

func (h *holders) release(p int32, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.of[p] == id {
		delete(h.of, p)
	}
}

// counts are the partitions each driver holds.
func (h *holders) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, id := range h.of {
		out[id]++
	}
	return out
}

// driver does what the sidecar's delivery driver does with a member: it
// reads the group every 100 ms, and hands every revoked partition over
// (commits its position, then RevokeDone) unless hold says its handler is
// stuck. It runs until ctx ends.
type driver struct {
	b     *Backend
	group string
	id    string
	h     *holders
	hold  atomic.Bool
	// revokedAt is when the driver first saw a revocation.
	revokedAt atomic.Pointer[time.Time]
	// unknown: a read did not know the member.
	unknown atomic.Bool
	errs    chan error
}

func startDriver(t *testing.T, b *Backend, group, id string, h *holders, join engine.GroupJoin) *driver {
	t.Helper()
	d := &driver{b: b, group: group, id: id, h: h, errs: make(chan error, 100)}
	join.Member = id
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Coordinate(ctx, engine.GroupCommand{Group: group, Join: &join}); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *driver) run(ctx context.Context) {
	held := map[int32]bool{}
	for ctx.Err() == nil {
		v, err := d.b.DescribeGroup(ctx, d.group)
		if err == nil {
			a, ok := v.Assignment(d.group, d.id)
			if !ok {
				d.unknown.Store(true)
			}
			for _, tp := range a.Owned {
				if !slices.Contains(a.Revoking, tp) && !held[tp.Partition] {
					held[tp.Partition] = true
					d.h.claim(tp.Partition, d.id)
				}
			}
			for p := range held {
				if !slices.Contains(a.Owned, engine.GroupTopicPartition{Topic: "orders", Partition: p}) {
					delete(held, p) // lost or released without us: the holders map says so
					d.h.release(p, d.id)
				}
			}
			if len(a.Revoking) > 0 {
				now := time.Now()
				d.revokedAt.CompareAndSwap(nil, &now)
			}
			for _, tp := range a.Revoking {
				if d.hold.Load() {
					continue
				}
				c := &engine.GroupCommit{Member: d.id, Generation: a.Generation, TopicPartition: tp, Position: engine.GroupPosition{Next: int64(tp.Partition) + 10}}
				if _, err := d.b.Coordinate(ctx, engine.GroupCommand{Group: d.group, Commit: c}); err != nil && ctx.Err() == nil {
					d.errs <- fmt.Errorf("%s: commit %d: %w", d.id, tp.Partition, err)
					continue
				}
				d.h.release(tp.Partition, d.id)
				delete(held, tp.Partition)
				if _, err := d.b.Coordinate(ctx, engine.GroupCommand{Group: d.group, RevokeDone: &engine.GroupRevokeDone{Member: d.id, Generation: a.Generation,
					Partitions: []engine.GroupTopicPartition{tp}}}); err != nil && ctx.Err() == nil {
					d.errs <- fmt.Errorf("%s: revoke done %d: %w", d.id, tp.Partition, err)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // the driver's poll interval
		}
	}
}

// runDrivers runs the drivers until the test ends.
func runDrivers(t *testing.T, ds ...*driver) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Add(1)
		go func() { defer wg.Done(); d.run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, d := range ds {
			close(d.errs)
			for err := range d.errs {
				t.Error(err)
			}
		}
	})
}

func awaitCounts(t *testing.T, h *holders, want map[string]int, timeout time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := h.counts()
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: partitions held %v after %v, want %v", what, got, timeout, want)
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// Two sidecars (two backends) of one group share its partitions through
// the Kafka consumer group: each partition is held by one at a time
// through a join, a yield (the member hands everything over and leaves
// the Kafka group) and its return; Kafka's own view lists both members;
// a commit of a partition the member does not own is fenced; the
// positions committed at each handover are the group's Kafka offsets.
func TestGroupSharedAcrossBackends(t *testing.T) {
	b1 := open(t)
	b2 := open(t)
	for _, b := range []*Backend{b1, b2} {
		if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 6}); err != nil {
			t.Fatal(err)
		}
	}
	h := &holders{of: map[int32]string{}}
	join := engine.GroupJoin{Topics: []engine.GroupTopic{{Name: "orders", Partitions: 6}}, SessionTimeoutMs: 3000, RevokeTimeoutMs: 10000, Consumers: 2}
	d1 := startDriver(t, b1, "workers", "s1/orders", h, join)
	runDrivers(t, d1)
	awaitCounts(t, h, map[string]int{"s1/orders": 6}, 30*time.Second, "the only member holds every partition")

	d2 := startDriver(t, b2, "workers", "s2/orders", h, join)
	runDrivers(t, d2)
	awaitCounts(t, h, map[string]int{"s1/orders": 3, "s2/orders": 3}, 30*time.Second, "a second member takes half")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(b1.cl)
	described, err := adm.DescribeGroups(ctx, prefix(t)+"workers")
	if err != nil {
		t.Fatal(err)
	}
	if g := described[prefix(t)+"workers"]; len(g.Members) != 2 || g.Protocol != "cooperative-sticky" {
		t.Fatalf("Kafka's view of the group: %d members, protocol %q; want 2, cooperative-sticky", len(g.Members), g.Protocol)
	}
	// Handed-over partitions were committed by their previous owner.
	pos, err := b1.LoadPositions("workers", "orders")
	if err != nil {
		t.Fatal(err)
	}
	for p, ps := range pos {
		if ps.Next != int64(p)+10 {
			t.Errorf("partition %d committed at %d, want %d", p, ps.Next, p+10)
		}
	}
	if len(pos) != 3 {
		t.Errorf("positions of %d partitions committed, want the 3 handed over: %v", len(pos), pos)
	}
	v, err := b2.DescribeGroup(ctx, "workers")
	if err != nil {
		t.Fatal(err)
	}
	// The group's apps as b2 sees them: its own member's two, and one for
	// the other sidecar's member (Kafka carries no count; it is in the
	// group only while an app is connected).
	apps := uint32(0)
	for _, m := range v.Members("workers") {
		apps += m.Consumers
	}
	if apps != 3 {
		t.Errorf("the group's consumers as b2 describes them: %d, want 3 (its 2, and 1 for the other member): %+v", apps, v.Members("workers"))
	}
	mine, _ := v.Assignment("workers", "s2/orders")
	var notMine int32 = -1
	for p := range int32(6) {
		if !slices.Contains(mine.Owned, engine.GroupTopicPartition{Topic: "orders", Partition: p}) {
			notMine = p
			break
		}
	}
	_, err = b2.Coordinate(ctx, engine.GroupCommand{Group: "workers", Commit: &engine.GroupCommit{Member: "s2/orders", Generation: mine.Generation,
		TopicPartition: engine.GroupTopicPartition{Topic: "orders", Partition: notMine}, Position: engine.GroupPosition{Next: 99}}})
	if !errors.Is(err, engine.ErrGroupFenced) {
		t.Fatalf("commit of partition %d, not owned: %v; want ErrGroupFenced", notMine, err)
	}

	// s1's app goes: it yields, hands its partitions over and leaves the
	// Kafka group; then it comes back and takes its half again.
	if _, err := b1.Coordinate(ctx, engine.GroupCommand{Group: "workers", Heartbeat: &engine.GroupHeartbeat{Member: "s1/orders", Yield: true}}); err != nil {
		t.Fatal(err)
	}
	awaitCounts(t, h, map[string]int{"s2/orders": 6}, 30*time.Second, "the yielding member hands everything over")
	if _, err := b1.Coordinate(ctx, engine.GroupCommand{Group: "workers", Heartbeat: &engine.GroupHeartbeat{Member: "s1/orders"}}); err != nil {
		t.Fatal(err)
	}
	awaitCounts(t, h, map[string]int{"s1/orders": 3, "s2/orders": 3}, 30*time.Second, "the member back takes half again")
	if _, err := b1.Coordinate(ctx, engine.GroupCommand{Group: "workers", Leave: &engine.GroupLeave{Member: "s1/orders"}}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	for p, id := range h.of {
		if id == "s1/orders" {
			delete(h.of, p) // it left: the sidecar drained and committed first
		}
	}
	h.mu.Unlock()
	awaitCounts(t, h, map[string]int{"s2/orders": 6}, 30*time.Second, "a member that left loses its partitions at once")
	h.mu.Lock()
	if len(h.doubles) > 0 {
		t.Errorf("partitions owned twice: %v", h.doubles)
	}
	h.mu.Unlock()

	// An offset reset is refused while the group has a member, and
	// accepted once it has none.
	reset := engine.GroupCommand{Group: "workers", Reset: &engine.GroupReset{Topic: "orders", Next: []engine.GroupPartitionNext{{Partition: 0, Next: 1}, {Partition: 5, Next: 2}}}}
	if _, err := b1.Coordinate(ctx, reset); !errors.Is(err, engine.ErrGroupActive) {
		t.Fatalf("offset reset while s2 is a member: %v; want ErrGroupActive", err)
	}
	if _, err := b2.Coordinate(ctx, engine.GroupCommand{Group: "workers", Leave: &engine.GroupLeave{Member: "s2/orders"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b1.Coordinate(ctx, reset); err != nil {
		t.Fatalf("offset reset of a group without members: %v", err)
	}
	pos, err = b1.LoadPositions("workers", "orders")
	if err != nil || pos[0].Next != 1 || len(pos[0].Done) != 0 || pos[5].Next != 2 {
		t.Fatalf("positions after the reset: %v, %v; want partition 0 at 1, 5 at 2", pos, err)
	}
}

// A member whose handlers are stuck (it never says RevokeDone) holds its
// revoked partitions for the revoke timeout, no longer: then they are
// released and the new member gets them.
func TestGroupRevokeBound(t *testing.T) {
	b1 := open(t)
	b2 := open(t)
	for _, b := range []*Backend{b1, b2} {
		if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
			t.Fatal(err)
		}
	}
	h := &holders{of: map[int32]string{}}
	const bound = 2 * time.Second
	join := engine.GroupJoin{Topics: []engine.GroupTopic{{Name: "orders", Partitions: 4}}, SessionTimeoutMs: 3000, RevokeTimeoutMs: bound.Milliseconds()}
	d1 := startDriver(t, b1, "workers", "s1/orders", h, join)
	d1.hold.Store(true)
	runDrivers(t, d1)
	awaitCounts(t, h, map[string]int{"s1/orders": 4}, 30*time.Second, "the only member holds every partition")

	d2 := startDriver(t, b2, "workers", "s2/orders", h, join)
	runDrivers(t, d2)
	deadline := time.Now().Add(30 * time.Second)
	for h.counts()["s2/orders"] != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the new member did not get its half within 30 s of joining: %v (a stuck member blocks the rebalance)", h.counts())
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
	got := time.Now()
	revoked := d1.revokedAt.Load()
	if revoked == nil {
		t.Fatal("the stuck member never saw a revocation")
	}
	took := got.Sub(*revoked)
	t.Logf("revocation seen to grant: %v (bound %v)", took.Round(time.Millisecond), bound)
	// The driver sees the revocation up to a poll after it began (more on
	// a loaded machine); without the wait the grant follows within a
	// rebalance, a few hundred milliseconds.
	if took < bound/2 {
		t.Fatalf("the partitions moved %v after the revocation, before the revoke timeout %v: the stuck member was not waited for", took, bound)
	}
	if took > bound+10*time.Second {
		t.Fatalf("the partitions moved %v after the revocation: far past the revoke timeout %v", took, bound)
	}
}

// Commits of a member during rebalances that do not take its partitions
// away are not fenced: a commit racing a cooperative rebalance meets
// ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS while the member still owns
// the partition, and is committed again in the generation the member gets.
// (Taken as fenced, the sidecar stopped the partition and delivered a
// message again.)
func TestGroupCommitDuringRebalance(t *testing.T) {
	var bs []*Backend
	for range 3 {
		b := open(t)
		if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 6}); err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	h := &holders{of: map[int32]string{}}
	join := engine.GroupJoin{Topics: []engine.GroupTopic{{Name: "orders", Partitions: 6}}, SessionTimeoutMs: 3000, RevokeTimeoutMs: 10000}
	d1 := startDriver(t, bs[0], "workers", "s1/orders", h, join)
	runDrivers(t, d1)
	awaitCounts(t, h, map[string]int{"s1/orders": 6}, 30*time.Second, "the only member holds every partition")

	// s1 commits every partition it holds, over and over, while two more
	// members join.
	ctx, cancel := context.WithCancel(context.Background())
	type failure struct {
		p   int32
		err error
	}
	failures := make(chan failure, 10000)
	commits := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for next := int64(1); ctx.Err() == nil; next++ {
			h.mu.Lock()
			var mine []int32
			for p, id := range h.of {
				if id == "s1/orders" {
					mine = append(mine, p)
				}
			}
			h.mu.Unlock()
			for _, p := range mine {
				c := &engine.GroupCommit{Member: "s1/orders", TopicPartition: engine.GroupTopicPartition{Topic: "orders", Partition: p}, Position: engine.GroupPosition{Next: next}}
				if _, err := bs[0].Coordinate(ctx, engine.GroupCommand{Group: "workers", Commit: c}); err != nil && ctx.Err() == nil {
					failures <- failure{p, err}
				}
				commits++
			}
		}
	}()
	d2 := startDriver(t, bs[1], "workers", "s2/orders", h, join)
	runDrivers(t, d2)
	awaitCounts(t, h, map[string]int{"s1/orders": 3, "s2/orders": 3}, 30*time.Second, "a second member takes half")
	d3 := startDriver(t, bs[2], "workers", "s3/orders", h, join)
	runDrivers(t, d3)
	awaitCounts(t, h, map[string]int{"s1/orders": 2, "s2/orders": 2, "s3/orders": 2}, 30*time.Second, "a third member takes a third")
	cancel()
	<-done
	close(failures)
	h.mu.Lock()
	kept := map[int32]bool{}
	for p, id := range h.of {
		if id == "s1/orders" {
			kept[p] = true
		}
	}
	h.mu.Unlock()
	t.Logf("%d commits by s1 through two rebalances; it kept partitions %v", commits, slices.Sorted(maps.Keys(kept)))
	for f := range failures {
		if kept[f.p] {
			t.Errorf("commit of partition %d, which s1 kept throughout: %v", f.p, f.err)
		}
	}
}

// A member cut off from Kafka longer than its session timeout loses its
// partitions to the others; once it is back, its next read leaves it out
// (as the coordinator does after an expiry: the sidecar stops every
// partition, forgetting what was in flight, and joins again), and then it
// gets its share again, starting from the committed positions.
func TestGroupLostSession(t *testing.T) {
	var cut cutter
	b1 := open(t, func(c *Config) { c.dial = cut.dial })
	b2 := open(t)
	for _, b := range []*Backend{b1, b2} {
		if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
			t.Fatal(err)
		}
	}
	h := &holders{of: map[int32]string{}}
	join := engine.GroupJoin{Topics: []engine.GroupTopic{{Name: "orders", Partitions: 4}}, SessionTimeoutMs: 3000, RevokeTimeoutMs: 5000}
	d1 := startDriver(t, b1, "workers", "s1/orders", h, join)
	runDrivers(t, d1)
	awaitCounts(t, h, map[string]int{"s1/orders": 4}, 30*time.Second, "the only member holds every partition")
	d2 := startDriver(t, b2, "workers", "s2/orders", h, join)
	runDrivers(t, d2)
	awaitCounts(t, h, map[string]int{"s1/orders": 2, "s2/orders": 2}, 30*time.Second, "a second member takes half")

	cut.set(true)
	awaitCounts(t, h, map[string]int{"s2/orders": 4}, 30*time.Second, "s1 cut off: its session ends and s2 takes everything")
	if d1.unknown.Load() {
		t.Fatal("s1's reads left it out before it was back")
	}
	cut.set(false)
	eventually(t, 30*time.Second, "s1 back: a read leaves it out once (it stops everything)", d1.unknown.Load)
	awaitCounts(t, h, map[string]int{"s1/orders": 2, "s2/orders": 2}, 30*time.Second, "s1 takes its half again")
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// cutter dials brokers, and cuts the connections when told: while cut,
// dials fail and the connections it made are closed.
type cutter struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("connection cut by the test")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, host)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) set(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for _, conn := range c.conns {
			_ = conn.Close()
		}
		c.conns = nil
	}
}
