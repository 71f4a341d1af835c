package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testredis"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// The group of TestClusterGroupScaleWithLedger: a keyed topic of
// scalePartitions partitions, scaleKeys keys, the Redis ledger on.
const (
	scalePartitions = 12
	scaleKeys       = 300
	// scaleSettle is how long every partition must have been delivered by
	// one sidecar for the group to count as settled after a change.
	scaleSettle = time.Second
)

func scaleConfig(redisAddr string) string {
	return fmt.Sprintf(`
redis:
  addrs: [%q]
topics:
  - name: orders
    partitions: %d
subscriptions:
  - topic: orders
    group: verify
    ordering: key
    visibility_timeout: 5s
`, redisAddr, scalePartitions)
}

// appEvent is one line of one app's record, with the sidecar it consumes through.
type appEvent struct {
	event
	node int // index in the cluster's nodes
}

// stamp is one delivery of a partition: when, and through which sidecar.
type stamp struct {
	at   time.Time
	node int
}

// scaleApps is one testapp process per sidecar, all in group verify, and
// everything they recorded (start and done lines with partition, offset,
// fencing token and time).
type scaleApps struct {
	t      *testing.T
	dir    string
	apps   map[int]*app // running, by node index
	tails  []*recordTail
	nodeOf []int // of each tail
	events []appEvent
	recent map[int32][]stamp // starts of the last 2 s, per partition
}

func newScaleApps(t *testing.T) *scaleApps {
	return &scaleApps{t: t, dir: t.TempDir(), apps: map[int]*app{}, recent: map[int32][]stamp{}}
}

// start starts an app consuming group verify through node i, with more
// testapp flags if given.
func (sa *scaleApps) start(i int, n *node, flags ...string) {
	sa.t.Helper()
	rec := filepath.Join(sa.dir, fmt.Sprintf("app-n%d-%d", i+1, len(sa.tails)))
	sa.apps[i] = startApp(sa.t, n, rec, append([]string{"--group", "verify", "--topics", "orders", "--concurrency", "8"}, flags...)...)
	sa.tails = append(sa.tails, &recordTail{path: rec})
	sa.nodeOf = append(sa.nodeOf, i)
}

// poll reads what the apps recorded since the last call.
func (sa *scaleApps) poll() {
	now := time.Now()
	for k, tl := range sa.tails {
		for _, e := range tl.more(sa.t) {
			sa.events = append(sa.events, appEvent{event: e, node: sa.nodeOf[k]})
			if e.kind == "start" {
				sa.recent[e.partition] = append(sa.recent[e.partition], stamp{at: e.at, node: sa.nodeOf[k]})
			}
		}
	}
	for p, ss := range sa.recent {
		sa.recent[p] = slices.DeleteFunc(ss, func(s stamp) bool { return now.Sub(s.at) > 2*time.Second })
	}
}

// owners is, when the group is settled, the sidecar delivering each
// partition: every partition was delivered in the last scaleSettle, each
// by one sidecar only. nil when not settled.
func (sa *scaleApps) owners() map[int32]int {
	sa.poll()
	since := time.Now().Add(-scaleSettle)
	out := map[int32]int{}
	for p := range int32(scalePartitions) {
		owner := -1
		for _, s := range sa.recent[p] {
			if s.at.Before(since) {
				continue
			}
			if owner >= 0 && s.node != owner {
				return nil
			}
			owner = s.node
		}
		if owner < 0 {
			return nil
		}
		out[p] = owner
	}
	return out
}

// awaitSettled waits until the group is settled with exactly the sidecars
// want delivering, with partition counts at most one apart: the
// coordinator's promise for a group at rest (while partitions are still
// being handed over, the counts can be further apart for a while, so a
// group that never gets there fails here, by the timeout). It returns
// when it settled.
func (sa *scaleApps) awaitSettled(want []int, timeout time.Duration, what string) time.Time {
	sa.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		own := sa.owners()
		count := map[int]int{}
		for _, n := range own {
			count[n]++
		}
		var counts []int
		for _, n := range want {
			counts = append(counts, count[n])
		}
		if own != nil && len(count) == len(want) && slices.Min(counts) > 0 && slices.Max(counts)-slices.Min(counts) <= 1 {
			at := time.Now()
			sa.t.Logf("%s: settled at %s, partitions per sidecar %v (sidecars %v)", what, at.Format("15:04:05.000"), counts, nodeNames(want))
			return at
		}
		if time.Now().After(deadline) {
			sa.t.Fatalf("timed out after %v waiting for: %s (want sidecars %v, each partition delivered by one of them, counts one apart); last owners by partition %v (nil: some partition delivered by two sidecars or none in the last %v)",
				timeout, what, nodeNames(want), own, scaleSettle)
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// nodeNames names nodes by index: n1, n2, ...
func nodeNames(idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, fmt.Sprintf("n%d", i+1))
	}
	return out
}

// positionSampler reads the group's committed positions and the
// partitions' raft leaders through one sidecar's admin API every 200 ms,
// from start until stopped.
type positionSampler struct {
	mu      sync.Mutex
	samples []positionSample
	errs    int
	stop    chan struct{}
	done    chan struct{}
}

type positionSample struct {
	at        time.Time
	committed map[int32]int64
	leaders   map[int32]string // of topic orders ("" unknown)
}

func samplePositions(t *testing.T, n *node) *positionSampler {
	t.Helper()
	ps := &positionSampler{stop: make(chan struct{}), done: make(chan struct{})}
	admin := n.adminClient()
	go func() {
		defer close(ps.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := admin.ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: "verify"})
			var topics *spoolv1.ListTopicsResponse
			if err == nil {
				topics, err = admin.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
			}
			cancel()
			ps.mu.Lock()
			if err != nil {
				ps.errs++
			} else {
				s := positionSample{at: time.Now(), committed: map[int32]int64{}, leaders: map[int32]string{}}
				for _, g := range resp.GetGroups() {
					for _, p := range g.GetPartitions() {
						s.committed[p.GetPartition()] = p.GetCommittedOffset()
					}
				}
				for _, ti := range topics.GetTopics() {
					if ti.GetName() == "orders" {
						for _, p := range ti.GetPartitions() {
							s.leaders[p.GetPartition()] = p.GetLeader()
						}
					}
				}
				ps.samples = append(ps.samples, s)
			}
			ps.mu.Unlock()
			select {
			case <-tick.C:
			case <-ps.stop:
				return
			}
		}
	}()
	t.Cleanup(ps.finish)
	return ps
}

func (ps *positionSampler) finish() {
	select {
	case <-ps.stop:
	default:
		close(ps.stop)
	}
	<-ps.done
}

// scaleStep is one change to the group (or to the cluster under it): from
// when it began until the group settled again.
type scaleStep struct {
	name     string
	from, to time.Time
	// group: the group's membership changed. Its partitions that did not
	// move, with a steady raft leader, must not pause: the longest delay
	// of their messages stays under scaleUnmovedBound.
	group bool
	// maxMoved bounds the longest delay of the partitions that moved (0:
	// no bound).
	maxMoved time.Duration
}

// Bounds on pauses, several times what was measured (docs/groups.md, "What
// a rebalance costs"), so that a loaded machine does not trip them while a
// pause of a whole drain_timeout (5 s here) or a session timeout does.
const (
	scaleUnmovedBound = 3 * time.Second
	scaleMovedBound   = 3 * time.Second
)

// clusterNodeID is the id the cluster gave n (ClusterStatus).
func clusterNodeID(t *testing.T, n *node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := n.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st.GetNodeId()
}

// awaitReplicasSettled waits until the nodes given hold replicas in counts
// at most one apart and nothing moves.
func awaitReplicasSettled(t *testing.T, nodes []*node, timeout time.Duration, what string) {
	t.Helper()
	eventually(t, timeout, what, func() bool {
		var counts []int
		for _, n := range nodes {
			counts = append(counts, seriesCount(n, `spool_partition_leader{`))
		}
		return slices.Min(counts) > 0 && slices.Max(counts)-slices.Min(counts) <= 1 &&
			metricValue(t, nodes[0], "spool_cluster_partitions_moving") == 0
	})
}

// decommission takes a node out of the cluster through via's admin API and
// waits until it is removed and nothing moves.
func decommission(t *testing.T, via *node, id string, timeout time.Duration) {
	t.Helper()
	admin := via.adminClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := admin.DecommissionNode(ctx, &spoolv1.DecommissionNodeRequest{NodeId: id})
	cancel()
	if err != nil {
		t.Fatalf("decommission node %s: %v", id, err)
	}
	eventually(t, timeout, "node "+id+" removed from the cluster and nothing moving", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := admin.ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
		if err != nil || st.GetPartitionsMoving() != 0 {
			return false
		}
		for _, nd := range st.GetNodes() {
			if nd.GetId() == id {
				return false
			}
		}
		return true
	})
}

// ledgerStates reads the ledger's state of every message of group from
// Redis: id → in_progress, released, done or dead (docs/ledger.md, "Keys").
func ledgerStates(t *testing.T, r *testredis.Server, group string) map[string]string {
	t.Helper()
	prefix := "spool:l:{" + group + "}:"
	var keys []string
	cursor := "0"
	for {
		reply, err := r.Do("SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
		if err != nil {
			t.Fatalf("redis SCAN: %v", err)
		}
		parts, ok := reply.([]any)
		if !ok || len(parts) != 2 {
			t.Fatalf("redis SCAN: unexpected reply %v", reply)
		}
		cursor, _ = parts[0].(string)
		batch, _ := parts[1].([]any)
		for _, k := range batch {
			keys = append(keys, k.(string))
		}
		if cursor == "0" {
			break
		}
	}
	out := map[string]string{}
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), 500)]
		keys = keys[len(chunk):]
		reply, err := r.Do(append([]string{"MGET"}, chunk...)...)
		if err != nil {
			t.Fatalf("redis MGET: %v", err)
		}
		vals, _ := reply.([]any)
		for i, v := range vals {
			if s, ok := v.(string); ok {
				state, _, _ := strings.Cut(s, "\n")
				out[strings.TrimPrefix(chunk[i], prefix)] = state
			}
		}
	}
	return out
}

// A group of three sidecars with an app each (testapp processes), under
// steady keyed load through two of them, with the Redis ledger on: scaled
// to five (two spoold join the cluster and replicas spread to them, then
// their apps join the group), back to three (n5's sidecar stopped while
// its app stays connected: it drains, commits and leaves; then n4's
// sidecar and app stopped together: the app's stream closes first and the
// member yields; each stopped node is then decommissioned, since its
// replicas must move before the next stop leaves a partition without a
// majority), and n3 killed (SIGKILL) and started again.
//
// Asserted, over the whole run:
//   - nothing lost: every acknowledged publish is completed by an app;
//   - no message completed twice by the apps, except what the ledger does
//     not promise after a kill -9 (docs/ledger.md, "What the ledger does
//     not guarantee"): a message the killed sidecar's app completed whose
//     Complete had not reached Redis. Each such message was first completed
//     by the killed sidecar's app, was not done in the ledger right after
//     the kill, and was completed once more after it with a higher fencing
//     token;
//   - per-key order: for each key, the first deliveries of its messages
//     come in offset order, and no two messages of a key are at the apps at
//     once (a start waits for the previous start's done);
//   - committed positions (ListGroups, read every 200 ms through n1)
//     never go backwards, and end at the end of every partition;
//   - when the group settles, every partition is delivered by one sidecar
//     and partitions per sidecar are one apart;
//   - a change of the group does not pause the partitions it does not move
//     (their raft leader steady), and a leave or a join moves partitions
//     within scaleMovedBound (a leaving sidecar does not sit out its drain
//     timeout).
//
// Measured and logged: for each step, the longest pause and delay of the
// partitions that did not move (delivered by the same sidecar throughout)
// and of those that moved (logPauses).
func TestClusterGroupScaleWithLedger(t *testing.T) {
	start := time.Now()
	r := testredis.Start(t)
	sc := startClusterWith(t, 3, "  produce_timeout: 3s\n  group_session_timeout: 3s\n", scaleConfig(r.Addr()))
	awaitPlaced(t, sc.nodes[0])
	t.Logf("cluster of 3 up, topic placed: %v", time.Since(start).Round(time.Millisecond))
	positions := samplePositions(t, sc.nodes[0])
	sa := newScaleApps(t)
	for i := range 3 {
		sa.start(i, sc.nodes[i])
	}
	l := startLoadWith(t, sc.nodes[:2], scaleKeys, 8*time.Millisecond)
	var steps []scaleStep
	sa.awaitSettled([]int{0, 1, 2}, 60*time.Second, "three sidecars share the group")

	// Steady state, for reference: nothing changes.
	from := time.Now()
	l.awaitMore(2, 250, 30*time.Second, "250 more acknowledged publishes per producer in steady state")
	sa.poll()
	steps = append(steps, scaleStep{name: "steady state (nothing changes)", from: from, to: time.Now()})

	// 3 → 5. The two spoold join the cluster first and replicas spread to
	// them (the group does not change: their apps are not there yet, and a
	// member joins only once an app consumes); then their apps start and
	// the group takes them in.
	from = time.Now()
	sc.addNode()
	sc.addNode()
	awaitReplicasSettled(t, sc.nodes, 90*time.Second, "replicas spread over the five nodes")
	steps = append(steps, scaleStep{name: "n4, n5 join the cluster, replicas spread (group unchanged)", from: from, to: sa.awaitSettled([]int{0, 1, 2}, 30*time.Second, "the group unchanged after the replicas spread")})
	from = time.Now()
	sa.start(3, sc.nodes[3])
	sa.start(4, sc.nodes[4])
	steps = append(steps, scaleStep{name: "scale 3 → 5: apps of n4, n5 join", from: from, group: true, maxMoved: scaleMovedBound,
		to: sa.awaitSettled([]int{0, 1, 2, 3, 4}, 60*time.Second, "five sidecars share the group")})

	// 5 → 3, one at a time. n5's sidecar is stopped first while its app
	// stays connected (SIGTERM: it drains, commits and leaves: its
	// partitions are granted at once); n4's sidecar and app get SIGTERM
	// together (a pod deleted: the app's stream closes first, the member
	// yields and its partitions are revoked, then it leaves). Each stopped
	// node is then decommissioned (its replicas re-created on the others),
	// so that stopping the next one leaves every partition a majority.
	for _, i := range []int{4, 3} {
		n, a := sc.nodes[i], sa.apps[i]
		id := clusterNodeID(t, n)
		from = time.Now()
		name := fmt.Sprintf("scale down: n%d stopped, its app still connected (drain, commit, leave)", i+1)
		if i == 4 {
			n.stop()
			a.signal(syscall.SIGTERM)
		} else {
			name = fmt.Sprintf("scale down: n%d and its app stopped together", i+1)
			a.signal(syscall.SIGTERM)
			n.stop()
		}
		t.Logf("n%d stopped in %v", i+1, time.Since(from).Round(time.Millisecond))
		a.waitExit(20 * time.Second)
		delete(sa.apps, i)
		want := []int{0, 1, 2, 3}[:i]
		steps = append(steps, scaleStep{name: name, from: from, group: true, maxMoved: scaleMovedBound,
			to: sa.awaitSettled(want, 60*time.Second, fmt.Sprintf("n%d left: %d sidecars share the group", i+1, len(want)))})
		from = time.Now()
		decommission(t, sc.nodes[0], id, 90*time.Second)
		steps = append(steps, scaleStep{name: fmt.Sprintf("n%d decommissioned, its replicas re-created (group unchanged)", i+1), from: from,
			to: sa.awaitSettled(want, 30*time.Second, fmt.Sprintf("the group unchanged after n%d was decommissioned", i+1))})
	}
	sc.nodes = sc.nodes[:3]

	// kill -9 of n3: its partitions move when its session times out (3 s);
	// then it is started again and takes its share back.
	l.awaitMore(2, 100, 30*time.Second, "100 more acknowledged publishes per producer before the kill")
	from = time.Now()
	killed := from
	sc.nodes[2].kill()
	atKill := ledgerStates(t, r, "verify")
	steps = append(steps, scaleStep{name: "kill -9 of n3 (its partitions move after the session timeout)", from: from, group: true,
		to: sa.awaitSettled([]int{0, 1}, 60*time.Second, "n3 killed: 2 sidecars share the group")})
	from = time.Now()
	sc.nodes[2].start()
	steps = append(steps, scaleStep{name: "n3 started again (its app reconnects, it takes its share back)", from: from, group: true,
		to: sa.awaitSettled([]int{0, 1, 2}, 60*time.Second, "n3 back: 3 sidecars share the group")})
	l.awaitMore(2, 100, 30*time.Second, "100 more acknowledged publishes per producer at the end")

	acks, failures := l.finish()
	// Nothing lost: wait until every acknowledged publish is completed and
	// the group committed every partition to its end; past the deadline,
	// the checks below say what is missing.
	done := map[string]bool{}
	caughtUp := func() bool {
		sa.poll()
		for _, e := range sa.events {
			if e.kind == "done" {
				done[e.id] = true
			}
		}
		for _, a := range acks {
			if !done[a.id] {
				return false
			}
		}
		c, end := committedPositions(t, sc.nodes[0])
		for p, e := range end {
			if c[p] < e {
				return false
			}
		}
		return len(end) == scalePartitions
	}
	for deadline := time.Now().Add(60 * time.Second); !caughtUp(); {
		if time.Now().After(deadline) {
			c, end := committedPositions(t, sc.nodes[0])
			t.Errorf("60 s after the load stopped, not every acknowledged publish is completed or the group has not committed to the end (committed %v, ends %v)", c, end)
			break
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
	positions.finish()
	sa.poll()
	t.Logf("%d acknowledged publishes (%d ids with a failed attempt); longest producer stall %v; %d record lines",
		len(acks), len(failures), longestGap(acks).Round(time.Millisecond), len(sa.events))

	checkScaleRun(t, sa.events, acks, failures, 2, killed, atKill)
	checkPositions(t, positions)
	logPauses(t, steps, sa.events, acks, positions)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// killWindow bounds how long before a kill -9 a message the killed
// sidecar's app completed may still be completed again: its handler ran
// at the kill, or its completion waited in the sidecar for the ledger's
// next write (delivery.ledger_write_delay, 5 ms, plus a Redis round trip;
// generous here for a loaded machine).
const killWindow = time.Second

// checkScaleRun checks the apps' records against the acknowledged
// publishes: nothing lost, nothing completed twice (but what a kill -9 of
// sidecar killedNode at killedAt may complete again: messages its app
// completed that were not done in the ledger right after the kill,
// atKill), per-key order.
func checkScaleRun(t *testing.T, events []appEvent, acks []ack, failures map[string][]string, killedNode int, killedAt time.Time, atKill map[string]string) {
	t.Helper()
	evs := slices.Clone(events)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })

	// Nothing lost; what was delivered at an acknowledged position is that
	// message. (With the ledger a message stored twice — a publish retried
	// after an error — is handed to the apps once: the other copy is a
	// dedupe hit.)
	completions := map[string][]appEvent{}
	type pos struct {
		partition int32
		offset    int64
	}
	at := map[pos]string{}
	for _, e := range evs {
		switch e.kind {
		case "done":
			completions[e.id] = append(completions[e.id], e)
		case "start":
			p := pos{e.partition, e.offset}
			if prev, ok := at[p]; ok && prev != e.id {
				t.Errorf("partition %d offset %d delivered as %s and as %s", e.partition, e.offset, prev, e.id)
			}
			at[p] = e.id
		}
	}
	lost := 0
	for _, a := range acks {
		id, delivered := at[pos{a.partition, a.offset}]
		switch {
		case len(completions[a.id]) == 0:
			if lost++; lost <= 10 {
				t.Errorf("LOST: %s acknowledged at partition %d offset %d was never completed by an app", a.id, a.partition, a.offset)
			}
		case delivered && id != a.id:
			t.Errorf("%s acknowledged at partition %d offset %d, but that offset was delivered as %s", a.id, a.partition, a.offset, id)
		case !delivered && len(failures[a.id]) == 0:
			t.Errorf("%s acknowledged at partition %d offset %d without a failed attempt (so stored once), but was delivered at another offset", a.id, a.partition, a.offset)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged messages lost", lost, len(acks))
	}

	// Completed twice: only what the ledger does not promise after a kill -9.
	again := 0
	for id, cs := range completions {
		if len(cs) == 1 {
			continue
		}
		first := cs[0]
		why := ""
		switch {
		case len(cs) > 2:
			why = "completed more than twice"
		case first.node != killedNode:
			why = fmt.Sprintf("first completed by the app of n%d, not by the killed sidecar's app", first.node+1)
		case atKill[id] == "done":
			why = "the ledger held it done right after the kill"
		case cs[1].at.Before(killedAt):
			why = "completed again before the kill"
		case first.at.Before(killedAt.Add(-killWindow)):
			why = fmt.Sprintf("first completed %v before the kill: its completion had time to reach the ledger", killedAt.Sub(first.at).Round(time.Millisecond))
		case cs[1].token <= first.token:
			why = fmt.Sprintf("completed again with fencing token %d, not above %d", cs[1].token, first.token)
		}
		if why != "" {
			var lines []string
			for _, c := range cs {
				lines = append(lines, fmt.Sprintf("n%d %s attempt %d token %d %d@%d", c.node+1, c.at.Format("15:04:05.000"), c.attempt, c.token, c.partition, c.offset))
			}
			t.Errorf("COMPLETED TWICE: %s: %s (%s)", id, why, strings.Join(lines, "; "))
			continue
		}
		again++
	}
	t.Logf("%d messages completed; %d completed again after the kill -9 (completed by n%d's app, not yet done in the ledger at the kill)",
		len(completions), again, killedNode+1)

	// Per-key order. A key lives in one partition; its first deliveries
	// come in offset order (a redelivery after the kill is not a first
	// delivery), and a message of a key starts only after the previous
	// start of the key is done.
	firstSeen := map[string]bool{}
	lastFirst := map[string]appEvent{}
	atApp := map[string]appEvent{} // key → its delivery started and not done
	overlaps, reordered := 0, 0
	report := func(count *int, format string, args ...any) { // the first ten of each kind
		if *count++; *count <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, e := range evs {
		switch e.kind {
		case "start":
			if cur, busy := atApp[e.key]; busy {
				report(&overlaps, "key %s: %s (%d@%d) started at n%d %s while %s (%d@%d) was at n%d's app since %s: two messages of a key at once",
					e.key, e.id, e.partition, e.offset, e.node+1, e.at.Format("15:04:05.000"), cur.id, cur.partition, cur.offset, cur.node+1, cur.at.Format("15:04:05.000"))
			}
			atApp[e.key] = e
			if firstSeen[e.id] {
				continue
			}
			firstSeen[e.id] = true
			if prev, ok := lastFirst[e.key]; ok && (prev.partition != e.partition || e.offset <= prev.offset) {
				report(&reordered, "key %s: first delivery of %d@%d (n%d, %s) after the first delivery of %d@%d (n%d, %s): order broken",
					e.key, e.partition, e.offset, e.node+1, e.at.Format("15:04:05.000"), prev.partition, prev.offset, prev.node+1, prev.at.Format("15:04:05.000"))
			}
			lastFirst[e.key] = e
		case "done":
			if cur, ok := atApp[e.key]; ok && cur.id == e.id {
				delete(atApp, e.key)
			}
		}
	}
	if overlaps+reordered > 0 {
		t.Errorf("per-key order: %d starts while another message of the key was at an app, %d first deliveries out of offset order", overlaps, reordered)
	}
}

// checkPositions checks that the sampled committed positions never went
// backwards.
func checkPositions(t *testing.T, ps *positionSampler) {
	t.Helper()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	last := map[int32]int64{}
	lastAt := map[int32]time.Time{}
	back := 0
	for _, s := range ps.samples {
		for p, c := range s.committed {
			if prev, ok := last[p]; ok && c < prev {
				if back++; back <= 10 {
					t.Errorf("partition %d: committed offset went back from %d (%s) to %d (%s)", p, prev, lastAt[p].Format("15:04:05.000"), c, s.at.Format("15:04:05.000"))
				}
			}
			last[p], lastAt[p] = c, s.at
		}
	}
	t.Logf("committed positions read %d times through n1 (%d failed reads), never backwards: %v", len(ps.samples), ps.errs, back == 0)
}

// logPauses logs and checks, for each step, the longest delivery pause of the
// partitions that did not move and of those that moved. A partition did
// not move when every delivery of it, from its last one before the step to
// its last one in it, came from one sidecar. Its pause is the longest time
// between two consecutive deliveries over that span (publishing stalls and
// the gaps of a keyed load show here too); its delay is the longest time
// from a publish's acknowledgement to the message's first delivery, of
// messages acknowledged during the step. Partitions that did not move are
// split by whether their raft leader (as n1 saw it; unknown when n1 holds
// no replica of the partition) stayed the same through the step: a new
// leader pauses reads of the partition whatever the group does.
func logPauses(t *testing.T, steps []scaleStep, events []appEvent, acks []ack, ps *positionSampler) {
	t.Helper()
	starts := map[int32][]appEvent{}
	firstStart := map[string]time.Time{}
	for _, e := range events {
		if e.kind != "start" {
			continue
		}
		starts[e.partition] = append(starts[e.partition], e)
		if f, ok := firstStart[e.id]; !ok || e.at.Before(f) {
			firstStart[e.id] = e.at
		}
	}
	for p := range starts {
		sort.SliceStable(starts[p], func(i, j int) bool { return starts[p][i].at.Before(starts[p][j].at) })
	}
	ps.mu.Lock()
	samples := slices.Clone(ps.samples)
	ps.mu.Unlock()
	// leaderSteady: the partition had one known leader in every sample from
	// the last one before from to the first one after to.
	leaderSteady := func(p int32, from, to time.Time) bool {
		i := sort.Search(len(samples), func(i int) bool { return !samples[i].at.Before(from) })
		j := sort.Search(len(samples), func(i int) bool { return samples[i].at.After(to) })
		leader := ""
		for _, s := range samples[max(i-1, 0):min(j+1, len(samples))] {
			l := s.leaders[p]
			if l == "" || (leader != "" && l != leader) {
				return false
			}
			leader = l
		}
		return leader != ""
	}
	type agg struct {
		n            int
		gap, delay   time.Duration
		gapP, delayP int32
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	show := func(a agg) string {
		if a.n == 0 {
			return "none"
		}
		return fmt.Sprintf("%2d: pause %7s (p%d), delay %7s (p%d)", a.n, ms(a.gap), a.gapP, ms(a.delay), a.delayP)
	}
	for _, st := range steps {
		var stay, stayLeader, moved agg
		for p := range int32(scalePartitions) {
			ss := starts[p]
			i := sort.Search(len(ss), func(i int) bool { return !ss[i].at.Before(st.from) })
			j := sort.Search(len(ss), func(i int) bool { return ss[i].at.After(st.to) })
			if i == 0 || j <= i {
				continue // no delivery before the step, or none in it
			}
			span := ss[i-1 : j]
			a := &stay
			if !leaderSteady(p, st.from, st.to) {
				a = &stayLeader
			}
			for _, e := range span {
				if e.node != span[0].node {
					a = &moved
				}
			}
			a.n++
			for k := 1; k < len(span); k++ {
				if g := span[k].at.Sub(span[k-1].at); g > a.gap {
					a.gap, a.gapP = g, p
				}
			}
			for _, ak := range acks {
				if ak.partition != p || ak.at.Before(st.from) || ak.at.After(st.to) {
					continue
				}
				if f, ok := firstStart[ak.id]; ok && f.Sub(ak.at) > a.delay {
					a.delay, a.delayP = f.Sub(ak.at), p
				}
			}
		}
		t.Logf("PAUSE %-66s %6s | unmoved, same leader %s | unmoved, new leader %s | moved %s",
			st.name, ms(st.to.Sub(st.from)), show(stay), show(stayLeader), show(moved))
		if st.group && stay.delay >= scaleUnmovedBound {
			t.Errorf("%s: partition %d did not move and kept its leader, yet a message of it waited %v for its first delivery (bound %v): a rebalance paused a partition it did not move",
				st.name, stay.delayP, ms(stay.delay), scaleUnmovedBound)
		}
		if st.maxMoved > 0 && moved.delay >= st.maxMoved {
			t.Errorf("%s: partition %d moved, and a message of it waited %v for its first delivery (bound %v)", st.name, moved.delayP, ms(moved.delay), st.maxMoved)
		}
	}
}
