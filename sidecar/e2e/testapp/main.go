// Command testapp is the application the end-to-end tests run as a real
// process next to a real spoold: it consumes through the Go SDK and writes
// one line per event to a record file, which the tests read back.
//
// Payloads are decimal sequence numbers; keys name ordering lanes. Record
// lines: "start <id> <key> <seq> <attempt> <token> <partition> <offset>
// <unix ns>" when a handler starts and "done" with the same fields just
// before it returns nil (an ack).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/glebarez/go-sqlite" // database/sql driver "sqlite"

	spool "github.com/spoolmq/spool/sdk/go"
)

func main() {
	addr := flag.String("addr", "", "sidecar address")
	group := flag.String("group", "", "consumer group")
	topics := flag.String("topics", "", "comma-separated topics (empty: all of the group's)")
	record := flag.String("record", "", "file to append event lines to")
	concurrency := flag.Int("concurrency", 16, "handlers at once")
	delay := flag.Duration("delay", 0, "time each handler takes")
	failKeys := flag.String("fail-keys", "", "comma-separated keys whose messages always fail (retry)")
	deadKeys := flag.String("dead-keys", "", "comma-separated keys whose messages are dead-lettered by the app")
	retryOdd := flag.Duration("retry-odd-after", 0, "if set, messages with an odd seq fail with this retry_after")
	exitAfter := flag.Int("exit-after", 0, "crash (exit 3) while handling the Nth message, before acking")
	downFile := flag.String("down-file", "", "while this file exists, every message fails toward downstream \"email\"")
	sqlitePath := flag.String("sqlite", "", "do the work in this SQLite database with spool.Idempotent (table work: one row per completion)")
	exitAfterCommit := flag.Int("exit-after-commit", 0, "with --sqlite: crash (exit 4) right after the Nth commit, before acking")
	flag.Parse()

	f, err := os.OpenFile(*record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	write := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, format+"\n", args...) // one write(2) per line, O_APPEND
	}
	fail := set(*failKeys)
	dead := set(*deadKeys)
	var handled atomic.Int64

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	client, err := spool.Dial(ctx, *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(2)
	}
	defer client.Close()
	var topicList []string
	if *topics != "" {
		topicList = strings.Split(*topics, ",")
	}
	var handler spool.Handler = func(ctx context.Context, m *spool.Message) error {
		key := string(m.Key)
		seq, _ := strconv.Atoi(string(m.Payload))
		write("start %s %s %d %d %d %d %d %d", m.ID, key, seq, m.Attempt, m.FencingToken, m.Partition, m.Offset, time.Now().UnixNano())
		if n := handled.Add(1); *exitAfter > 0 && n == int64(*exitAfter) {
			os.Exit(3) // crash mid-handler: the message was never acked
		}
		if *delay > 0 {
			select {
			case <-time.After(*delay):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if *downFile != "" {
			if _, err := os.Stat(*downFile); err == nil {
				return spool.RetryDownstream("email", 0, errors.New("email provider down"))
			}
		}
		switch {
		case fail[key]:
			return errors.New("downstream rejected " + key)
		case dead[key]:
			return spool.DeadLetter("bad payload for " + key)
		case *retryOdd > 0 && seq%2 == 1:
			return spool.Retry(*retryOdd, errors.New("odd message held back"))
		}
		write("done %s %s %d %d %d %d %d %d", m.ID, key, seq, m.Attempt, m.FencingToken, m.Partition, m.Offset, time.Now().UnixNano())
		return nil
	}
	if *sqlitePath != "" {
		handler = idempotentWork(*sqlitePath, handler, *exitAfterCommit, write)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err = client.Subscribe(ctx, *group, topicList, handler, spool.WithConcurrency(*concurrency), spool.WithLogger(logger),
		spool.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond), spool.WithConsumerName(fmt.Sprintf("testapp-%d", os.Getpid())),
		spool.WithAppVersion("testapp-1.0"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}

func set(csv string) map[string]bool {
	m := map[string]bool{}
	for _, k := range strings.Split(csv, ",") {
		if k != "" {
			m[k] = true
		}
	}
	return m
}

// idempotentWork wraps the handler's decision in the transactional pattern:
// the work (a row in table work) and the record of the message id commit
// together, so a message whose work committed is skipped when redelivered.
// It writes "commit <id>" after each commit, and can crash right after the
// Nth one (before the ack reaches the sidecar).
func idempotentWork(path string, decide spool.Handler, exitAfter int, write func(string, ...any)) spool.Handler {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(2)
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS work (message_id TEXT NOT NULL, attempt INTEGER NOT NULL)`); err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(2)
	}
	var commits atomic.Int64
	inner := spool.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
		if err := decide(ctx, m); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO work (message_id, attempt) VALUES (?, ?)`, m.ID, m.Attempt)
		return err
	})
	return func(ctx context.Context, m *spool.Message) error {
		write("recv %s %s 0 %d", m.ID, m.Key, m.Attempt)
		err := inner(ctx, m)
		if err == nil {
			write("commit %s %s 0 %d", m.ID, m.Key, m.Attempt)
			if n := commits.Add(1); exitAfter > 0 && n == int64(exitAfter) {
				os.Exit(4) // committed, never acked
			}
		}
		return err
	}
}
