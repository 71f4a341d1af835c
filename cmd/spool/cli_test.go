package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/spoolmq/spool/internal/buildinfo"
	spool "github.com/spoolmq/spool/sdk/go"
)

// TestTopicsGroupsAndOffsets: produce, topic list/describe, group
// list/describe and reset-offsets against a real sidecar, as tables and
// JSON.
func TestTopicsGroupsAndOffsets(t *testing.T) {
	s := startSidecar(t)

	s.check("produce_args", 0, "produce", ordersT, `{"order":1}`, `{"order":2}`, "--key", "order-1", "--header", "source=cli")
	s.check("produce_id_json", 0, "produce", ordersT, `{"order":3}`, "--key", "order-3", "--id", "order-3-placed", "-o", "json")
	s.checkIn("produce_stdin", "a\nb\nc\n", false, 0, "produce", ordersT, "--key", "batch")
	file := filepath.Join(t.TempDir(), "order.json")
	if err := os.WriteFile(file, []byte("{\n  \"order\": 9\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := s.spool("", false, "produce", ordersT, "--file", file, "--key", "order-9", "--id", "order-9-placed")
	if r.code != 0 || !strings.Contains(r.stdout, "order-9-placed") {
		t.Fatalf("produce --file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	s.waitEnd(ordersT, 7)

	s.check("topic_list", 0, "topic", "list")
	s.check("topic_list_json", 0, "topic", "list", "-o", "json")
	s.check("topic_describe", 0, "topic", "describe", ordersT)
	s.check("topic_describe_yaml", 0, "topic", "describe", ordersT, "-o", "yaml")
	s.check("topic_describe_unknown", 1, "topic", "describe", "nope")

	s.check("group_list", 0, "group", "list")
	s.check("group_describe", 0, "group", "describe", billing)
	s.check("group_describe_json", 0, "group", "describe", billing, "-o", "json")
	s.check("group_describe_unknown", 1, "group", "describe", "nope")

	s.check("reset_dry_run", 0, "group", "reset-offsets", billing, "--topic", ordersT, "--to-latest", "--dry-run")
	if r := s.spool("", false, "group", "describe", billing, "-o", "json"); !strings.Contains(r.stdout, `"lag_messages": 7`) {
		t.Errorf("a dry run moved the offsets:\n%s", r.stdout)
	}
	s.check("reset_no_tty", 2, "group", "reset-offsets", billing, "--topic", ordersT, "--to-latest")
	s.check("reset_latest", 0, "group", "reset-offsets", billing, "--topic", ordersT, "--to-latest", "--yes")
	s.check("group_describe_after_reset", 0, "group", "describe", billing)
	s.checkIn("reset_prompt_declined", "n\n", true, 1, "group", "reset-offsets", billing, "--topic", ordersT, "--to-earliest")
	s.checkIn("reset_prompt_confirmed", "y\n", true, 0, "group", "reset-offsets", billing, "--topic", ordersT, "--to-earliest", "-o", "json")
	s.check("reset_to_time", 0, "group", "reset-offsets", billing, "--topic", ordersT, "--to-time", "2099-01-01T00:00:00Z", "--dry-run")
	s.check("reset_to_offset_partition", 0, "group", "reset-offsets", billing, "--topic", ordersT, "--partition", "2", "--to-offset", "1", "--yes")
	s.check("reset_to_offset_all_dry_run", 0, "group", "reset-offsets", billing, "--topic", ordersT, "--to-offset", "1", "--dry-run", "-o", "json")
	s.check("reset_bad_partition", 1, "group", "reset-offsets", billing, "--topic", ordersT, "--partition", "7", "--to-offset", "0", "--yes")
	s.check("reset_unknown_group", 1, "group", "reset-offsets", "nope", "--topic", ordersT, "--to-latest", "--yes")
	s.check("reset_two_targets", 2, "group", "reset-offsets", billing, "--topic", ordersT, "--to-latest", "--to-earliest")
	s.check("reset_bad_time", 2, "group", "reset-offsets", billing, "--topic", ordersT, "--to-time", "yesterday")

	// A consumer connected: spoold refuses, and spool says why and what to do.
	release := make(chan struct{})
	stop := s.subscribe(billing, ordersT, func(ctx context.Context, _ *spool.Message) error {
		select { // hold the deliveries so nothing changes while the reset is refused
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	s.check("reset_consumers_connected", 1, "group", "reset-offsets", billing, "--topic", ordersT, "--to-latest", "--yes")
	close(release)
	stop()
}

// TestDeadLetters: peek with filters and redrive with --dry-run, as tables
// and JSON; a dry run moves nothing, a redrive moves every match back.
func TestDeadLetters(t *testing.T) {
	s := startSidecar(t)
	// The consumer dead-letters everything. Dead-letter appends of
	// different keys may land in any order, so each step waits for its
	// dead letters before the next: the goldens see one order.
	stop := s.subscribe(workers, jobsT, func(context.Context, *spool.Message) error {
		return spool.DeadLetter("invalid email address")
	}, spool.WithConcurrency(1), spool.WithAppVersion(appVersion))
	s.check("produce_jobs", 0, "produce", jobsT, "send welcome email to ada@example.com", "--key", "user-1", "--header", "trace=abc123")
	s.waitEnd(jobsDLQ, 1)
	// One key: delivered, and dead-lettered, in order.
	s.checkIn("produce_jobs_stdin", "send receipt\nsend reminder\n", false, 0, "produce", jobsT, "--key", "user-2")
	s.waitEnd(jobsDLQ, 3)
	bin := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(bin, []byte{0, 1, 2, 0xff, 'h', 'i'}, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := s.spool("", false, "produce", jobsT, "--file", bin, "--id", "blob-1"); r.code != 0 {
		t.Fatalf("produce --file: %s", r.stderr)
	}
	s.waitEnd(jobsDLQ, 4)
	stop()
	s.waitEnd(jobsT, 4)

	s.check("dlq_peek", 0, "dlq", "peek", "--group", workers, "--topic", jobsT)
	s.check("dlq_peek_json", 0, "dlq", "peek", "--group", workers, "--topic", jobsT, "--key", "user-1", "-o", "json")
	s.check("dlq_peek_limit", 0, "dlq", "peek", "--group", workers, "--topic", jobsT, "--limit", "1", "--since", "1h")
	s.check("dlq_peek_no_match", 0, "dlq", "peek", "--group", workers, "--topic", jobsT, "--reason", "timeout")
	s.check("dlq_peek_unknown", 1, "dlq", "peek", "--group", workers, "--topic", ordersT)
	s.check("dlq_peek_missing_group", 2, "dlq", "peek", "--topic", jobsT)

	before := sum(s.endOffsets(jobsT))
	s.check("dlq_redrive_dry_run", 0, "dlq", "redrive", "--group", workers, "--topic", jobsT, "--dry-run")
	s.check("dlq_redrive_dry_run_json", 0, "dlq", "redrive", "--group", workers, "--topic", jobsT, "--key", "user-2", "--dry-run", "-o", "json")
	// A barrier: once a message published after the dry runs is visible,
	// anything they had appended would be too.
	if r := s.spool("", false, "produce", jobsT, "barrier"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	s.waitEnd(jobsT, before+1)
	if after := sum(s.endOffsets(jobsT)); after != before+1 {
		t.Fatalf("dry runs moved %d messages to %s", after-before-1, jobsT)
	}
	s.check("dlq_redrive", 0, "dlq", "redrive", "--group", workers, "--topic", jobsT, "--key", "user-2", "--rate", "1000")
	s.waitEnd(jobsT, before+3) // the 2 dead letters with key user-2
	s.check("dlq_redrive_bad_rate", 2, "dlq", "redrive", "--group", workers, "--topic", jobsT, "--rate", "0")

	// Counting and listing.
	s.check("dlq_list", 0, "dlq", "list", "--group", workers, "--topic", jobsT)
	s.check("dlq_list_json", 0, "dlq", "list", "--group", workers, "--topic", jobsT, "--key", "user-2", "-o", "json")
	s.check("dlq_list_entries", 0, "dlq", "list", "--group", workers, "--topic", jobsT, "--entries")
	r := s.check("dlq_list_entries_page1", 0, "dlq", "list", "--group", workers, "--topic", jobsT, "--entries", "--limit", "2")
	m := regexp.MustCompile(`--cursor (\S+)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("the first listing gives no cursor: %q", r.stderr)
	}
	s.check("dlq_list_entries_page2", 0, "dlq", "list", "--group", workers, "--topic", jobsT, "--entries", "--limit", "2", "--cursor", m[1])
	s.check("dlq_list_cursor_without_entries", 2, "dlq", "list", "--group", workers, "--topic", jobsT, "--cursor", m[1])
	s.check("dlq_peek_min_attempts", 0, "dlq", "peek", "--group", workers, "--topic", jobsT, "--min-attempts", "2")
	s.check("dlq_peek_bad_attempts", 2, "dlq", "peek", "--group", workers, "--topic", jobsT, "--min-attempts", "3", "--max-attempts", "2")

	// Paging: the first page says how to go on; the cursor goes on.
	r = s.check("dlq_peek_page1", 0, "dlq", "peek", "--group", workers, "--topic", jobsT, "--limit", "3")
	m = regexp.MustCompile(`--cursor (\S+)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("the first page gives no cursor: %q", r.stderr)
	}
	s.check("dlq_peek_page2", 0, "dlq", "peek", "--group", workers, "--topic", jobsT, "--limit", "3", "--cursor", m[1])
	s.check("dlq_peek_bad_cursor", 1, "dlq", "peek", "--group", workers, "--topic", jobsT, "--cursor", "c1.nope")

	// Purge: dry run, refusals, an earlier time (nothing), then everything.
	s.check("dlq_purge_dry_run", 0, "dlq", "purge", "--group", workers, "--topic", jobsT, "--dry-run")
	s.check("dlq_purge_no_tty", 2, "dlq", "purge", "--group", workers, "--topic", jobsT)
	s.checkIn("dlq_purge_declined", "n\n", true, 1, "dlq", "purge", "--group", workers, "--topic", jobsT)
	s.check("dlq_purge_before", 0, "dlq", "purge", "--group", workers, "--topic", jobsT, "--before", "2000-01-01T00:00:00Z", "--yes")
	s.check("dlq_list_before_purge", 0, "dlq", "list", "--group", workers, "--topic", jobsT, "--entries")
	s.checkIn("dlq_purge_confirmed", "y\n", true, 0, "dlq", "purge", "--group", workers, "--topic", jobsT, "-o", "json")
	s.check("dlq_peek_after_purge", 0, "dlq", "peek", "--group", workers, "--topic", jobsT)
	s.check("dlq_list_after_purge", 0, "dlq", "list", "--group", workers, "--topic", jobsT)
	s.check("dlq_redrive_after_purge", 0, "dlq", "redrive", "--group", workers, "--topic", jobsT, "--dry-run")
}

// TestRedriveRate: a redrive of n dead letters at --rate r takes about
// n/r seconds, and moves all n.
func TestRedriveRate(t *testing.T) {
	s := startSidecar(t)
	const n, rate = 20, 25
	var stdin strings.Builder
	for range n {
		stdin.WriteString("job\n")
	}
	if r := s.spool(stdin.String(), false, "produce", jobsT); r.code != 0 {
		t.Fatalf("produce: %s", r.stderr)
	}
	s.waitEnd(jobsT, n)
	s.deadLetterAll(n)
	before := sum(s.endOffsets(jobsT))
	r := s.spool("", false, "dlq", "redrive", "--group", workers, "--topic", jobsT, "--rate", "25", "-o", "json")
	if r.code != 0 {
		t.Fatalf("redrive: exit %d: %s", r.code, r.stderr)
	}
	var v redriveView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	if v.Matched != n || v.Redriven != n {
		t.Errorf("matched %d, redriven %d, want %d and %d", v.Matched, v.Redriven, n, n)
	}
	s.waitEnd(jobsT, before+n)
	want := time.Duration(n) * time.Second / rate // 800ms
	if r.took < want*9/10 || r.took > want+5*time.Second {
		t.Errorf("redriving %d at %d/s took %v, want about %v", n, rate, r.took, want)
	}
	t.Logf("redrove %d at --rate %d in %v (expected %v)", n, rate, r.took, want)
}

// TestErrors: one line on stderr, the right exit code, no stack trace.
func TestErrors(t *testing.T) {
	down := map[string]string{envAdmin: "127.0.0.1:1", envApp: "127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		code int
		args []string
	}{
		{"err_unreachable", 3, []string{"topic", "list"}},
		{"err_unreachable_produce", 3, []string{"produce", "orders", "x"}},
		{"err_unreachable_tail", 3, []string{"tail", "orders"}},
		{"err_unreachable_plan_metrics", 3, []string{"plan", "--from-metrics", "http://127.0.0.1:1/metrics", "--topic", "orders"}},
		{"err_plan_metrics_no_topic", 2, []string{"plan", "--from-metrics", "http://127.0.0.1:1/metrics"}},
		{"err_unknown_command", 2, []string{"nope"}},
		{"err_unknown_flag", 2, []string{"topic", "list", "--colour"}},
		{"err_bad_output", 2, []string{"topic", "list", "-o", "xml"}},
		{"err_missing_arg", 2, []string{"topic", "describe"}},
		{"err_plan_missing_rate", 2, []string{"plan", "--processing-time", "50ms"}},
		{"err_plan_bad_size", 2, []string{"plan", "--rate", "10", "--processing-time", "50ms", "--size", "big"}},
	} {
		r := runSpool(t, down, "", false, tc.args...)
		if r.code != tc.code {
			t.Errorf("spool %v: exit %d, want %d: %s", tc.args, r.code, tc.code, r.stderr)
		}
		if n := strings.Count(r.stderr, "\n"); n != 1 || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("spool %v: stderr is not one line:\n%s", tc.args, r.stderr)
		}
		golden(t, tc.name, r, tc.args...)
	}

	s := startSidecar(t)
	s.check("err_produce_unknown_topic", 1, "produce", "nope", "x")
	s.check("err_produce_reserved_header", 1, "produce", ordersT, "x", "--header", "spool-x=1")
	s.check("err_produce_id_many", 2, "produce", ordersT, "x", "y", "--id", "one")
}

// TestPlanSeedExample checks spool plan against the seed's worked example:
// 20,000 msgs/s × 1 KB = 20 MB/s; 7 days ≈ 12 TB, × 3 replicas ≈ 36 TB;
// 50 ms per message → 20 msgs/s per thread, 1,000 threads → 100 workers ×
// 10 threads → ≥ 100 partitions (use 120).
func TestPlanSeedExample(t *testing.T) {
	in := planInput{RatePerS: 20_000, MessageBytes: 1000, Retention: 7 * 24 * time.Hour, Replication: 3,
		Processing: 50 * time.Millisecond, HandlersPerConsumer: 10, HeadroomPct: 20, Groups: 1}
	r := sizePlan(in)
	want := planResult{
		InBytesPerS: 20_000_000, OutBytesPerS: 20_000_000, ReplicationBytesPerS: 40_000_000,
		DiskBytesPerCopy: 12_096_000_000_000, DiskBytes: 36_288_000_000_000, // ≈ 12 TB and ≈ 36 TB
		PerHandlerPerS: 20, Handlers: 1000, Consumers: 100, PartitionsMin: 100, Partitions: 120,
	}
	if r != want {
		t.Errorf("sizePlan(seed example) =\n%+v\nwant\n%+v", r, want)
	}
	if tb := (r.DiskBytesPerCopy + 5e11) / 1e12; tb != 12 {
		t.Errorf("disk per copy rounds to %d TB, the seed says about 12", tb)
	}
	if tb := (r.DiskBytes + 5e11) / 1e12; tb != 36 {
		t.Errorf("disk with replicas rounds to %d TB, the seed says about 36", tb)
	}
	// Other cases of the same arithmetic.
	for _, tc := range []struct {
		in                        planInput
		handlers, consumers, part int64
	}{
		// no headroom: the minimum
		{planInput{RatePerS: 20_000, MessageBytes: 1000, Retention: time.Hour, Replication: 1, Processing: 50 * time.Millisecond, HandlersPerConsumer: 10, Groups: 1}, 1000, 100, 100},
		// a fraction of a handler rounds up: 10/s × 150ms = 1.5 → 2
		{planInput{RatePerS: 10, MessageBytes: 1, Retention: time.Hour, Replication: 1, Processing: 150 * time.Millisecond, HandlersPerConsumer: 10, HeadroomPct: 20, Groups: 1}, 2, 1, 2},
		// the demo: 200/s × 300ms = 60 handlers, 256 per consumer → 1 consumer, 2 partitions with 20%
		{planInput{RatePerS: 200, MessageBytes: 500, Retention: time.Hour, Replication: 1, Processing: 300 * time.Millisecond, HandlersPerConsumer: 256, HeadroomPct: 20, Groups: 1}, 60, 1, 2},
	} {
		r := sizePlan(tc.in)
		if r.Handlers != tc.handlers || r.Consumers != tc.consumers || r.Partitions != tc.part {
			t.Errorf("sizePlan(%+v): handlers %d consumers %d partitions %d, want %d %d %d", tc.in, r.Handlers, r.Consumers, r.Partitions, tc.handlers, tc.consumers, tc.part)
		}
	}

	args := []string{"plan", "--rate", "20000", "--size", "1KB", "--retention", "7d", "--replication", "3", "--processing-time", "50ms"}
	r1 := runSpool(t, nil, "", false, args...)
	golden(t, "plan", r1, args...)
	for _, s := range []string{"= 20 MB/s in", "≈ 12.1 TB per copy", "≈ 36.3 TB in all", "= 20 msgs/s", "= 1,000 concurrent handlers", "= 100 consumers", "≥ 100", "→ use 120"} {
		if !strings.Contains(r1.stdout, s) {
			t.Errorf("spool plan output lacks %q", s)
		}
	}
	args = append(args, "-o", "json")
	golden(t, "plan_json", runSpool(t, nil, "", false, args...), args...)
}

func TestParseSizeAndRetention(t *testing.T) {
	for in, want := range map[string]int64{"512": 512, "512B": 512, "1KB": 1000, "1kb": 1000, "1.5MB": 1_500_000, "4KiB": 4096, "1GiB": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "KB", "-1KB", "big", "0"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) succeeded", bad)
		}
	}
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "36h": 36 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0d", "xd", "-1h", "week"} {
		if _, err := parseRetention(bad); err == nil {
			t.Errorf("parseRetention(%q) succeeded", bad)
		}
	}
}

// TestDev runs `spool dev` (a sidecar in the foreground), looks at it with
// `spool topic list`, and stops it as Ctrl-C would.
func TestDev(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := &lockedBuffer{}
	var errb lockedBuffer
	done := make(chan int, 1)
	go func() { // owned: awaited below
		done <- run(ctx, env{stdin: strings.NewReader(""), stdout: out, stderr: &errb, getenv: func(string) (string, bool) { return "", false }},
			[]string{"dev", "--app-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn"})
	}()
	re := regexp.MustCompile(`--admin (\S+);`)
	var admin string
	eventually(t, 20*time.Second, "spool dev says it runs", func() bool {
		select {
		case code := <-done:
			t.Fatalf("spool dev exited with %d: %s", code, errb.String())
		default:
		}
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			admin = m[1]
		}
		return m != nil
	})
	r := runSpool(t, map[string]string{envAdmin: admin}, "", false, "topic", "list")
	golden(t, "dev_topic_list", r, "topic", "list")
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("spool dev exited with %d after Ctrl-C, want 0: %s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("spool dev did not stop within 20s of Ctrl-C")
	}
}

// TestCompletion: cobra's completion scripts, and topic names completed
// from the sidecar.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := runSpool(t, nil, "", false, "completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, "spool") || len(r.stdout) < 500 {
			t.Errorf("spool completion %s: exit %d, %d bytes: %s", sh, r.code, len(r.stdout), r.stderr)
		}
	}
	s := startSidecar(t)
	r := s.spool("", false, "__complete", "topic", "describe", "")
	for _, want := range []string{ordersT, jobsT, jobsDLQ} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("completing topic describe: %q lacks %s", r.stdout, want)
		}
	}
	r = s.spool("", false, "__complete", "group", "describe", "")
	if !strings.Contains(r.stdout, billing+"\n") || !strings.Contains(r.stdout, workers+"\n") {
		t.Errorf("completing group describe: %q lacks the groups", r.stdout)
	}
	r = s.spool("", false, "__complete", "dlq", "peek", "--group", "")
	if !strings.Contains(r.stdout, workers+"\n") {
		t.Errorf("completing dlq peek --group: %q lacks the groups", r.stdout)
	}
	r = s.spool("", false, "__complete", "tail", "")
	if !strings.Contains(r.stdout, ordersT+"\n") {
		t.Errorf("completing tail: %q lacks the topics", r.stdout)
	}
}

// TestEveryCommandHasExamples: --help shows examples on every command of
// spool's own (cobra's completion and help commands have their own text).
func TestEveryCommandHasExamples(t *testing.T) {
	a := &app{env: env{getenv: func(string) (string, bool) { return "", false }}}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "completion" || c.Name() == "help" {
			return
		}
		if c.Example == "" {
			t.Errorf("%s has no examples in its --help", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := a.rootCommand()
	root.InitDefaultCompletionCmd()
	walk(root)
	r := runSpool(t, nil, "", false, "group", "reset-offsets", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "--to-earliest") {
		t.Errorf("spool group reset-offsets --help: exit %d\n%s", r.code, r.stdout)
	}
}

// lockedBuffer is a bytes buffer written by one goroutine and read by another.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var _ io.Writer = (*lockedBuffer)(nil)

// TestClusterStatus: a single sidecar answers `spool cluster status` with
// itself only, as a table and as JSON (the host name is the machine's, so
// the fields are checked rather than a golden file).
func TestClusterStatus(t *testing.T) {
	s := startSidecar(t)
	r := s.spool("", false, "cluster", "status", "-o", "json")
	if r.code != 0 {
		t.Fatalf("spool cluster status: exit %d: %s", r.code, r.stderr)
	}
	var v clusterView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("spool cluster status -o json: %v\n%s", err, r.stdout)
	}
	if v.ClusterID != "single-node" || v.NodeID == "" || v.Version != buildinfo.Version || len(v.Nodes) != 1 || v.Nodes[0].ID != v.NodeID || !v.Nodes[0].Reachable {
		t.Fatalf("a single sidecar's cluster status: %+v", v)
	}
	r = s.spool("", false, "cluster", "status")
	if r.code != 0 || !strings.Contains(r.stdout, "cluster: single-node") || !strings.Contains(r.stdout, "REACHABLE") {
		t.Fatalf("spool cluster status (table): exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if v.ClusterVersion != 0 || v.FinalizationPending || strings.Contains(r.stdout, "cluster version:") {
		t.Fatalf("a single sidecar reports a cluster version: %+v\n%s", v, r.stdout)
	}
	// Finalizing: refused by a single sidecar (it has no cluster version), and not without --yes.
	s.check("cluster_finalize_single_node", 1, "cluster", "finalize", "--yes")
	s.check("cluster_finalize_unconfirmed", 2, "cluster", "finalize")
	// A replica move: refused by a single sidecar, and usage errors.
	s.check("cluster_move_single_node", 1, "cluster", "move", ordersT, "0", "--to", "1,2,3")
	s.check("cluster_move_dry_run_single_node", 1, "cluster", "move", ordersT, "0", "--to", "1,2,3", "--dry-run")
	s.check("cluster_move_no_target", 2, "cluster", "move", ordersT, "0")
	s.check("cluster_move_bad_partition", 2, "cluster", "move", ordersT, "x", "--to", "1,2,3")
	s.check("cluster_move_bad_node", 1, "cluster", "move", ordersT, "0", "--to", "1,two,3")
}
