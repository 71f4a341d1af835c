package spool_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "github.com/glebarez/go-sqlite" // database/sql driver "sqlite"; use your database's driver

	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

// The work (crediting a wallet, not idempotent by itself) and the record of
// the message id commit in one transaction: when the message comes again
// after its work committed, it is skipped and acked.
func ExampleIdempotent() {
	// The application's database: SQLite in a temporary directory here.
	dir, err := os.MkdirTemp("", "spool-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE wallets (customer TEXT PRIMARY KEY, balance INTEGER NOT NULL);
		INSERT INTO wallets VALUES ('customer-42', 0)`); err != nil {
		log.Fatal(err)
	}

	// The work, in the transaction that records m.ID (in spool_processed,
	// created on first use).
	credit := func(ctx context.Context, tx *sql.Tx, m *spool.Message) error {
		_, err := tx.ExecContext(ctx, `UPDATE wallets SET balance = balance + 100 WHERE customer = ?`, string(m.Key))
		fmt.Printf("attempt %d: credit 100 to %s for %s\n", m.Attempt, m.Key, m.ID)
		return err
	}
	var stats spool.IdempotentStats
	handler := spool.Idempotent(db, credit, spool.WithIdempotentStats(&stats))

	addr, stop := redeliveringSidecarForExample()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := spool.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Publish(ctx, "orders", []byte("customer-42"), []byte(`{"refund":100}`), spool.WithID("refund-7")); err != nil {
		log.Fatal(err)
	}

	err = client.Subscribe(ctx, "billing", []string{"orders"}, func(ctx context.Context, m *spool.Message) error {
		err := handler(ctx, m)
		fmt.Printf("attempt %d: %v (processed %d, skipped %d)\n", m.Attempt, err, stats.Processed.Load(), stats.Duplicates.Load())
		if m.Attempt == 1 {
			// For the example: the work committed but the ack never reaches
			// the sidecar (a crash, a lost lease), so the message comes again.
			return errors.New("ack lost")
		}
		cancel() // stop after the redelivery, for the example
		return err
	}, spool.WithConcurrency(1))
	if err != nil {
		log.Fatal(err)
	}

	var balance int
	if err := db.QueryRow(`SELECT balance FROM wallets WHERE customer = 'customer-42'`).Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance of customer-42:", balance)
	// Output:
	// attempt 1: credit 100 to customer-42 for refund-7
	// attempt 1: <nil> (processed 1, skipped 0)
	// attempt 2: <nil> (processed 1, skipped 1)
	// balance of customer-42: 100
}

// redeliveringSidecarForExample starts the SDK's in-process twin of spoold,
// set to deliver a retried message again; a real application dials its own
// sidecar instead.
func redeliveringSidecarForExample() (addr string, stop func()) {
	s, err := fakesidecar.Start(fakesidecar.Config{Redeliver: true})
	if err != nil {
		log.Fatal(err)
	}
	return s.Addr(), s.Stop
}
