package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "github.com/glebarez/go-sqlite" // database/sql driver "sqlite"

	spool "github.com/spoolmq/spool/sdk/go"
)

// faultsConfig: two groups consume orders (ordering key), both with every
// kind of fault injected (docs/semantics.md, "Testing a handler").
const faultsConfig = `
topics:
  - name: orders
    partitions: 4
subscriptions:
  - topic: orders
    group: naive
    ordering: key
    max_attempts: 50
    visibility_timeout: 1s
    backoff: {base: 10ms, max: 50ms, multiplier: 2}
    faults: {duplicate: 0.2, lose_ack: 0.2, delay: 0.2, delay_max: 30ms, early_lease_expiry: 0.05, seed: 1}
  - topic: orders
    group: careful
    ordering: key
    max_attempts: 50
    visibility_timeout: 1s
    backoff: {base: 10ms, max: 50ms, multiplier: 2}
    faults: {duplicate: 0.2, lose_ack: 0.2, delay: 0.2, delay_max: 30ms, early_lease_expiry: 0.05, seed: 2}
`

// With the faults of an unreliable network injected, a handler that counts
// its side effects without idempotency sees messages more than once, while
// the same work behind spool.Idempotent commits exactly once per message,
// and in each key's publish order: the faults duplicate, redeliver and
// delay, but never reorder a key.
func TestFaultInjectionProvesHandlerIdempotent(t *testing.T) {
	n := startNodeWith(t, "  dev: true\n", faultsConfig)
	keyOf := func(s int) string { return fmt.Sprintf("k%d", s%10) }
	ids := publishSeq(t, n.client(context.Background()), "orders", 0, 200, keyOf)

	var mu sync.Mutex
	naive := map[string]int{}
	runApp(t, n, "naive", func(_ context.Context, m *spool.Message) error {
		mu.Lock()
		naive[m.ID]++
		mu.Unlock()
		return nil
	})
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE work (message_id TEXT, msg_key TEXT, seq INTEGER)`); err != nil {
		t.Fatal(err)
	}
	runApp(t, n, "careful", spool.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
		seq, err := strconv.Atoi(string(m.Payload))
		if err != nil {
			return spool.DeadLetter(err.Error())
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO work VALUES (?, ?, ?)`, m.ID, string(m.Key), seq)
		return err
	}))

	eventually(t, 60*time.Second, "both groups finished every message", func() bool {
		mu.Lock()
		seen := len(naive)
		mu.Unlock()
		return seen == len(ids) && groupLag(t, n.adminClient(), "naive") == 0 && groupLag(t, n.adminClient(), "careful") == 0 &&
			metricValue(t, n, `spool_in_flight{group="careful",topic="orders"}`) == 0
	})
	for _, kind := range []string{"duplicate", "lose_ack", "delay", "early_lease_expiry"} {
		if v := metricValue(t, n, fmt.Sprintf(`spool_faults_injected_total{group="careful",kind=%q,topic="orders"}`, kind)); v == 0 {
			t.Errorf("no %s fault injected into group careful", kind)
		}
	}
	mu.Lock()
	twice := 0
	for _, k := range naive {
		if k > 1 {
			twice++
		}
	}
	mu.Unlock()
	if twice == 0 {
		t.Fatalf("the naive handler ran once per message: the faults reached no handler")
	}
	t.Logf("the naive handler ran more than once for %d of %d messages", twice, len(ids))

	rows, err := db.Query(`SELECT message_id, msg_key, seq FROM work ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	done, last := map[string]int{}, map[string]int{}
	for rows.Next() {
		var id, key string
		var seq int
		if err := rows.Scan(&id, &key, &seq); err != nil {
			t.Fatal(err)
		}
		done[id]++
		if prev, ok := last[key]; ok && seq < prev {
			t.Errorf("key %s: message %d committed after %d: a key's order was broken", key, seq, prev)
		}
		last[key] = seq
	}
	for _, id := range ids {
		if done[id] != 1 {
			t.Errorf("message %s: work committed %d times behind spool.Idempotent, want exactly once", id, done[id])
		}
	}
}

// runApp subscribes h for group in the test process until the test ends.
func runApp(t *testing.T, n *node, group string, h spool.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = spool.Subscribe(ctx, n.app, group, nil, h, spool.WithConcurrency(8))
	}()
	t.Cleanup(func() { cancel(); <-done })
}
