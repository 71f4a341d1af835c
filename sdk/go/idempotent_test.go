package spool_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/glebarez/go-sqlite" // database/sql driver "sqlite", pure Go

	spool "github.com/spoolmq/spool/sdk/go"
)

// openSQLite opens a fresh SQLite database file. Writers serialise on
// SQLite's database lock; busy_timeout makes a second writer wait for it
// instead of failing with SQLITE_BUSY.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	if !slices.Contains(sql.Drivers(), "sqlite") {
		t.Fatalf("github.com/glebarez/go-sqlite did not register the driver name \"sqlite\"; registered: %v", sql.Drivers())
	}
	dsn := filepath.Join(t.TempDir(), "app.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE work (message_id TEXT NOT NULL, note TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// doWork is a TxHandler whose effect is not idempotent by itself: each call
// that commits adds a row to work.
func doWork(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO work (message_id, note) VALUES (?, ?)`, m.ID, fmt.Sprintf("attempt %d", m.Attempt))
	return err
}

func msg(id string, attempt int, token uint64) *spool.Message {
	return &spool.Message{ID: id, Group: "billing", Topic: "orders", Attempt: attempt, FencingToken: token}
}

func countRows(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func workRows(t *testing.T, db *sql.DB, id string) int {
	t.Helper()
	return countRows(t, db, `SELECT count(*) FROM work WHERE message_id = ?`, id)
}

func recorded(t *testing.T, db *sql.DB, group, id string) int {
	t.Helper()
	return countRows(t, db, `SELECT count(*) FROM spool_processed WHERE consumer_group = ? AND message_id = ?`, group, id)
}

func checkStats(t *testing.T, s *spool.IdempotentStats, processed, duplicates, failed int64) {
	t.Helper()
	if p, d, f := s.Processed.Load(), s.Duplicates.Load(), s.Failed.Load(); p != processed || d != duplicates || f != failed {
		t.Errorf("stats: processed %d, duplicates %d, failed %d; want %d, %d, %d", p, d, f, processed, duplicates, failed)
	}
}

func TestIdempotentFirstDeliveryDoesTheWorkAndRecordsTheID(t *testing.T) {
	db := openSQLite(t)
	var stats spool.IdempotentStats
	h := spool.Idempotent(db, doWork, spool.WithIdempotentStats(&stats))

	if err := h(ctxT(t), msg("order-1", 1, 7)); err != nil {
		t.Fatal(err)
	}
	if n := workRows(t, db, "order-1"); n != 1 {
		t.Fatalf("work rows = %d, want 1", n)
	}
	var group, id string
	var token int64
	var at time.Time
	err := db.QueryRow(`SELECT consumer_group, message_id, fencing_token, processed_at FROM spool_processed`).Scan(&group, &id, &token, &at)
	if err != nil {
		t.Fatal(err)
	}
	if group != "billing" || id != "order-1" || token != 7 {
		t.Errorf("recorded (%q, %q, %d), want (billing, order-1, 7)", group, id, token)
	}
	if time.Since(at) > time.Minute || time.Since(at) < -time.Minute {
		t.Errorf("processed_at = %v, want about now", at)
	}
	checkStats(t, &stats, 1, 0, 0)
}

func TestIdempotentRedeliveryIsSkippedAndAcked(t *testing.T) {
	db := openSQLite(t)
	var stats spool.IdempotentStats
	calls := 0
	h := spool.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
		calls++
		return doWork(ctx, tx, m)
	}, spool.WithIdempotentStats(&stats))

	if err := h(ctxT(t), msg("order-1", 1, 1)); err != nil {
		t.Fatal(err)
	}
	// The ack was lost: same attempt again, a later attempt with a newer
	// token, and attempt 1 again (the attempt count restarts when spoold does).
	for _, m := range []*spool.Message{msg("order-1", 1, 1), msg("order-1", 2, 5), msg("order-1", 1, 9)} {
		if err := h(ctxT(t), m); err != nil {
			t.Fatalf("redelivery (attempt %d, token %d): %v, want nil (ack)", m.Attempt, m.FencingToken, err)
		}
	}
	if calls != 1 {
		t.Errorf("TxHandler called %d times, want 1", calls)
	}
	if n := workRows(t, db, "order-1"); n != 1 {
		t.Errorf("work rows = %d, want 1", n)
	}
	checkStats(t, &stats, 1, 3, 0)

	// The record is per consumer group: another group does its own work.
	other := msg("order-1", 1, 1)
	other.Group = "analytics"
	if err := h(ctxT(t), other); err != nil {
		t.Fatal(err)
	}
	if calls != 2 || recorded(t, db, "analytics", "order-1") != 1 {
		t.Errorf("another group: calls %d, recorded %d; want 2, 1", calls, recorded(t, db, "analytics", "order-1"))
	}
}

func TestIdempotentFailedHandlerRecordsNothing(t *testing.T) {
	db := openSQLite(t)
	var stats spool.IdempotentStats
	fail := true
	h := spool.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
		if err := doWork(ctx, tx, m); err != nil {
			return err
		}
		if fail {
			return errors.New("downstream said no")
		}
		return nil
	}, spool.WithIdempotentStats(&stats))

	if err := h(ctxT(t), msg("order-1", 1, 1)); err == nil || err.Error() != "downstream said no" {
		t.Fatalf("err = %v, want the handler's error unchanged", err)
	}
	if w, r := workRows(t, db, "order-1"), recorded(t, db, "billing", "order-1"); w != 0 || r != 0 {
		t.Fatalf("after a failure: work rows %d, recorded %d; want 0, 0 (rolled back)", w, r)
	}
	fail = false
	if err := h(ctxT(t), msg("order-1", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if w, r := workRows(t, db, "order-1"), recorded(t, db, "billing", "order-1"); w != 1 || r != 1 {
		t.Fatalf("after the retry: work rows %d, recorded %d; want 1, 1", w, r)
	}
	checkStats(t, &stats, 1, 0, 1)
}

func TestIdempotentOutcomeErrorsPassThrough(t *testing.T) {
	db := openSQLite(t)
	retry := spool.RetryDownstream("payments", 5*time.Second, errors.New("503"))
	dead := fmt.Errorf("parsing: %w", spool.DeadLetter("bad schema"))
	for _, want := range []error{retry, dead} {
		h := spool.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
			if err := doWork(ctx, tx, m); err != nil {
				return err
			}
			return want
		})
		got := h(ctxT(t), msg("order-1", 1, 1))
		if got != want {
			t.Errorf("got %v, want the handler's error value %v unchanged", got, want)
		}
	}
	var re *spool.RetryError
	var de *spool.DeadLetterError
	if !errors.As(retry, &re) || re.Downstream != "payments" || !errors.As(dead, &de) {
		t.Fatal("outcome errors lost their type")
	}
	if w, r := workRows(t, db, "order-1"), recorded(t, db, "billing", "order-1"); w != 0 || r != 0 {
		t.Errorf("work rows %d, recorded %d; want 0, 0", w, r)
	}
}

func TestIdempotentPanicRollsBack(t *testing.T) {
	db := openSQLite(t)
	var stats spool.IdempotentStats
	h := spool.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
		if err := doWork(ctx, tx, m); err != nil {
			return err
		}
		panic("nil map in the handler")
	}, spool.WithIdempotentStats(&stats))

	got := func() (v any) {
		defer func() { v = recover() }()
		_ = h(ctxT(t), msg("order-1", 1, 1))
		return nil
	}()
	if got != "nil map in the handler" {
		t.Fatalf("recovered %v, want the handler's panic value to go on", got)
	}
	if w, r := workRows(t, db, "order-1"), recorded(t, db, "billing", "order-1"); w != 0 || r != 0 {
		t.Errorf("work rows %d, recorded %d; want 0, 0", w, r)
	}
	if inUse := db.Stats().InUse; inUse != 0 {
		t.Errorf("%d connections still in use after the panic: the transaction was not ended", inUse)
	}
	checkStats(t, &stats, 0, 0, 1)
}

// A cancelled ctx (the SDK cancels it when the stream breaks or the drain
// times out) makes the commit fail: nothing is recorded, the error says so.
func TestIdempotentCommitErrorIsReturned(t *testing.T) {
	db := openSQLite(t)
	var stats spool.IdempotentStats
	h := spool.Idempotent(db, doWork, spool.WithIdempotentStats(&stats))
	ctx, cancel := context.WithCancel(ctxT(t))
	h2 := spool.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
		err := doWork(ctx, tx, m)
		cancel()
		return err
	}, spool.WithIdempotentStats(&stats))

	err := h2(ctx, msg("order-1", 1, 1))
	// database/sql rolls back when ctx ends; Commit reports ctx's error or,
	// if that rollback came first, ErrTxDone.
	if !errors.Is(err, context.Canceled) && !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("err = %v, want the commit's failure", err)
	}
	if w, r := workRows(t, db, "order-1"), recorded(t, db, "billing", "order-1"); w != 0 || r != 0 {
		t.Errorf("work rows %d, recorded %d; want 0, 0", w, r)
	}
	if err := h(ctxT(t), msg("order-1", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if w := workRows(t, db, "order-1"); w != 1 {
		t.Errorf("work rows after the retry = %d, want 1", w)
	}
	checkStats(t, &stats, 1, 0, 1)
}

// Two attempts of one message at once (a lease expired while the first ran):
// the second waits for the first's transaction on SQLite's write lock, then
// skips the message.
func TestIdempotentConcurrentDeliveriesCommitOnce(t *testing.T) {
	db := openSQLite(t)
	var stats spool.IdempotentStats
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	h := spool.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
		entered <- struct{}{}
		<-release
		return doWork(ctx, tx, m)
	}, spool.WithIdempotentStats(&stats))

	first := make(chan error, 1)
	go func() { first <- h(ctxT(t), msg("order-1", 1, 1)) }()
	<-entered // the first attempt holds its transaction, with the id inserted
	second := make(chan error, 1)
	go func() { second <- h(ctxT(t), msg("order-1", 2, 2)) }()
	select {
	case err := <-second:
		t.Fatalf("second attempt returned %v while the first held its transaction", err)
	case <-entered:
		t.Fatal("the TxHandler ran for the second attempt while the first held its transaction")
	case <-time.After(100 * time.Millisecond): // sleep-ok: let the second attempt reach the INSERT, where it waits; the assertions below hold whatever the timing
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second attempt: %v, want nil (skipped, ack)", err)
	}
	if w := workRows(t, db, "order-1"); w != 1 {
		t.Errorf("work rows = %d, want 1", w)
	}
	checkStats(t, &stats, 1, 1, 0)
}

// Many deliveries of a few ids at once: each id's work commits exactly once.
func TestIdempotentConcurrentStress(t *testing.T) {
	db := openSQLite(t)
	var stats spool.IdempotentStats
	h := spool.Idempotent(db, doWork, spool.WithIdempotentStats(&stats))
	const ids, copies = 5, 6
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, ids*copies)
	for i := range ids * copies {
		wg.Go(func() {
			<-start
			errs <- h(ctxT(t), msg(fmt.Sprintf("order-%d", i%ids), 1+i/ids, uint64(i+1)))
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i := range ids {
		if w := workRows(t, db, fmt.Sprintf("order-%d", i)); w != 1 {
			t.Errorf("order-%d: work rows = %d, want 1", i, w)
		}
	}
	checkStats(t, &stats, ids, ids*(copies-1), 0)
}

func TestIdempotentOptions(t *testing.T) {
	db := openSQLite(t)
	if _, err := db.Exec(`CREATE TABLE my_dedupe (consumer_group TEXT NOT NULL, message_id TEXT NOT NULL,
		fencing_token INTEGER NOT NULL, processed_at TIMESTAMP NOT NULL, PRIMARY KEY (consumer_group, message_id))`); err != nil {
		t.Fatal(err)
	}
	h := spool.Idempotent(db, doWork, spool.WithTable("my_dedupe"), spool.WithCreateTable(false),
		spool.WithDialect(spool.SQLite), spool.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelSerializable}))
	if err := h(ctxT(t), msg("order-1", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := h(ctxT(t), msg("order-1", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM my_dedupe`); n != 1 {
		t.Errorf("my_dedupe rows = %d, want 1", n)
	}
	if w := workRows(t, db, "order-1"); w != 1 {
		t.Errorf("work rows = %d, want 1", w)
	}
	if n := countRows(t, db, `SELECT count(*) FROM sqlite_master WHERE name = 'spool_processed'`); n != 0 {
		t.Error("WithCreateTable(false) created spool_processed")
	}

	// Without WithCreateTable(false) and no table: the error names the way out, and nothing ran.
	missing := spool.Idempotent(db, doWork, spool.WithTable("nowhere"), spool.WithCreateTable(false))
	if err := missing(ctxT(t), msg("order-2", 1, 1)); err == nil {
		t.Error("no table: want an error (retry)")
	}
	if err := h(ctxT(t), &spool.Message{Group: "billing"}); err == nil {
		t.Error("a message without an ID: want an error")
	}
}

func TestIdempotentPanicsOnMisuse(t *testing.T) {
	db := openSQLite(t)
	cases := map[string]func(){
		"nil db":      func() { spool.Idempotent(nil, doWork) },
		"nil h":       func() { spool.Idempotent(db, nil) },
		"bad table":   func() { spool.Idempotent(db, doWork, spool.WithTable("x; DROP TABLE work")) },
		"bad dialect": func() { spool.Idempotent(db, doWork, spool.WithDialect(spool.Dialect(42))) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
	// Schema-qualified names are fine.
	_ = spool.Idempotent(db, doWork, spool.WithTable("app.spool_processed"))

	// A driver whose dialect cannot be told (a wrapper, say) needs WithDialect.
	unknown, err := sql.Open("spool-test-unknown", "")
	if err != nil {
		t.Fatal(err)
	}
	defer unknown.Close()
	func() {
		defer func() {
			if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "WithDialect") {
				t.Errorf("unknown driver: recovered %v, want a panic naming WithDialect", v)
			}
		}()
		spool.Idempotent(unknown, doWork)
	}()
	_ = spool.Idempotent(unknown, doWork, spool.WithDialect(spool.Postgres))
}

type unknownDriver struct{}

func (unknownDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not a database") }

func init() { sql.Register("spool-test-unknown", unknownDriver{}) }
