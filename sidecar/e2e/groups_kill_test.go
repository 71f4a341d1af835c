package e2e

import (
	"fmt"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testredis"
)

// killSessionTimeout is the group session timeout of
// TestClusterGroupKilledMemberLeasesTakenOver. It checks that no message
// waits on a lease: each waits at most the group's move (the coordinator
// expiring the killed member and the others starting its partitions) plus
// killLeaseSlack for its next delivery; and that the move takes at most
// killMoveBound. The target is the session timeout + 2 s; on a 2-core
// machine, shared with the cluster under load, the move measured 3.3–4.8 s
// and once 5.1 s in 9 runs. The bounds leave room for a CI machine that
// runs the other packages' tests beside it (the suite must not fail on a
// slow moment): the move within the session timeout + 5 s, each message
// within the move + 2 s — before leases were taken over, messages waited
// 30 s (the visibility timeout) after a 4.3 s move.
const (
	killSessionTimeout = 3 * time.Second
	killLeaseSlack     = 2 * time.Second
	killMoveBound      = killSessionTimeout + 5*time.Second
)

// A kill -9 of a member with the default visibility_timeout (30 s): the
// messages its app was handling hold live leases in the ledger, under the
// generation the member owned their partitions in. The coordinator
// expires the member after its session timeout and grants its partitions
// to the others in a newer generation; their claims take those leases
// over at once (docs/ledger.md, "Generations"), so no key parks behind
// a dead member's lease and every partition flows again within the
// session timeout plus 2 s (the group's move; see killMoveBound).
//
// Measured: for every acknowledged message not completed before the kill
// and acknowledged at most 10 s after it, the time from the kill (or its
// acknowledgement, if later) to its first delivery by a surviving sidecar.
// Before generations in the ledger: the longest such wait was the
// visibility timeout (30.0 s; 37 messages waited over 5 s) while the group
// moved in about 4 s; after: 3.4–4.8 s, within 0.2 s of the move.
func TestClusterGroupKilledMemberLeasesTakenOver(t *testing.T) {
	r := testredis.Start(t)
	config := fmt.Sprintf(`
redis:
  addrs: [%q]
topics:
  - name: orders
    partitions: %d
subscriptions:
  - topic: orders
    group: verify
    ordering: key
`, r.Addr(), scalePartitions) // visibility_timeout: the default, 30 s
	sc := startClusterWith(t, 3, fmt.Sprintf("  produce_timeout: 3s\n  group_session_timeout: %s\n", killSessionTimeout), config)
	awaitPlaced(t, sc.nodes[0])
	sa := newScaleApps(t)
	for i := range 3 {
		// Handlers of 20 ms: at the kill, the killed sidecar's app holds
		// about 8 messages (its concurrency) under live leases.
		sa.start(i, sc.nodes[i], "--delay", "20ms")
	}
	l := startLoadWith(t, sc.nodes[:2], scaleKeys, 8*time.Millisecond)
	sa.awaitSettled([]int{0, 1, 2}, 60*time.Second, "three sidecars share the group")
	l.awaitMore(2, 100, 30*time.Second, "100 more acknowledged publishes per producer before the kill")

	killed := time.Now()
	sc.nodes[2].kill()
	atKill := ledgerStates(t, r, "verify")
	held := 0
	for _, st := range atKill {
		if st == "in_progress" {
			held++
		}
	}
	t.Logf("at the kill the ledger held %d messages in progress", held)
	moved := sa.awaitSettled([]int{0, 1}, 60*time.Second, "n3 killed: 2 sidecars share the group").Sub(killed)
	t.Logf("the group settled on 2 sidecars %v after the kill", moved.Round(time.Millisecond))
	if moved > killMoveBound {
		t.Errorf("the killed member's partitions moved %v after the kill, over %v", moved.Round(time.Millisecond), killMoveBound)
	}
	for time.Since(killed) < 12*time.Second {
		l.awaitMore(2, 20, 30*time.Second, "20 more acknowledged publishes per producer after the kill")
	}
	acks, _ := l.finish()

	// Measured: messages neither completed by an app nor started by a
	// surviving sidecar before the kill (the latter's handlers just go on).
	firstStart := map[string]time.Time{} // first start by a surviving sidecar after the kill
	before := map[string]bool{}          // completed, or started by a surviving sidecar, before the kill
	missing := 0
	deliveredAll := func() bool {
		sa.poll()
		for _, e := range sa.events {
			switch {
			case e.at.Before(killed) && (e.kind == "done" || e.node != 2):
				before[e.id] = true
			case e.kind == "start" && e.node != 2 && e.at.After(killed):
				if f, ok := firstStart[e.id]; !ok || e.at.Before(f) {
					firstStart[e.id] = e.at
				}
			}
		}
		missing = 0
		for _, a := range acks {
			if !before[a.id] && firstStart[a.id].IsZero() {
				missing++
			}
		}
		return missing == 0
	}
	for deadline := time.Now().Add(90 * time.Second); !deliveredAll(); {
		if time.Now().After(deadline) {
			t.Fatalf("90 s after the load stopped, %d acknowledged messages not completed before the kill are not delivered by a surviving sidecar", missing)
		}
		time.Sleep(50 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}

	type wait struct {
		id        string
		partition int32
		d         time.Duration
	}
	var waits []wait
	for _, a := range acks {
		if before[a.id] || a.at.After(killed.Add(10*time.Second)) {
			continue
		}
		from := killed
		if a.at.After(from) {
			from = a.at
		}
		waits = append(waits, wait{a.id, a.partition, firstStart[a.id].Sub(from)})
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i].d > waits[j].d })
	perPart := map[int32]time.Duration{}
	for _, w := range waits {
		perPart[w.partition] = max(perPart[w.partition], w.d)
	}
	t.Logf("%d messages measured; longest wait for a delivery after the kill %v (%s, partition %d); per partition %v",
		len(waits), waits[0].d.Round(time.Millisecond), waits[0].id, waits[0].partition, roundAll(perPart))
	over := 0
	for _, w := range waits {
		if w.d <= moved+killLeaseSlack {
			continue
		}
		if over++; over <= 5 {
			t.Errorf("message %s (partition %d) waited %v after the kill for its next delivery, more than the group's move (%v) + %v: it waited on a lease",
				w.id, w.partition, w.d.Round(time.Millisecond), moved.Round(time.Millisecond), killLeaseSlack)
		}
	}
	if over > 5 {
		t.Errorf("%d messages in all waited over %v", over, moved+killLeaseSlack)
	}
}

func roundAll(m map[int32]time.Duration) map[int32]time.Duration {
	out := make(map[int32]time.Duration, len(m))
	for k, v := range m {
		out[k] = v.Round(100 * time.Millisecond)
	}
	return out
}

// A member paused past its session timeout (SIGSTOP, then SIGCONT: a
// long stall, or a node cut off that heals) under keyed load with the
// Redis ledger healthy. The coordinator expires it and its partitions go
// to the others; resumed, it delivers nothing more of them: it fenced
// itself when its session timeout had passed without a heartbeat taken
// (docs/groups.md, "Self-fencing"), then joins again and takes its share
// back. Nothing acknowledged is lost, and no message is completed twice
// but those the paused sidecar's app completed during the pause (or just
// before it): their acks reach the sidecar only when it resumes, after the
// new owner took the messages over.
//
// Before self-fencing: n3, resumed, went on delivering its old partitions
// under its old fencing tokens until it read that the coordinator had
// expired it; 25 messages were completed twice in one run, first by n3's
// app 100–150 ms after the resume, and 17 times two messages of a key were
// at the apps at once.
func TestClusterGroupPausedMemberFencesItself(t *testing.T) {
	r := testredis.Start(t)
	sc := startClusterWith(t, 3, fmt.Sprintf("  produce_timeout: 3s\n  group_session_timeout: %s\n", killSessionTimeout), scaleConfig(r.Addr()))
	awaitPlaced(t, sc.nodes[0])
	sa := newScaleApps(t)
	for i := range 3 {
		sa.start(i, sc.nodes[i], "--delay", "20ms")
	}
	l := startLoadWith(t, sc.nodes[:2], scaleKeys, 8*time.Millisecond)
	sa.awaitSettled([]int{0, 1, 2}, 60*time.Second, "three sidecars share the group")
	l.awaitMore(2, 100, 30*time.Second, "100 more acknowledged publishes per producer before the pause")

	paused := time.Now()
	sc.nodes[2].signal(syscall.SIGSTOP)
	atPause := ledgerStates(t, r, "verify")
	sa.awaitSettled([]int{0, 1}, 60*time.Second, "n3 paused: 2 sidecars share the group")
	resumed := time.Now()
	sc.nodes[2].signal(syscall.SIGCONT)
	t.Logf("n3 paused for %v", resumed.Sub(paused).Round(time.Millisecond))
	sa.awaitSettled([]int{0, 1, 2}, 60*time.Second, "n3 resumed: 3 sidecars share the group")
	l.awaitMore(2, 100, 30*time.Second, "100 more acknowledged publishes per producer at the end")
	acks, failures := l.finish()

	done := map[string]bool{}
	for deadline := time.Now().Add(60 * time.Second); ; {
		sa.poll()
		for _, e := range sa.events {
			if e.kind == "done" {
				done[e.id] = true
			}
		}
		all := true
		for _, a := range acks {
			all = all && done[a.id]
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
	checkScaleRun(t, sa.events, acks, failures, 2, paused, atPause)

	// Stricter than after a kill: a message completed twice was first
	// completed by n3's app while n3 was paused (or within killWindow
	// before), never after it resumed.
	completions := map[string][]appEvent{}
	for _, e := range sa.events {
		if e.kind == "done" {
			completions[e.id] = append(completions[e.id], e)
		}
	}
	twice := 0
	for id, cs := range completions {
		if len(cs) < 2 {
			continue
		}
		twice++
		if f := cs[0]; f.node == 2 && f.at.After(resumed) {
			t.Errorf("COMPLETED TWICE: %s first completed by n3's app at %s, after it resumed at %s (token %d), then by n%d's (token %d)",
				id, f.at.Format("15:04:05.000"), resumed.Format("15:04:05.000"), f.token, cs[1].node+1, cs[1].token)
		}
	}
	t.Logf("%d messages completed; %d completed twice (completed by n3's app during the pause)", len(completions), twice)
}
