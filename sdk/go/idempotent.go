package spool

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TxHandler does the application's work for one message inside tx, the
// transaction that also records the message id. Among the attempts that
// commit, it runs at most once per (consumer group, message id).
//
// It must use tx (not the *sql.DB) for every write that belongs to the
// work, and must neither commit nor roll back tx: Idempotent does. Its
// return value is the delivery's outcome as for a Handler (nil = ACK,
// Retry, DeadLetter, any other error = RETRY); any error rolls the work back.
type TxHandler func(ctx context.Context, tx *sql.Tx, m *Message) error

// Dialect names the SQL that Idempotent writes: placeholders, the insert that
// skips a recorded id, and the table it creates.
type Dialect int

// The dialects Idempotent speaks. The zero value means "detect from the
// database's driver".
const (
	// Postgres: $n placeholders, INSERT ... ON CONFLICT DO NOTHING
	// (PostgreSQL 9.5 and later, CockroachDB).
	Postgres Dialect = iota + 1
	// MySQL: ? placeholders, INSERT IGNORE (MySQL, MariaDB).
	MySQL
	// SQLite: ? placeholders, INSERT ... ON CONFLICT DO NOTHING (SQLite 3.24 and later).
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "Postgres"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultIdempotentTable is the table in which Idempotent records processed messages.
const DefaultIdempotentTable = "spool_processed"

// IdempotentOption configures Idempotent.
type IdempotentOption func(*idempotentConfig)

type idempotentConfig struct {
	table       string
	txOptions   *sql.TxOptions
	dialect     Dialect
	createTable bool
	stats       *IdempotentStats
}

// WithTable sets the table of processed messages (default "spool_processed").
// The name is written into the SQL unquoted: letters, digits and '_', with an
// optional "schema." prefix.
func WithTable(name string) IdempotentOption {
	return func(c *idempotentConfig) { c.table = name }
}

// WithTxOptions sets the options of the transaction (isolation level,
// read-only) passed to BeginTx. Default nil: the driver's defaults.
func WithTxOptions(o *sql.TxOptions) IdempotentOption {
	return func(c *idempotentConfig) { c.txOptions = o }
}

// WithDialect sets the SQL dialect. By default it is detected from the
// package of the database's driver (pgx, lib/pq; go-sql-driver/mysql; any
// package path containing "sqlite"); set it when the driver is wrapped (for
// tracing, for example) or unknown.
func WithDialect(d Dialect) IdempotentOption {
	return func(c *idempotentConfig) { c.dialect = d }
}

// WithCreateTable says whether Idempotent runs CREATE TABLE IF NOT EXISTS
// before the first message (default true). Turn it off when your migrations
// create the table (docs/sdk-go.md has the schema for each database).
func WithCreateTable(create bool) IdempotentOption {
	return func(c *idempotentConfig) { c.createTable = create }
}

// WithIdempotentStats makes the handler count what it does into s.
func WithIdempotentStats(s *IdempotentStats) IdempotentOption {
	return func(c *idempotentConfig) { c.stats = s }
}

// IdempotentStats counts what an Idempotent handler did. All fields are safe
// to read concurrently.
type IdempotentStats struct {
	// Processed counts messages whose work and id record committed.
	Processed atomic.Int64
	// Duplicates counts deliveries skipped and acked because their id was
	// already recorded for the group: the work had committed before.
	Duplicates atomic.Int64
	// Failed counts deliveries rolled back: the TxHandler returned an error
	// or panicked, or the database failed (begin, insert, commit).
	Failed atomic.Int64
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Idempotent returns a Handler that runs h at most once per (consumer group,
// message id) among the attempts that commit, using db for the record.
//
// For each delivery it begins a transaction, inserts (m.Group, m.ID,
// m.FencingToken, now) into the table of processed messages, whose primary
// key is (consumer_group, message_id), and then:
//
//   - if the id is already recorded (the insert affected no row), the work
//     committed before: it rolls back and returns nil, so the delivery is
//     acked without calling h;
//   - otherwise it calls h with the transaction. If h returns an error, it
//     rolls back and returns that error unchanged (Retry and DeadLetter keep
//     their meaning); if h panics, it rolls back and the panic goes on (the
//     SDK recovers it: RETRY). If h returns nil, it commits and returns nil;
//     a failed commit is returned (RETRY), and if the commit had in fact
//     happened the retry is skipped as a duplicate.
//
// Because the work and the id record commit in one transaction, a
// redelivery of a message whose work committed (a crash or lost lease
// between COMMIT and the ack, a sidecar restart, a redrive of a message that
// had succeeded) is skipped. Two attempts running at once for the same id
// (an expired lease) are serialised by the database on the id's row: the
// second waits for the first, then skips if it committed or does the work if
// it rolled back.
//
// Not covered: effects outside the transaction (an e-mail, an HTTP call, a
// write to another database). They happen again on a redelivery; make them
// idempotent on their own (send m.ID as the downstream's idempotency key,
// fence with m.FencingToken) or write them to an outbox table in tx.
//
// The transaction holds the id's row lock while h runs: keep h short and
// free of network calls. Rows are never deleted; see docs/sdk-go.md for
// pruning.
//
// Idempotent panics if db or h is nil, if the table name is not a plain
// identifier, or if the dialect is neither given nor detected: these are
// programming errors, found at startup.
func Idempotent(db *sql.DB, h TxHandler, opts ...IdempotentOption) Handler {
	if db == nil || h == nil {
		panic("spool.Idempotent: db and h must not be nil")
	}
	c := idempotentConfig{table: DefaultIdempotentTable, createTable: true}
	for _, o := range opts {
		o(&c)
	}
	if len(c.table) > 128 || !tableName.MatchString(c.table) {
		panic(fmt.Sprintf("spool.Idempotent: WithTable(%q): use letters, digits and '_', optionally prefixed by a schema and '.'", c.table))
	}
	if c.dialect == 0 {
		d, ok := detectDialect(db.Driver())
		if !ok {
			panic(fmt.Sprintf("spool.Idempotent: cannot tell the SQL dialect of driver %T: pass WithDialect(spool.Postgres), WithDialect(spool.MySQL) or WithDialect(spool.SQLite)", db.Driver()))
		}
		c.dialect = d
	}
	if c.dialect < Postgres || c.dialect > SQLite {
		panic(fmt.Sprintf("spool.Idempotent: unknown %v", c.dialect))
	}
	if c.stats == nil {
		c.stats = new(IdempotentStats)
	}
	ix := &idempotent{db: db, h: h, cfg: c, insert: insertSQL(c.dialect, c.table)}
	return ix.handle
}

type idempotent struct {
	db     *sql.DB
	h      TxHandler
	cfg    idempotentConfig
	insert string

	createMu sync.Mutex
	created  bool // the CREATE TABLE succeeded once (or is not wanted)
}

func (ix *idempotent) handle(ctx context.Context, m *Message) error {
	stats := ix.cfg.stats
	if m.ID == "" {
		stats.Failed.Add(1)
		return errors.New("spool.Idempotent: the message has no ID to record")
	}
	if err := ix.ensureTable(ctx); err != nil {
		stats.Failed.Add(1)
		return err
	}
	tx, err := ix.db.BeginTx(ctx, ix.cfg.txOptions)
	if err != nil {
		stats.Failed.Add(1)
		return fmt.Errorf("spool.Idempotent: begin: %w", err)
	}
	settled := false
	defer func() {
		if !settled { // h panicked: roll back, let the panic go on with its stack
			_ = tx.Rollback()
			stats.Failed.Add(1)
		}
	}()
	// Fencing tokens stay far below 2^63, the range of a signed BIGINT.
	res, err := tx.ExecContext(ctx, ix.insert, m.Group, m.ID, int64(m.FencingToken), time.Now().UTC())
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		settled = true
		_ = tx.Rollback()
		stats.Failed.Add(1)
		return fmt.Errorf("spool.Idempotent: recording message %q of group %q in %s: %w", m.ID, m.Group, ix.cfg.table, err)
	}
	if n == 0 {
		settled = true
		_ = tx.Rollback()
		stats.Duplicates.Add(1)
		return nil
	}
	if err := ix.h(ctx, tx, m); err != nil {
		settled = true
		_ = tx.Rollback()
		stats.Failed.Add(1)
		return err
	}
	settled = true
	if err := tx.Commit(); err != nil {
		stats.Failed.Add(1)
		return fmt.Errorf("spool.Idempotent: commit: %w", err)
	}
	stats.Processed.Add(1)
	return nil
}

// ensureTable runs CREATE TABLE IF NOT EXISTS until it succeeds once. It runs
// outside the message's transaction: MySQL commits implicitly around DDL.
func (ix *idempotent) ensureTable(ctx context.Context) error {
	if !ix.cfg.createTable {
		return nil
	}
	ix.createMu.Lock()
	defer ix.createMu.Unlock()
	if ix.created {
		return nil
	}
	if _, err := ix.db.ExecContext(ctx, createTableSQL(ix.cfg.dialect, ix.cfg.table)); err != nil {
		return fmt.Errorf("spool.Idempotent: creating table %s (create it with your migrations and pass WithCreateTable(false) to skip this): %w", ix.cfg.table, err)
	}
	ix.created = true
	return nil
}

func insertSQL(d Dialect, table string) string {
	const cols = "(consumer_group, message_id, fencing_token, processed_at)"
	switch d {
	case Postgres:
		return "INSERT INTO " + table + " " + cols + " VALUES ($1, $2, $3, $4) ON CONFLICT (consumer_group, message_id) DO NOTHING"
	case MySQL:
		// INSERT IGNORE also turns other errors into warnings (an id too
		// long for its column would be truncated): the columns of
		// createTableSQL hold any group and id Spool accepts.
		return "INSERT IGNORE INTO " + table + " " + cols + " VALUES (?, ?, ?, ?)"
	default:
		return "INSERT INTO " + table + " " + cols + " VALUES (?, ?, ?, ?) ON CONFLICT (consumer_group, message_id) DO NOTHING"
	}
}

// createTableSQL is the table of processed messages. Group names are at most
// 249 bytes and message ids at most 128 bytes in Spool. Ids compare byte for
// byte: MySQL's default collations are case-insensitive, hence VARBINARY.
func createTableSQL(d Dialect, table string) string {
	switch d {
	case Postgres:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
	consumer_group TEXT NOT NULL,
	message_id TEXT NOT NULL,
	fencing_token BIGINT NOT NULL,
	processed_at TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (consumer_group, message_id)
)`
	case MySQL:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
	consumer_group VARBINARY(255) NOT NULL,
	message_id VARBINARY(255) NOT NULL,
	fencing_token BIGINT UNSIGNED NOT NULL,
	processed_at DATETIME(6) NOT NULL,
	PRIMARY KEY (consumer_group, message_id)
)`
	default:
		return "CREATE TABLE IF NOT EXISTS " + table + ` (
	consumer_group TEXT NOT NULL,
	message_id TEXT NOT NULL,
	fencing_token INTEGER NOT NULL,
	processed_at TIMESTAMP NOT NULL,
	PRIMARY KEY (consumer_group, message_id)
)`
	}
}

// detectDialect guesses the dialect from the package of the driver's type.
func detectDialect(d driver.Driver) (Dialect, bool) {
	t := reflect.TypeOf(d)
	if t == nil {
		return 0, false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	p := strings.ToLower(t.PkgPath())
	switch {
	case strings.Contains(p, "sqlite"):
		return SQLite, true
	case strings.Contains(p, "mysql"):
		return MySQL, true
	case strings.Contains(p, "jackc/pgx"), strings.HasSuffix(p, "lib/pq"), strings.Contains(p, "postgres"):
		return Postgres, true
	}
	return 0, false
}
