package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sidecar"
	"github.com/spoolmq/spool/sidecar/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the output")

// Names of the test sidecar's configuration.
const (
	nodeID     = "node-1"
	ordersT    = "orders"  // 3 partitions, retention 7d, subscription orders/billing
	jobsT      = "jobs"    // 1 partition, subscription jobs/workers (dead letters)
	billing    = "billing" // group on orders
	workers    = "workers" // group on jobs
	jobsDLQ    = "jobs.dlq.workers"
	appVersion = "jobs-worker 1.4.2"
)

// testSidecar is a real sidecar (sidecar.Run, as spoold runs it) in this
// process, with its app and admin gRPC servers on free ports, in dev mode:
// a temporary data dir and the in-process dedupe ledger that redrive uses.
type testSidecar struct {
	t          *testing.T
	app, admin string
	adminC     spoolv1.AdminServiceClient
}

func startSidecar(t *testing.T) *testSidecar {
	t.Helper()
	return startSidecarWith(t, nil)
}

// startSidecarWith is startSidecar with the config changed by set first.
func startSidecarWith(t *testing.T, set func(*config.Config)) *testSidecar {
	t.Helper()
	cfg := config.DevConfig()
	cfg.Node.ID = nodeID
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.AppListen = []string{"127.0.0.1:0"}
	cfg.Node.AdminListen = "127.0.0.1:0"
	orders := config.NewTopic(ordersT, 3)
	orders.Retention = 7 * 24 * time.Hour
	orders.RetentionBytes = 10 << 30
	cfg.Topics = []config.TopicConfig{orders, config.NewTopic(jobsT, 1)}
	jobs := config.NewSubscription(jobsT, workers)
	jobs.Backoff = config.BackoffConfig{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2}
	cfg.Subscriptions = []config.SubscriptionConfig{config.NewSubscription(ordersT, billing), jobs}
	if set != nil {
		set(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan sidecar.Addrs, 1)
	done := make(chan error, 1)
	go func() { // owned: the cleanup cancels and awaits it
		done <- sidecar.Run(ctx, &cfg, sidecar.Options{Logger: discardLogger(), Ready: func(a sidecar.Addrs) { ready <- a }})
	}()
	s := &testSidecar{t: t}
	select {
	case a := <-ready:
		s.app, s.admin = a.App[0], a.Admin
	case err := <-done:
		cancel()
		t.Fatalf("sidecar did not start: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("sidecar did not start within 20s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar.Run: %v", err)
		}
	})
	conn, err := grpc.NewClient("passthrough:///"+s.admin, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.adminC = spoolv1.NewAdminServiceClient(conn)
	return s
}

// result is one run of spool.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// spool runs the CLI in this process against the sidecar (SPOOL_ADMIN and
// SPOOL_ADDR point at it), with stdin and redacted output.
func (s *testSidecar) spool(stdin string, tty bool, args ...string) result {
	s.t.Helper()
	envs := map[string]string{envAdmin: s.admin, envApp: s.app}
	return runSpool(s.t, envs, stdin, tty, args...)
}

func runSpool(t *testing.T, envs map[string]string, stdin string, tty bool, args ...string) result {
	t.Helper()
	return runSpoolWith(t, envs, stdin, func(e *env) { e.stdinTTY = tty }, args...)
}

// runSpoolWith runs spool with the environment adjusted by set (a stepped
// clock, a terminal on stderr).
func runSpoolWith(t *testing.T, envs map[string]string, stdin string, set func(*env), args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	start := time.Now()
	e := env{
		stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, redact: true,
		getenv: func(k string) (string, bool) { v, ok := envs[k]; return v, ok },
	}
	if set != nil {
		set(&e)
	}
	code := run(ctx, e, args)
	return result{stdout: out.String(), stderr: errb.String(), code: code, took: time.Since(start)}
}

// envs is the environment that points spool at the sidecar.
func (s *testSidecar) envs() map[string]string {
	return map[string]string{envAdmin: s.admin, envApp: s.app}
}

// golden compares a run with testdata/name.golden (rewritten with -update):
// the command line, stdout, stderr and exit code. Output is redacted
// (times, ages, generated ids: env.redact); the sidecar's addresses come
// from the environment and so do not appear.
func golden(t *testing.T, name string, r result, args ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("$ spool " + strings.Join(quoteArgs(args), " ") + "\n")
	b.WriteString(r.stdout)
	if r.stderr != "" {
		b.WriteString("[stderr]\n" + r.stderr)
	}
	b.WriteString("[exit " + string(rune('0'+r.code)) + "]\n")
	got := b.String()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the tests with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output of spool %s differs from %s (run with -update if the change is intended):\n--- got\n%s--- want\n%s", strings.Join(args, " "), path, got, want)
	}
}

// check runs spool and compares with a golden file.
func (s *testSidecar) check(name string, wantCode int, args ...string) result {
	s.t.Helper()
	return s.checkIn(name, "", false, wantCode, args...)
}

func (s *testSidecar) checkIn(name, stdin string, tty bool, wantCode int, args ...string) result {
	s.t.Helper()
	r := s.spool(stdin, tty, args...)
	if r.code != wantCode {
		s.t.Errorf("spool %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
	}
	golden(s.t, name, r, args...)
	return r
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " '\"{}") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		<-tick.C
	}
}

// waitEnd waits until topic holds n messages in all: a publish or a
// redrive is acknowledged once durable, but the log end that ListTopics
// reports moves at the next group commit.
func (s *testSidecar) waitEnd(topic string, n int64) {
	s.t.Helper()
	eventually(s.t, 10*time.Second, fmt.Sprintf("%s holds %d messages", topic, n), func() bool { return sum(s.endOffsets(topic)) == n })
}

// endOffsets are the log ends of a topic's partitions.
func (s *testSidecar) endOffsets(topic string) []int64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.adminC.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, tp := range resp.GetTopics() {
		if tp.GetName() == topic {
			var ends []int64
			for _, p := range tp.GetPartitions() {
				ends = append(ends, p.GetEndOffset())
			}
			return ends
		}
	}
	s.t.Fatalf("no topic %s", topic)
	return nil
}

func sum(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// consumers is the number of consumers of group connected now.
func (s *testSidecar) consumers(group string) uint32 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.adminC.ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: group})
	if err != nil {
		s.t.Fatal(err)
	}
	var n uint32
	for _, g := range resp.GetGroups() {
		n = max(n, g.GetConsumers())
	}
	return n
}

// subscribe runs a Go SDK consumer of group on topic with handler h until
// the returned stop is called (stop waits until the sidecar sees it gone).
func (s *testSidecar) subscribe(group, topic string, h spool.Handler, opts ...spool.SubscribeOption) (stop func()) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := spool.Dial(ctx, s.app)
	if err != nil {
		s.t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = c.Subscribe(ctx, group, []string{topic}, h, append([]spool.SubscribeOption{spool.WithLogger(discardLogger())}, opts...)...)
	})
	eventually(s.t, 10*time.Second, "the consumer connected", func() bool { return s.consumers(group) > 0 })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			c.Close()
			eventually(s.t, 10*time.Second, "the consumer gone", func() bool { return s.consumers(group) == 0 })
		})
	}
	s.t.Cleanup(stop)
	return stop
}

// deadLetterAll publishes nothing; it runs a consumer of jobs/workers that
// dead-letters every message until the DLQ holds want entries, then stops it.
func (s *testSidecar) deadLetterAll(want int64) {
	s.t.Helper()
	stop := s.subscribe(workers, jobsT, func(context.Context, *spool.Message) error {
		return spool.DeadLetter("invalid email address")
	}, spool.WithConcurrency(1), spool.WithAppVersion(appVersion))
	eventually(s.t, 20*time.Second, "dead letters in "+jobsDLQ, func() bool { return sum(s.endOffsets(jobsDLQ)) >= want })
	stop()
}
