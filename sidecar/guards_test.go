package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine/embedded"
	"github.com/spoolmq/spool/internal/testnats"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// TestAdminCreateTopicPartitionBudgetAndCase: on a single node,
// CreateTopic past guards.max_node_partitions is INVALID_ARGUMENT
// INVALID_TOPIC_SPEC naming the setting, a name that differs from a
// topic's only in case is FAILED_PRECONDITION TOPIC_EXISTS, and
// spool_node_partitions{,_limit} show the use.
func TestAdminCreateTopicPartitionBudgetAndCase(t *testing.T) {
	dir := t.TempDir()
	eng, err := embedded.Open(embedded.Config{DataDir: dir, MaxPartitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() { stop(); <-done; _ = eng.Close() }()
	m := metrics.New()
	a := newAdmin(&config.Config{}, eng, nil, nil, m)
	a.catalog = newTopicCatalog(dir, false)
	if _, err := a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "more", Partitions: 2})
	if status.Code(err) != codes.InvalidArgument || reasonOf(err) != "INVALID_TOPIC_SPEC" || !strings.Contains(err.Error(), "guards.max_node_partitions") {
		t.Errorf("past the budget: %v (reason %q)", err, reasonOf(err))
	}
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "Audit", Partitions: 1})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "TOPIC_EXISTS" {
		t.Errorf("Audit beside audit: %v (reason %q)", err, reasonOf(err))
	}
	mctx, mcancel := context.WithCancel(ctx)
	mcancel()
	nodeBudgetMetrics(mctx, eng, 0, m, slog.New(slog.NewTextHandler(io.Discard, nil))) // one reading, then ctx has ended
	if used, limit := testutil.ToFloat64(m.NodePartitions), testutil.ToFloat64(m.NodePartitionsLimit); used != 3 || limit != 4 {
		t.Errorf("spool_node_partitions %v, limit %v; want 3, 4", used, limit)
	}
}

// TestCredentialsNeverLogged starts the JetStream backend and the Redis
// ledger with known secrets in their URLs and passwords, and warns about
// plaintext addresses: no log line and no error holds a secret, and
// spool_plaintext_remotes counts the addresses.
func TestCredentialsNeverLogged(t *testing.T) {
	srv := testnats.Start(t)
	port := strings.TrimPrefix(srv.URL(), "nats://127.0.0.1:")
	secrets := []string{"nats-pw-s3cret", "nats-tok3n-s3cret", "redis-pw-s3cret"}
	cfg := &config.Config{}
	cfg.Node.ID = "n1"
	cfg.Storage.Backend = config.BackendJetStream
	cfg.Storage.JetStream.URLs = []string{"nats://alice:nats-pw-s3cret@127.0.0.1:" + port, "nats://nats-tok3n-s3cret@nats.example:4222"}
	cfg.Redis.Addrs = []string{"127.0.0.1:1", "redis.example:6379"}
	cfg.Redis.Password = "redis-pw-s3cret"
	cfg.ApplyDefaults()
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := metrics.New()
	warnPlaintextRemotes(cfg, m, logger)
	var errs []string
	eng, err := openBackend(cfg, "", m, logger)
	if err != nil {
		errs = append(errs, err.Error())
	} else {
		defer eng.Close()
	}
	led, err := newLedger(cfg, m, logger)
	if err != nil {
		errs = append(errs, err.Error())
	} else if c, ok := led.(interface{ Close() error }); ok {
		defer c.Close()
	}
	cfg.Storage.JetStream.URLs = cfg.Storage.JetStream.URLs[1:] // unreachable: Open fails
	if _, err := openBackend(cfg, "", m, logger); err != nil {
		errs = append(errs, err.Error())
	} else {
		t.Error("Open with no reachable server succeeded")
	}
	mu.Lock()
	all := logs.String() + strings.Join(errs, "\n")
	mu.Unlock()
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("%q appears in:\n%s", s, all)
		}
	}
	if !strings.Contains(all, "alice:xxxxx@127.0.0.1") || !strings.Contains(all, "INSECURE") {
		t.Errorf("the redacted URL or the INSECURE warning is missing:\n%s", all)
	}
	if got := testutil.ToFloat64(m.PlaintextRemotes.WithLabelValues("nats")); got != 1 {
		t.Errorf("spool_plaintext_remotes{peer=nats} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.PlaintextRemotes.WithLabelValues("redis")); got != 1 {
		t.Errorf("spool_plaintext_remotes{peer=redis} = %v, want 1", got)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestKafkaHugeReplyRefused: guards.kafka_max_reply_bytes reaches the Kafka
// backend: a broker answering with a frame that declares 64 MiB (under
// franz-go's own 100 MiB, over the 8 MiB set here) fails the start with an
// error naming the setting, and spool_remote_replies_refused_total{peer=kafka}
// counts it.
func TestKafkaHugeReplyRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Whatever the request, a reply declaring 64 MiB.
			_, _ = c.Write([]byte{0x04, 0, 0, 0, 0, 0, 0, 1})
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	cfg := &config.Config{}
	cfg.Node.ID = "n1"
	cfg.Storage.Backend = config.BackendKafka
	cfg.Storage.Kafka.Brokers = []string{ln.Addr().String()}
	cfg.Guards.KafkaMaxReplyBytes = 8 << 20
	cfg.ApplyDefaults()
	m := metrics.New()
	eng, err := openBackend(cfg, "", m, slog.New(slog.DiscardHandler))
	if err == nil {
		eng.Close()
		t.Fatal("the Kafka backend opened against a broker that answers nothing else")
	}
	if !strings.Contains(err.Error(), "guards.kafka_max_reply_bytes") {
		t.Errorf("%v; want an error naming guards.kafka_max_reply_bytes", err)
	}
	if got := testutil.ToFloat64(m.RemoteRefused.WithLabelValues("kafka")); got < 1 {
		t.Errorf("spool_remote_replies_refused_total{peer=kafka} = %v, want at least 1", got)
	}
}

// TestAdminCreateTopicFileBudget: on a single node, CreateTopic whose
// partitions would take the files the log keeps open past
// guards.max_open_files is INVALID_ARGUMENT INVALID_TOPIC_SPEC naming the
// setting; spool_open_files{,_limit} show the use, and a WARN naming the
// setting is logged once the files pass 80 % of the budget.
func TestAdminCreateTopicFileBudget(t *testing.T) {
	dir := t.TempDir()
	eng, err := embedded.Open(embedded.Config{DataDir: dir, MaxOpenFiles: 12})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() { stop(); <-done; _ = eng.Close() }()
	m := metrics.New()
	a := newAdmin(&config.Config{}, eng, nil, nil, m)
	a.catalog = newTopicCatalog(dir, false)
	// The lock and three files for each partition's segment: 10 of 12.
	if _, err := a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "more", Partitions: 1})
	if status.Code(err) != codes.InvalidArgument || reasonOf(err) != "INVALID_TOPIC_SPEC" || !strings.Contains(err.Error(), "guards.max_open_files") {
		t.Errorf("past the budget: %v (reason %q)", err, reasonOf(err))
	}
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	mctx, mcancel := context.WithCancel(ctx)
	mcancel()
	nodeBudgetMetrics(mctx, eng, 12, m, logger) // one reading, then ctx has ended
	if open, limit := testutil.ToFloat64(m.OpenFiles), testutil.ToFloat64(m.OpenFilesLimit); open != 10 || limit != 12 {
		t.Errorf("spool_open_files %v, limit %v; want 10, 12", open, limit)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "guards.max_open_files") {
		t.Errorf("no high-water warning at 10 of 12 files:\n%s", logs.String())
	}
}

// TestFileHighWater: the warning comes once as the open files cross 80 %
// of the budget, and again only after they fell below it.
func TestFileHighWater(t *testing.T) {
	var h fileHighWater
	for i, c := range []struct {
		open int
		warn bool
	}{{10, false}, {79, false}, {80, true}, {95, false}, {80, false}, {79, false}, {85, true}} {
		if got := h.cross(c.open, 100); got != c.warn {
			t.Errorf("step %d: %d of 100 files: warn %v, want %v", i, c.open, got, c.warn)
		}
	}
}
