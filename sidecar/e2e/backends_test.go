package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testnats"
	spool "github.com/spoolmq/spool/sdk/go"
)

// backend is the storage backend a test's spoold runs on
// (docs/backends.md): the delivery suite below runs once per backend.
type backend struct {
	name string
	// storage returns the config's storage section for a test, starting
	// what the backend needs (a broker) for the test's lifetime.
	storage func(t *testing.T) string
}

var (
	embedded  = backend{name: "embedded", storage: func(*testing.T) string { return "" }}
	jetStream = backend{name: "jetstream", storage: func(t *testing.T) string {
		srv := testnats.Start(t)
		return fmt.Sprintf("storage:\n  backend: jetstream\n  jetstream:\n    urls: [%q]\n", srv.URL())
	}}
)

// startNode is startNode on the backend.
func (b backend) startNode(t *testing.T, config string) *node {
	t.Helper()
	return startNodeWith(t, "", b.storage(t)+config)
}

// startNodeWith is startNodeWith on the backend.
func (b backend) startNodeWith(t *testing.T, nodeExtra, config string) *node {
	t.Helper()
	return startNodeWith(t, nodeExtra, b.storage(t)+config)
}

// deliverySuite is the delivery conformance list (docs/backends.md): what
// every storage backend must pass. On the embedded log each runs as its
// own Test function (named in the list); TestBackendJetStream runs them
// all on JetStream as TestBackendJetStream/<name>.
var deliverySuite = []struct {
	name string
	run  func(*testing.T, backend)
}{
	{"per_key_order", testPerKeyOrderUnderConcurrency},                    // TestPerKeyOrderUnderConcurrency
	{"lease_expiry", testHungHandlerLeaseExpires},                         // TestHungHandlerLeaseExpires
	{"app_crash", testCrashedAppLosesNothing},                             // TestCrashedAppLosesNothing
	{"sidecar_restart", testRestartedSidecarRedeliversOnlyUnacked},        // TestRestartedSidecarRedeliversOnlyUnacked
	{"dead_letters", testMaxAttemptsGoesToDeadLetterTopic},                // TestMaxAttemptsGoesToDeadLetterTopic
	{"ledger_dedupe", testEffectivelyOnceAcrossAppCrashAndSidecarRestart}, // TestEffectivelyOnceAcrossAppCrashAndSidecarRestart
	{"attempts_survive_restart", testAttemptsSurviveSidecarRestart},       // TestAttemptsSurviveSidecarRestart
	{"breaker_pause", testDownstreamOutageBurnsNoAttempts},                // TestDownstreamOutageBurnsNoAttempts
	{"redis_outage_pause", testRedisOutagePause},                          // TestRedisOutagePause
	{"redrive", testRedriveAfterFix},                                      // TestRedriveAfterFix
	{"drain", testDrainFinishesInFlight},                                  // TestDrainFinishesInFlight
}

// TestBackendJetStream runs the delivery suite with spoold on NATS
// JetStream (a nats-server per test), and the broker restart below.
func TestBackendJetStream(t *testing.T) {
	for _, s := range deliverySuite {
		t.Run(s.name, func(t *testing.T) { s.run(t, jetStream) })
	}
	t.Run("foreign_binary_records", func(t *testing.T) {
		srv := testnats.Start(t)
		testForeignBinaryRecords(t, jetStreamOn(srv), writeJetStreamRecords(srv))
	})
	t.Run("foreign_message", func(t *testing.T) { testForeignNATSMessage(t, testnats.Start(t)) })
	t.Run("broker_restart", func(t *testing.T) {
		srv := testnats.Start(t)
		storage := fmt.Sprintf("storage:\n  backend: jetstream\n  jetstream:\n    urls: [%q]\n", srv.URL())
		testBrokerRestartUnderLoad(t, storage, func() { srv.Stop(); srv.Start() })
	})
}

func TestDrainFinishesInFlight(t *testing.T) { testDrainFinishesInFlight(t, embedded) }

// SIGTERM drains: spoold stops fetching, lets the handlers at the app
// finish and ack within drain_timeout, commits, and exits 0; restarted,
// it delivers only what had not been acked, so every message completes
// exactly once.
func testDrainFinishesInFlight(t *testing.T, b backend) {
	n := b.startNode(t, config("30s", "none"))
	c := n.client(context.Background())
	ids := publishSeq(t, c, "orders", 0, 100, func(s int) string { return fmt.Sprintf("k%d", s%7) })
	rec := filepath.Join(t.TempDir(), "rec")
	startApp(t, n, rec, "--group", "workers", "--concurrency", "4", "--delay", "200ms")
	eventually(t, 20*time.Second, "handlers at work", func() bool { return len(readEvents(t, rec)) > 0 })
	n.stop() // fails unless spoold exits 0 within 20s (drain_timeout is 5s)
	starts, dones := countKind(readEvents(t, rec), "start"), doneCounts(readEvents(t, rec))
	for id := range starts {
		if dones[id] == 0 {
			t.Fatalf("message %s was at the app when spoold drained and was not finished", id)
		}
	}
	n.start()
	eventually(t, 60*time.Second, "every message completed after the restart", func() bool { return len(doneCounts(readEvents(t, rec))) == len(ids) })
	for id, k := range doneCounts(readEvents(t, rec)) {
		if k != 1 {
			t.Fatalf("message %s completed %d times, want once (drained acks were committed)", id, k)
		}
	}
}

// A broker restart under load loses nothing: publishes that fail while
// the broker is down are retried by the producer with the same ids, the
// consumer's sidecar reconnects, and every message is handled. storage is
// the config's storage section; restart stops and starts the broker.
func testBrokerRestartUnderLoad(t *testing.T, storage string, restart func()) {
	n := startNodeWith(t, "", storage+config("30s", "key"))
	c := n.client(context.Background())
	rec := filepath.Join(t.TempDir(), "rec")
	startApp(t, n, rec, "--group", "workers", "--concurrency", "8")
	const total = 600
	ids := publishSeq(t, c, "orders", 0, total/2, func(s int) string { return fmt.Sprintf("k%d", s%11) })
	restart()
	ids = append(ids, publishRetrying(t, c, total/2, total/2)...)
	eventually(t, 60*time.Second, "every message handled after the broker restart", func() bool {
		return len(doneCounts(readEvents(t, rec))) == len(ids)
	})
	done := doneCounts(readEvents(t, rec))
	for _, id := range ids {
		if done[id] == 0 {
			t.Fatalf("message %s lost across the broker restart", id)
		}
	}
	if a := n.adminClient(); groupLag(t, a, "workers") != 0 {
		eventually(t, 10*time.Second, "lag 0", func() bool { return groupLag(t, a, "workers") == 0 })
	}
}

// publishRetrying publishes count messages (payloads from..) with ids of
// their own, in batches of 50, retrying a failed batch with the same ids
// (the way a producer rides out an outage) for up to 60s.
func publishRetrying(t *testing.T, c *spool.Client, from, count int) []string {
	t.Helper()
	var ids []string
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < count; i += 50 {
		var msgs []spool.OutMessage
		for s := from + i; s < from+min(i+50, count); s++ {
			msgs = append(msgs, spool.OutMessage{ID: fmt.Sprintf("retrying-%d", s), Key: []byte(fmt.Sprintf("k%d", s%11)), Payload: []byte(strconv.Itoa(s))})
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := c.PublishBatch(ctx, "orders", msgs)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish still failing 60s after the broker restart: %v", err)
			}
			time.Sleep(100 * time.Millisecond) // sleep-ok: the producer's retry interval
		}
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
	}
	return ids
}
