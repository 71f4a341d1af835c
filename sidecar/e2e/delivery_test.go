package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

const baseConfig = `
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: workers
    max_attempts: 3
    visibility_timeout: %s
    ordering: %s
    backoff: {base: 20ms, max: 200ms, multiplier: 2}
`

func config(visibility, ordering string) string { return fmt.Sprintf(baseConfig, visibility, ordering) }

// Per-key order holds while many keys are handled concurrently: a key never
// has two messages at the app at once (the app records "start" when its
// handler begins and "done" just before it returns and the SDK acks, in one
// file in the order they happen, so the next message of a key may start
// only after the previous one's "done"), its messages start in publish
// order, and every message completes exactly once.
func TestPerKeyOrderUnderConcurrency(t *testing.T) { testPerKeyOrderUnderConcurrency(t, embedded) }

func testPerKeyOrderUnderConcurrency(t *testing.T, b backend) {
	n := b.startNode(t, config("10s", "key"))
	c := n.client(context.Background())
	const keys, perKey = 40, 50
	ids := publishSeq(t, c, "orders", 0, keys*perKey, func(s int) string { return fmt.Sprintf("k%d", s%keys) })
	rec := filepath.Join(t.TempDir(), "rec")
	startApp(t, n, rec, "--group", "workers", "--concurrency", "32", "--delay", "1ms")
	eventually(t, 60*time.Second, "every message completed", func() bool { return len(doneCounts(readEvents(t, rec))) == len(ids) })

	events := readEvents(t, rec)
	lastStart := map[string]int{}
	atApp := map[string]int{} // key → seq of its message at the app (started, not done)
	for _, e := range events {
		switch e.kind {
		case "start":
			if other, busy := atApp[e.key]; busy {
				t.Fatalf("key %s: message %d started while message %d of the same key was still at the app (two in flight)", e.key, e.seq, other)
			}
			atApp[e.key] = e.seq
			if prev, ok := lastStart[e.key]; ok && e.seq <= prev {
				t.Fatalf("key %s: message %d started after %d (publish order broken)", e.key, e.seq, prev)
			}
			lastStart[e.key] = e.seq
		case "done":
			if cur, ok := atApp[e.key]; !ok || cur != e.seq {
				t.Fatalf("key %s: message %d done, but the record shows it was not at the app", e.key, e.seq)
			}
			delete(atApp, e.key)
		}
	}
	for id, k := range doneCounts(events) {
		if k != 1 {
			t.Fatalf("message %s completed %d times, want once (no failures happened)", id, k)
		}
	}
	// Keys really ran in parallel: some key started before another key's
	// earlier-published message finished.
	inFlight, maxInFlight := 0, 0
	for _, e := range events {
		if e.kind == "start" {
			inFlight++
		} else {
			inFlight--
		}
		maxInFlight = max(maxInFlight, inFlight)
	}
	if maxInFlight < 2 {
		t.Fatalf("at most %d handlers ran at once; keys should run in parallel", maxInFlight)
	}
}

// A hung application (its process frozen, so it neither settles nor
// extends) loses its leases: the messages are redelivered to another
// consumer with attempt 2.
func TestHungHandlerLeaseExpires(t *testing.T) { testHungHandlerLeaseExpires(t, embedded) }

func testHungHandlerLeaseExpires(t *testing.T, b backend) {
	n := b.startNode(t, config("1s", "key"))
	c := n.client(context.Background())
	dir := t.TempDir()
	hungRec, otherRec := filepath.Join(dir, "hung"), filepath.Join(dir, "other")
	hung := startApp(t, n, hungRec, "--group", "workers", "--concurrency", "4", "--delay", "1h")
	ids := publishSeq(t, c, "orders", 0, 4, func(s int) string { return fmt.Sprintf("k%d", s) })
	eventually(t, 10*time.Second, "the first app started handling", func() bool { return len(readEvents(t, hungRec)) > 0 })
	hung.signal(syscall.SIGSTOP)
	startApp(t, n, otherRec, "--group", "workers", "--concurrency", "4")
	eventually(t, 20*time.Second, "messages redelivered and completed by the other app", func() bool {
		return len(doneCounts(readEvents(t, otherRec))) == len(ids)
	})
	redelivered := 0
	for _, e := range readEvents(t, otherRec) {
		if e.kind == "start" && e.attempt >= 2 {
			redelivered++
		}
	}
	if redelivered == 0 {
		t.Fatal("no redelivery with attempt ≥ 2: the frozen app's leases did not expire")
	}
}

// An app that crashes while handling (before acking) loses nothing: after
// it restarts, every message completes.
func TestCrashedAppLosesNothing(t *testing.T) { testCrashedAppLosesNothing(t, embedded) }

func testCrashedAppLosesNothing(t *testing.T, b backend) {
	n := b.startNode(t, config("30s", "key"))
	c := n.client(context.Background())
	ids := publishSeq(t, c, "orders", 0, 300, func(s int) string { return fmt.Sprintf("k%d", s%17) })
	dir := t.TempDir()
	crashRec, rec := filepath.Join(dir, "crash"), filepath.Join(dir, "rec")
	crashing := startApp(t, n, crashRec, "--group", "workers", "--concurrency", "8", "--exit-after", "120")
	if code := crashing.waitExit(30 * time.Second); code != 3 {
		t.Fatalf("testapp exit code %d, want 3 (crash)", code)
	}
	startApp(t, n, rec, "--group", "workers", "--concurrency", "8")
	eventually(t, 30*time.Second, "every message completed after the crash", func() bool {
		return len(doneCounts(readEvents(t, crashRec, rec))) == len(ids)
	})
	for _, id := range ids {
		if doneCounts(readEvents(t, crashRec, rec))[id] == 0 {
			t.Fatalf("message %s lost", id)
		}
	}
}

// A sidecar restarted gracefully redelivers only what was not acked: acked
// messages never reach the app again, unacked ones do.
func TestRestartedSidecarRedeliversOnlyUnacked(t *testing.T) {
	testRestartedSidecarRedeliversOnlyUnacked(t, embedded)
}

func testRestartedSidecarRedeliversOnlyUnacked(t *testing.T, b backend) {
	n := b.startNode(t, config("30s", "none"))
	c := n.client(context.Background())
	// 7 keys: every key, so every partition, holds odd and even messages.
	ids := publishSeq(t, c, "orders", 0, 200, func(s int) string { return fmt.Sprintf("k%d", s%7) })
	dir := t.TempDir()
	before, after := filepath.Join(dir, "before"), filepath.Join(dir, "after")
	// Odd messages fail with a retry far in the future: they stay unacked,
	// interleaved with acked even ones in every partition.
	a := startApp(t, n, before, "--group", "workers", "--concurrency", "8", "--retry-odd-after", "1h")
	eventually(t, 30*time.Second, "all even messages acked", func() bool { return len(doneCounts(readEvents(t, before))) == len(ids)/2 })
	a.stopGracefully()
	n.restart()

	startApp(t, n, after, "--group", "workers", "--concurrency", "8")
	admin := n.adminClient()
	// Lag 0 means nothing is left to deliver: any redelivery has happened.
	eventually(t, 30*time.Second, "group caught up (lag 0)", func() bool { return groupLag(t, admin, "workers") == 0 })
	done := doneCounts(readEvents(t, after))
	if len(done) != len(ids)/2 {
		t.Fatalf("%d messages completed after the restart, want the %d unacked ones", len(done), len(ids)/2)
	}
	for _, e := range readEvents(t, after) {
		if e.kind == "start" && e.seq%2 == 0 {
			t.Fatalf("acked message seq %d was delivered again after the restart", e.seq)
		}
	}
}

func groupLag(t *testing.T, admin spoolv1.AdminServiceClient, group string) int64 {
	t.Helper()
	resp, err := admin.ListGroups(context.Background(), &spoolv1.ListGroupsRequest{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	var lag int64
	for _, g := range resp.GetGroups() {
		for _, p := range g.GetPartitions() {
			lag += p.GetLagMessages() + int64(p.GetInFlight())
		}
	}
	return lag
}

// A message that always fails goes to the dead-letter topic after
// max_attempts, with its reason, while other keys keep flowing; a message
// the app dead-letters goes there at once.
func TestMaxAttemptsGoesToDeadLetterTopic(t *testing.T) {
	testMaxAttemptsGoesToDeadLetterTopic(t, embedded)
}

func testMaxAttemptsGoesToDeadLetterTopic(t *testing.T, b backend) {
	n := b.startNode(t, config("10s", "key"))
	c := n.client(context.Background())
	ids := publishSeq(t, c, "orders", 0, 60, func(s int) string {
		switch s {
		case 10:
			return "poison"
		case 20:
			return "bad"
		}
		return fmt.Sprintf("k%d", s%5)
	})
	rec := filepath.Join(t.TempDir(), "rec")
	startApp(t, n, rec, "--group", "workers", "--fail-keys", "poison", "--dead-keys", "bad")
	admin := n.adminClient()
	var entries []*spoolv1.DeadLetter
	eventually(t, 30*time.Second, "two dead letters", func() bool {
		resp, err := admin.PeekDeadLetters(context.Background(), &spoolv1.PeekDeadLettersRequest{Group: "workers", Topic: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		entries = resp.GetEntries()
		return len(entries) == 2
	})
	byKey := map[string]*spoolv1.DeadLetter{}
	for _, e := range entries {
		byKey[string(e.GetMessage().GetKey())] = e
	}
	p := byKey["poison"]
	if p == nil || p.GetReason() != "max_attempts_exceeded" || p.GetMessage().GetAttempt() != 3 || p.GetMessage().GetLastError() == "" {
		t.Fatalf("poison entry = %v; want reason max_attempts_exceeded after 3 attempts with the last error", p)
	}
	if string(p.GetMessage().GetPayload()) != "10" || p.GetMessage().GetTopic() != "orders" {
		t.Fatalf("poison entry lost its original payload or topic: %v", p)
	}
	if len(p.GetAttempts()) != 3 || p.GetAppVersion() != "testapp-1.0" || p.GetSidecarVersion() == "" {
		t.Fatalf("poison entry: attempts %v, app version %q, sidecar version %q; want 3 attempts with errors and both versions",
			p.GetAttempts(), p.GetAppVersion(), p.GetSidecarVersion())
	}
	for i, a := range p.GetAttempts() {
		if a.GetAttempt() != int32(i+1) || a.GetError() == "" || a.GetTimeMs() == 0 {
			t.Fatalf("attempt %d recorded as %v: want its number, time and error", i+1, a)
		}
	}
	if b := byKey["bad"]; b == nil || b.GetReason() != "bad payload for bad" || b.GetMessage().GetAttempt() != 1 {
		t.Fatalf("app-dead-lettered entry = %v; want the app's reason after 1 attempt", b)
	}
	starts := 0
	for _, e := range readEvents(t, rec) {
		if e.kind == "start" && e.key == "poison" {
			starts++
		}
	}
	if starts != 3 {
		t.Fatalf("poison message handled %d times, want exactly max_attempts = 3", starts)
	}
	eventually(t, 30*time.Second, "all other messages completed", func() bool {
		return len(doneCounts(readEvents(t, rec))) == len(ids)-2
	})
}
