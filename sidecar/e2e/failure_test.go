package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/glebarez/go-sqlite" // database/sql driver "sqlite"

	"github.com/spoolmq/spool/internal/testredis"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// ledgerConfig is a subscription with the Redis ledger and quick breakers.
func ledgerConfig(redisAddr, policy string, maxAttempts int) string {
	return fmt.Sprintf(`
redis:
  addrs: [%q]
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: workers
    max_attempts: %d
    visibility_timeout: 30s
    ordering: key
    backoff: {base: 20ms, max: 200ms, multiplier: 2}
    redis_unavailable: %s
    breaker: {consecutive_failures: 3, open_timeout: 300ms, max_open_timeout: 1s}
`, redisAddr, maxAttempts, policy)
}

// workRows counts the app's committed work per message id (the app's own
// database: its real side effect).
func workRows(t *testing.T, path string) map[string]int {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT message_id, COUNT(*) FROM work GROUP BY message_id`)
	if err != nil {
		return map[string]int{} // table not created yet
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

func countKind(events []event, kind string) map[string]int {
	m := map[string]int{}
	for _, e := range events {
		if e.kind == kind {
			m[e.id]++
		}
	}
	return m
}

// Effectively once: the app's work for a message commits exactly once,
// even when the app crashes after committing and before acking (the SDK's
// transactional helper skips the redelivery), and acked messages are not
// handed to the app again after spoold is killed before it committed its
// offsets (the ledger acks them without the app).
func TestEffectivelyOnceAcrossAppCrashAndSidecarRestart(t *testing.T) {
	testEffectivelyOnceAcrossAppCrashAndSidecarRestart(t, embedded)
}

func testEffectivelyOnceAcrossAppCrashAndSidecarRestart(t *testing.T, b backend) {
	r := testredis.Start(t)
	// Offsets are committed only on a graceful shutdown here, so killing
	// spoold makes it deliver every message again: the ledger must stop them.
	n := b.startNodeWith(t, "  commit_interval: 1h\n", ledgerConfig(r.Addr(), "pause", 5))
	c := n.client(context.Background())
	ids := publishSeq(t, c, "orders", 0, 200, func(s int) string { return fmt.Sprintf("k%d", s%13) })
	dir := t.TempDir()
	db := filepath.Join(dir, "app.db")
	rec1, rec2, rec3 := filepath.Join(dir, "r1"), filepath.Join(dir, "r2"), filepath.Join(dir, "r3")

	crashing := startApp(t, n, rec1, "--group", "workers", "--concurrency", "8", "--sqlite", db, "--exit-after-commit", "50")
	if code := crashing.waitExit(30 * time.Second); code != 4 {
		t.Fatalf("testapp exit code %d, want 4 (crash after a commit, before its ack)", code)
	}
	second := startApp(t, n, rec2, "--group", "workers", "--concurrency", "8", "--sqlite", db)
	eventually(t, 30*time.Second, "every message's work committed", func() bool { return len(workRows(t, db)) == len(ids) })
	eventually(t, 30*time.Second, "every message acked", func() bool {
		return metricValue(t, n, `spool_in_flight{group="workers",topic="orders"}`) == 0 &&
			metricValue(t, n, `spool_settlements_total{group="workers",outcome="ack",topic="orders"}`)+
				metricValue(t, n, `spool_dedupe_hits_total{group="workers",topic="orders"}`) >= float64(len(ids))
	})

	// Kill spoold without a graceful shutdown while its app is connected,
	// stop the app, restart spoold, and let a new app run. With
	// commit_interval 1h nothing was committed, so everything is delivered
	// again and the ledger must stop it. (Where groups are shared through a
	// coordinator — storage.jetstream.shared_groups — an app leaving makes
	// the member hand its partitions over, which commits them: this check
	// would see fewer redeliveries there.)
	n.kill()
	second.stopGracefully()
	n.start()
	startApp(t, n, rec3, "--group", "workers", "--concurrency", "8", "--sqlite", db)
	sentinel := publishSeq(t, c, "orders", 1000, 1, func(int) string { return "sentinel" })
	eventually(t, 30*time.Second, "sentinel handled after the restart", func() bool { return workRows(t, db)[sentinel[0]] == 1 })
	eventually(t, 30*time.Second, "group caught up after the restart", func() bool { return groupLag(t, n.adminClient(), "workers") == 0 })

	for id, k := range workRows(t, db) {
		if k != 1 {
			t.Fatalf("message %s: work committed %d times, want exactly once", id, k)
		}
	}
	if again := countKind(readEvents(t, rec3), "recv"); len(again) != 1 {
		t.Fatalf("after the sidecar restart the app was handed %d messages, want only the sentinel (acked ones are deduped by the ledger)", len(again))
	}
	if hits := metricValue(t, n, `spool_dedupe_hits_total{group="workers",topic="orders"}`); hits < float64(len(ids)) {
		t.Fatalf("%v dedupe hits after the restart, want all %d acked messages stopped by the ledger", hits, len(ids))
	}
}

// Attempts never exceed max_attempts, even across a sidecar restart: the
// ledger keeps the count.
func TestAttemptsSurviveSidecarRestart(t *testing.T) { testAttemptsSurviveSidecarRestart(t, embedded) }

func testAttemptsSurviveSidecarRestart(t *testing.T, b backend) {
	r := testredis.Start(t)
	// Retries 0–300 ms apart, so the restart lands between attempts.
	cfg := strings.Replace(ledgerConfig(r.Addr(), "pause", 6), "backoff: {base: 20ms, max: 200ms, multiplier: 2}", "backoff: {base: 300ms, max: 300ms, multiplier: 1}", 1)
	n := b.startNode(t, cfg)
	c := n.client(context.Background())
	publishSeq(t, c, "orders", 0, 1, func(int) string { return "poison" })
	dir := t.TempDir()
	rec1, rec2 := filepath.Join(dir, "r1"), filepath.Join(dir, "r2")
	a := startApp(t, n, rec1, "--group", "workers", "--fail-keys", "poison")
	eventually(t, 20*time.Second, "two failed attempts", func() bool { return len(readEvents(t, rec1)) >= 2 })
	a.signal(syscall.SIGKILL)
	n.kill()
	n.start()
	startApp(t, n, rec2, "--group", "workers", "--fail-keys", "poison")
	admin := n.adminClient()
	eventually(t, 30*time.Second, "poison message dead-lettered", func() bool {
		resp, err := admin.PeekDeadLetters(context.Background(), &spoolv1.PeekDeadLettersRequest{Group: "workers", Topic: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetEntries()) == 1
	})
	var before, after []int // attempt numbers the app saw
	for _, e := range readEvents(t, rec1) {
		if e.kind == "start" {
			before = append(before, e.attempt)
		}
	}
	for _, e := range readEvents(t, rec2) {
		if e.kind == "start" {
			after = append(after, e.attempt)
		}
	}
	// An attempt handed to the app just as it was killed may never show up
	// in its record, but it counts: numbers go on, never restart.
	if len(before) == 0 || len(after) == 0 || after[0] <= before[len(before)-1] {
		t.Fatalf("attempts before the restart %v, after %v: the count must go on across the restart", before, after)
	}
	if total := len(before) + len(after); total > 6 || after[len(after)-1] != 6 {
		t.Fatalf("poison message handled %d times (attempts %v then %v); max_attempts is 6", total, before, after)
	}
}

// A downstream that is down for 10 s costs no more attempts than
// detecting it (docs/breaker.md, guarantee 4: at most consecutive_failures
// - 1 = 2 counted failures in all), dead-letters nothing, and delivery
// resumes when it returns.
func TestDownstreamOutageBurnsNoAttempts(t *testing.T) {
	testDownstreamOutageBurnsNoAttempts(t, embedded)
}

func testDownstreamOutageBurnsNoAttempts(t *testing.T, b backend) {
	r := testredis.Start(t)
	n := b.startNode(t, ledgerConfig(r.Addr(), "pause", 4))
	c := n.client(context.Background())
	dir := t.TempDir()
	down := filepath.Join(dir, "down")
	if err := os.WriteFile(down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(dir, "rec")
	startApp(t, n, rec, "--group", "workers", "--concurrency", "4", "--down-file", down)
	ids := publishSeq(t, c, "orders", 0, 100, func(s int) string { return fmt.Sprintf("k%d", s%10) })
	eventually(t, 10*time.Second, "breaker open", func() bool {
		return metricValue(t, n, `spool_breaker_state{downstream="email",group="workers",topic="orders"}`) == 2
	})
	outageEnds := time.Now().Add(10 * time.Second)
	eventually(t, 15*time.Second, "10 s outage over", func() bool { return time.Now().After(outageEnds) }) // the outage lasts its 10 s
	if err := os.Remove(down); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "every message completed after the outage", func() bool {
		return len(doneCounts(readEvents(t, rec))) == len(ids)
	})
	resp, err := n.adminClient().PeekDeadLetters(context.Background(), &spoolv1.PeekDeadLettersRequest{Group: "workers", Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEntries()) != 0 {
		t.Fatalf("%d messages dead-lettered during a downstream outage, want 0", len(resp.GetEntries()))
	}
	// Every failure is tagged, and there is no ack before the outage: the
	// attempts beyond each message's first add up to at most 2.
	highest := map[string]int{}
	for _, e := range readEvents(t, rec) {
		if e.kind == "start" {
			highest[e.id] = max(highest[e.id], e.attempt)
		}
	}
	counted := 0
	for _, a := range highest {
		counted += a - 1
	}
	if counted > 2 {
		t.Fatalf("%d attempts counted over all messages (highest attempt per message: %v); detecting the outage may cost at most consecutive_failures-1 = 2", counted, highest)
	}
	if u := metricValue(t, n, `spool_uncounted_failures_total{group="workers",topic="orders"}`) + metricValue(t, n, `spool_breaker_transitions_total{downstream="email",group="workers",to="half-open",topic="orders"}`); u == 0 {
		t.Fatal("no probe and no uncounted failure: the breaker did not work during the outage")
	}
}

// Redis killed mid-run under redis_unavailable: pause: nothing is lost,
// nothing is handled twice, and delivery resumes when Redis is back.
func TestRedisOutagePause(t *testing.T) { testRedisOutagePause(t, embedded) }

func testRedisOutagePause(t *testing.T, b backend) {
	r := testredis.Start(t)
	n := b.startNode(t, ledgerConfig(r.Addr(), "pause", 5))
	c := n.client(context.Background())
	rec := filepath.Join(t.TempDir(), "rec")
	startApp(t, n, rec, "--group", "workers", "--concurrency", "8", "--delay", "2ms")
	first := publishSeq(t, c, "orders", 0, 300, func(s int) string { return fmt.Sprintf("k%d", s%17) })
	eventually(t, 20*time.Second, "some messages handled", func() bool { return len(doneCounts(readEvents(t, rec))) >= 50 })
	r.Kill()
	second := publishSeq(t, c, "orders", 300, 300, func(s int) string { return fmt.Sprintf("k%d", s%17) })
	eventually(t, 10*time.Second, "ledger seen unavailable", func() bool { return metricValue(t, n, "spool_ledger_available") == 0 })
	r.Restart()
	total := len(first) + len(second)
	eventually(t, 60*time.Second, "every message handled after Redis returned", func() bool { return len(doneCounts(readEvents(t, rec))) == total })
	for id, k := range countKind(readEvents(t, rec), "start") {
		if k != 1 {
			t.Fatalf("message %s handed to the app %d times under policy pause, want once", id, k)
		}
	}
}

// Redis killed mid-run under redis_unavailable: deliver: nothing is lost;
// duplicates happen only as counted by spool_undeduped_deliveries_total.
func TestRedisOutageDeliver(t *testing.T) {
	r := testredis.Start(t)
	n := startNode(t, ledgerConfig(r.Addr(), "deliver", 5))
	c := n.client(context.Background())
	rec := filepath.Join(t.TempDir(), "rec")
	startApp(t, n, rec, "--group", "workers", "--concurrency", "8", "--delay", "2ms")
	first := publishSeq(t, c, "orders", 0, 300, func(s int) string { return fmt.Sprintf("k%d", s%17) })
	r.Kill()
	second := publishSeq(t, c, "orders", 300, 300, func(s int) string { return fmt.Sprintf("k%d", s%17) })
	total := len(first) + len(second)
	eventually(t, 60*time.Second, "every message handled while Redis is down", func() bool { return len(doneCounts(readEvents(t, rec))) == total })
	undeduped := metricValue(t, n, `spool_undeduped_deliveries_total{group="workers",topic="orders"}`)
	if undeduped == 0 {
		t.Fatal("no undeduped deliveries counted although Redis was down")
	}
	dups := 0
	for _, k := range countKind(readEvents(t, rec), "start") {
		dups += k - 1
	}
	if float64(dups) > undeduped {
		t.Fatalf("%d duplicate deliveries but only %v counted as undeduped", dups, undeduped)
	}
}

// A poison message goes to the DLQ after max_attempts while other keys
// flow; after the fix, a redrive delivers it exactly once, only to the
// group that dead-lettered it; a second redrive (a mistake) delivers
// nothing, because the ledger knows it was handled.
func TestRedriveAfterFix(t *testing.T) { testRedriveAfterFix(t, embedded) }

func testRedriveAfterFix(t *testing.T, b backend) {
	r := testredis.Start(t)
	n := b.startNode(t, fmt.Sprintf(`
redis:
  addrs: [%q]
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: workers
    max_attempts: 2
    backoff: {base: 20ms, max: 100ms, multiplier: 2}
  - topic: orders
    group: audit
`, r.Addr()))
	c := n.client(context.Background())
	ids := publishSeq(t, c, "orders", 0, 40, func(s int) string {
		if s == 7 {
			return "poison"
		}
		return fmt.Sprintf("k%d", s%5)
	})
	dir := t.TempDir()
	broken, fixed, audit := filepath.Join(dir, "broken"), filepath.Join(dir, "fixed"), filepath.Join(dir, "audit")
	app := startApp(t, n, broken, "--group", "workers", "--fail-keys", "poison")
	startApp(t, n, audit, "--group", "audit")
	admin := n.adminClient()
	eventually(t, 20*time.Second, "poison dead-lettered, others done", func() bool {
		resp, err := admin.PeekDeadLetters(context.Background(), &spoolv1.PeekDeadLettersRequest{Group: "workers", Topic: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetEntries()) == 1 && len(doneCounts(readEvents(t, broken))) == len(ids)-1
	})
	eventually(t, 20*time.Second, "audit group done", func() bool { return len(doneCounts(readEvents(t, audit))) == len(ids) })
	app.stopGracefully()
	startApp(t, n, fixed, "--group", "workers")

	dry, err := admin.Redrive(context.Background(), &spoolv1.RedriveRequest{Group: "workers", Topic: "orders", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.GetMatched() != 1 || dry.GetRedriven() != 0 || len(dry.GetSample()) != 1 || string(dry.GetSample()[0].GetMessage().GetKey()) != "poison" {
		t.Fatalf("dry run = %v, want the poison message matched and nothing moved", dry)
	}
	if len(doneCounts(readEvents(t, fixed))) != 0 {
		t.Fatal("a dry run delivered something")
	}
	resp, err := admin.Redrive(context.Background(), &spoolv1.RedriveRequest{Group: "workers", Topic: "orders", RatePerS: 50})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRedriven() != 1 {
		t.Fatalf("redrive = %v, want 1 redriven", resp)
	}
	poisonID := ids[7]
	eventually(t, 20*time.Second, "redriven poison handled by the fixed app", func() bool { return doneCounts(readEvents(t, fixed))[poisonID] == 1 })
	// The mistake: redrive again. The ledger knows the message was handled.
	again, err := admin.Redrive(context.Background(), &spoolv1.RedriveRequest{Group: "workers", Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if again.GetRedriven() != 0 || again.GetAlreadyDone() != 1 {
		t.Fatalf("second redrive = %v, want nothing redriven and 1 already done", again)
	}
	// Sentinel per partition to let any stray delivery surface, then check.
	sentinels := publishSeq(t, c, "orders", 100, 4, func(s int) string { return fmt.Sprintf("s%d", s) })
	eventually(t, 20*time.Second, "sentinels handled by both groups", func() bool {
		f, a := doneCounts(readEvents(t, fixed)), doneCounts(readEvents(t, audit))
		for _, id := range sentinels {
			if f[id] == 0 || a[id] == 0 {
				return false
			}
		}
		return true
	})
	if k := countKind(readEvents(t, fixed), "start")[poisonID]; k != 1 {
		t.Fatalf("redriven message handed to the fixed app %d times, want once", k)
	}
	if k := countKind(readEvents(t, audit), "start")[poisonID]; k != 1 {
		t.Fatalf("the audit group saw the poison message %d times; a redrive must reach only the group that dead-lettered it", k)
	}
}
