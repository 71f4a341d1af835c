package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// TestTopicAdmin: topic create, alter and delete against a real sidecar,
// as tables, JSON and YAML, with the refusals and their exit codes.
func TestTopicAdmin(t *testing.T) {
	s := startSidecar(t)
	s.check("topic_create", 0, "topic", "create", "audit", "--partitions", "2", "--retention", "3d")
	s.check("topic_create_json", 0, "topic", "create", "clicks", "--partitions", "1", "--retention", "forever", "--retention-bytes", "1GiB", "-o", "json")
	s.check("topic_create_same_again", 0, "topic", "create", "audit", "--partitions", "2", "--retention", "3d")
	s.check("topic_create_exists", 1, "topic", "create", "audit", "--partitions", "4")
	s.check("topic_create_bad_name", 1, "topic", "create", "bad/name", "--partitions", "1")
	s.check("topic_create_no_partitions", 2, "topic", "create", "x")
	s.check("topic_alter", 0, "topic", "alter", "audit", "--retention", "1d", "--retention-bytes", "500MB", "-o", "yaml")
	s.check("topic_alter_nothing", 2, "topic", "alter", "audit")
	s.check("topic_alter_declared", 1, "topic", "alter", ordersT, "--retention", "1d")
	s.check("topic_alter_unknown", 1, "topic", "alter", "nope", "--retention", "1d")
	s.check("topic_delete_no_tty", 2, "topic", "delete", "audit")
	s.checkIn("topic_delete_declined", "n\n", true, 1, "topic", "delete", "audit")
	s.check("topic_delete", 0, "topic", "delete", "clicks", "--yes")
	s.check("topic_delete_in_use", 1, "topic", "delete", jobsT, "--yes")
	// A created topic takes messages at once.
	s.check("produce_created_topic", 0, "produce", "audit", "hello", "--key", "k", "--id", "audit-1")
	s.waitEnd("audit", 1)
	s.check("topic_list_with_created", 0, "topic", "list")
}

// TestRedriveDryRunAndRate: a dry run moves nothing; a redrive moves every
// entry once, at no more than --rate (measured by the append times of the
// redriven messages in the log, not by the wall clock of the test), and
// draws a progress bar on a terminal.
func TestRedriveDryRunAndRate(t *testing.T) {
	s := startSidecar(t)
	const n, rate = 30, 20
	var stdin strings.Builder
	for i := range n {
		fmt.Fprintf(&stdin, "job %d\n", i)
	}
	if r := s.spool(stdin.String(), false, "produce", jobsT, "--key", "k"); r.code != 0 {
		t.Fatalf("produce: %s", r.stderr)
	}
	s.waitEnd(jobsT, n)
	s.deadLetterAll(n)
	before := sum(s.endOffsets(jobsT))

	r := s.spool("", false, "dlq", "redrive", "--group", workers, "--topic", jobsT, "--dry-run", "-o", "json")
	var dry redriveView
	if err := json.Unmarshal([]byte(r.stdout), &dry); r.code != 0 || err != nil {
		t.Fatalf("dry run: exit %d, %v: %s", r.code, err, r.stderr)
	}
	if dry.Matched != n || dry.Redriven != 0 || len(dry.Sample) != n {
		t.Fatalf("dry run: matched %d, redriven %d, sample %d; want %d, 0, %d", dry.Matched, dry.Redriven, len(dry.Sample), n, n)
	}
	// A barrier: once a message published after the dry run is visible,
	// anything it had appended would be too.
	if r := s.spool("", false, "produce", jobsT, "barrier", "--key", "barrier"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	s.waitEnd(jobsT, before+1)
	if after := sum(s.endOffsets(jobsT)); after != before+1 {
		t.Fatalf("the dry run moved %d messages", after-before-1)
	}

	r = runSpoolWith(t, s.envs(), "", func(e *env) { e.stderrTTY = true },
		"dlq", "redrive", "--group", workers, "--topic", jobsT, "--rate", fmt.Sprint(rate), "-o", "json")
	var v redriveView
	if err := json.Unmarshal([]byte(r.stdout), &v); r.code != 0 || err != nil {
		t.Fatalf("redrive: exit %d, %v: %s", r.code, err, r.stderr)
	}
	if v.Matched != n || v.Redriven != n {
		t.Fatalf("matched %d, redriven %d, want %d and %d", v.Matched, v.Redriven, n, n)
	}
	if !strings.Contains(r.stderr, "redrive [") || !strings.Contains(r.stderr, "100%") {
		t.Errorf("no progress bar on a terminal: %q", r.stderr)
	}
	s.waitEnd(jobsT, before+1+n)

	// The append times of the redriven messages: n messages at most rate
	// per second span at least (n-1)/rate seconds.
	times := s.appendTimes(jobsT, 0, before+1, n)
	// The log stamps a message when its appender writes it, so a stalled
	// appender (a loaded machine) can bunch a few stamps together: the
	// bounds leave room for that, and still fail a redrive that is not
	// paced (it appends all n within milliseconds).
	span := time.Duration(times[n-1]-times[0]) * time.Millisecond
	minSpan := time.Duration(n-1) * time.Second / rate
	if span < minSpan*8/10 {
		t.Errorf("%d messages redriven at --rate %d were appended within %v; at that rate they take at least %v", n, rate, span, minSpan)
	}
	// And no burst: at most 1.5 × rate appends stamped within any second.
	for i := range times {
		k := 0
		for j := i; j < len(times) && times[j]-times[i] < 1000; j++ {
			k++
		}
		if k > rate*3/2 {
			t.Errorf("%d redriven messages appended within one second from #%d, --rate %d", k, i, rate)
			break
		}
	}
	t.Logf("%d messages at --rate %d: appended over %v (at least %v expected), command took %v", n, rate, span, minSpan, r.took)
}

// appendTimes returns the append times (Unix ms) of n records of topic's
// partition p from offset on, read through AdminService.Tail.
func (s *testSidecar) appendTimes(topic string, p int32, offset int64, n int) []int64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := s.adminC.Tail(ctx, &spoolv1.TailRequest{Topic: topic, Partitions: []int32{p}, From: &spoolv1.TailRequest_Offset{Offset: offset}})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []int64
	for len(out) < n {
		ev, err := stream.Recv()
		if err != nil {
			s.t.Fatalf("tail after %d records: %v", len(out), err)
		}
		out = append(out, ev.GetRecord().GetTimeMs())
	}
	return out
}

// TestTail: spool tail from an offset, a time and the beginning (golden),
// live from now, and with a group's progress and dead letters.
func TestTail(t *testing.T) {
	s := startSidecar(t)
	for i, key := range []string{"a", "b", "c", "d"} {
		if r := s.spool("", false, "produce", ordersT, fmt.Sprintf(`{"order":%d}`, i), "--key", key, "--id", "order-"+key, "--header", "source=cli"); r.code != 0 {
			t.Fatal(r.stderr)
		}
	}
	s.waitEnd(ordersT, 4)
	s.check("tail_from_offset", 0, "tail", ordersT, "--from-offset", "0", "--limit", "4")
	s.check("tail_partition_json", 0, "tail", ordersT, "--from-beginning", "--partition", "0", "--limit", "1", "-o", "json")
	s.check("tail_from_time_headers", 0, "tail", ordersT, "--from-time", "2000-01-01T00:00:00Z", "--limit", "2", "--headers")
	s.check("tail_unknown_topic", 1, "tail", "nope")
	s.check("tail_bad_partition", 1, "tail", ordersT, "--partition", "9")
	s.check("tail_two_starts", 2, "tail", ordersT, "--from-offset", "1", "--from-beginning")

	// Live, from now: messages published after the tail started. The test
	// cannot know when the sidecar has taken "now", so it publishes until
	// the tail has seen two.
	out, done, stop := s.spoolBackground("tail", ordersT, "--limit", "2", "-o", "json")
	defer stop()
	eventually(t, 20*time.Second, "the live tail saw 2 messages", func() bool {
		select {
		case <-done:
			return true
		default:
		}
		if r := s.spool("", false, "produce", ordersT, "live", "--key", "live"); r.code != 0 {
			t.Fatal(r.stderr)
		}
		return false
	})
	if n := strings.Count(out.String(), `"event":"message"`); n != 2 || !strings.Contains(out.String(), `"payload":"live"`) {
		t.Fatalf("live tail printed:\n%s", out.String())
	}

	// With a group: each step of its deliveries, its progress (the
	// committed offset passing the message) and its dead letters, as they
	// happen.
	out, _, stop2 := s.spoolBackground("tail", jobsT, "--group", workers, "-o", "json")
	defer stop2()
	stopConsumer := s.subscribe(workers, jobsT, func(context.Context, *spool.Message) error {
		return spool.DeadLetter("invalid email address")
	}, spool.WithConcurrency(1), spool.WithConsumerName("worker-1"))
	defer stopConsumer()
	progressed := func() bool { // a progress event past the first message
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var ev tailEventView
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "progress" && ev.Committed != nil && *ev.Committed >= 1 {
				return true
			}
		}
		return false
	}
	eventually(t, 20*time.Second, "the group tail saw a dead letter and the group's progress", func() bool {
		if strings.Contains(out.String(), `"event":"dead_letter"`) && progressed() &&
			strings.Contains(out.String(), `"step":"delivered"`) && strings.Contains(out.String(), `"step":"dead_letter"`) {
			return true
		}
		if r := s.spool("", false, "produce", jobsT, "job", "--key", "user-9"); r.code != 0 {
			t.Fatal(r.stderr)
		}
		return false
	})
	var sawMessage bool
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev tailEventView
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not one JSON object per line: %q: %v", line, err)
		}
		switch ev.Event {
		case "message":
			sawMessage = true
		case "dead_letter":
			if ev.DeadLetter == nil || ev.DeadLetter.Reason != "invalid email address" || ev.Group != workers {
				t.Errorf("dead letter event: %+v", ev)
			}
		case "delivery":
			switch {
			case ev.ID == "" || ev.Offset == nil || ev.Attempt != 1 || ev.Group != workers:
				t.Errorf("delivery step without its message, attempt or group: %+v", ev)
			case ev.Step == "delivered" && ev.Consumer != "worker-1":
				t.Errorf("delivered step without the consumer's name: %+v", ev)
			case ev.Step == "dead_letter" && ev.Reason != "invalid email address":
				t.Errorf("dead_letter step without the app's reason: %+v", ev)
			case ev.Step != "delivered" && ev.Step != "dead_letter":
				t.Errorf("unexpected delivery step %q: %+v", ev.Step, ev)
			}
		}
	}
	if !sawMessage {
		t.Errorf("the group tail printed no message event:\n%s", out.String())
	}
}

// spoolBackground runs spool until it exits (done closes) or stop is
// called: stop cancels it, as Ctrl-C does, waits for it and checks that
// it exited 0.
func (s *testSidecar) spoolBackground(args ...string) (out *lockedBuffer, done <-chan struct{}, stop func()) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = &lockedBuffer{}
	var errb lockedBuffer
	exited := make(chan struct{})
	var code int
	envs := s.envs()
	go func() { // owned: stop awaits it
		defer close(exited)
		code = run(ctx, env{stdin: strings.NewReader(""), stdout: out, stderr: &errb, redact: true,
			getenv: func(k string) (string, bool) { v, ok := envs[k]; return v, ok }}, args)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				s.t.Errorf("spool %v did not stop within 10s of Ctrl-C", args)
				return
			}
			if code != 0 {
				s.t.Errorf("spool %v exited %d: %s", args, code, errb.String())
			}
		})
	}
	return out, exited, stop
}

// metricsPage is a sidecar's /metrics as spool plan reads it.
func metricsPage(published, bytes, acks, handleSum, handleCount, lag0, lag1, lagS float64) string {
	return fmt.Sprintf(`# TYPE spool_publish_messages_total counter
spool_publish_messages_total{topic="orders"} %g
spool_publish_messages_total{topic="other"} 5
# TYPE spool_publish_bytes_total counter
spool_publish_bytes_total{topic="orders"} %g
# TYPE spool_settlements_total counter
spool_settlements_total{group="billing",outcome="ack",topic="orders"} %g
spool_settlements_total{group="billing",outcome="retry",topic="orders"} 77
# TYPE spool_handle_latency_seconds histogram
spool_handle_latency_seconds_bucket{group="billing",topic="orders",le="+Inf"} %g
spool_handle_latency_seconds_sum{group="billing",topic="orders"} %g
spool_handle_latency_seconds_count{group="billing",topic="orders"} %g
# TYPE spool_lag_messages gauge
spool_lag_messages{group="billing",partition="0",topic="orders"} %g
spool_lag_messages{group="billing",partition="1",topic="orders"} %g
# TYPE spool_lag_seconds gauge
spool_lag_seconds{group="billing",partition="0",topic="orders"} %g
spool_lag_seconds{group="billing",partition="1",topic="orders"} 1
# TYPE spool_consumers gauge
spool_consumers{group="billing"} 1
`, published, bytes, acks, handleCount, handleSum, handleCount, lag0, lag1, lagS)
}

// TestPlanFromMetrics: spool plan --from-metrics against two readings of
// a /metrics page 10 s apart (a stepped clock): 20,000 published (2,000/s)
// of 1,000 bytes, 15,000 acked in 50 ms each, lag +5,000 and 20 s older.
// Arriving 2,000/s × 50 ms = 100 handlers, 10 consumers, ≥ 10 partitions:
// the topic's 2 partitions and 1 consumer are not enough, and the lag
// heads past 7 days.
func TestPlanFromMetrics(t *testing.T) {
	var scrapes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if scrapes.Add(1) == 1 {
			fmt.Fprint(w, metricsPage(1000, 1_000_000, 900, 45, 900, 100, 100, 5))
			return
		}
		fmt.Fprint(w, metricsPage(21_000, 21_000_000, 15_900, 795, 15_900, 2_600, 2_600, 25))
	}))
	defer srv.Close()
	var tick atomic.Int64
	clock := func() time.Time { return time.Unix(1_800_000_000+10*tick.Add(1), 0) }
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"plan_from_metrics", []string{"plan", "--from-metrics", srv.URL + "/metrics", "--topic", ordersT, "--group", billing, "--window", "1ms"}},
		{"plan_from_metrics_json", []string{"plan", "--from-metrics", srv.URL + "/metrics", "--topic", ordersT, "--group", billing, "--window", "1ms", "-o", "json"}},
	} {
		scrapes.Store(0)
		r := runSpoolWith(t, nil, "", func(e *env) { e.now = clock }, tc.args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, r.code, r.stderr)
		}
		r.stdout = strings.ReplaceAll(r.stdout, srv.URL, "http://spoold")
		golden(t, tc.name, r, append([]string{"plan", "--from-metrics", "http://spoold/metrics"}, tc.args[3:]...)...)
	}
	scrapes.Store(0)
	r := runSpoolWith(t, nil, "", func(e *env) { e.now = clock }, "plan", "--from-metrics", srv.URL+"/metrics", "--topic", ordersT, "--group", billing, "--window", "1ms", "-o", "json")
	var mp metricsPlan
	if err := json.Unmarshal([]byte(r.stdout), &mp); err != nil {
		t.Fatal(err)
	}
	if mp.ArrivalPerS != 2000 || mp.MessageBytes != 1000 || mp.ProcessingMs != 50 || mp.Plan.Result.Handlers != 100 || mp.Plan.Result.Consumers != 10 ||
		mp.Partitions != 2 || mp.EnoughPartitions || mp.EnoughConsumers || !mp.HeadingPastRetained {
		t.Errorf("from metrics: %+v", mp)
	}

	// A real sidecar's /metrics (its admin address), while messages are
	// published: the names spool reads are the ones spoold exports.
	s := startSidecar(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+s.app, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pub := spoolv1.NewPublisherServiceClient(conn)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			_, err := pub.Publish(ctx, &spoolv1.PublishRequest{Topic: ordersT, Messages: []*spoolv1.PublishMessage{{Payload: []byte(strings.Repeat("x", 500))}}})
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				t.Errorf("publish: %v", err)
				return
			}
		}
	})
	r = runSpool(t, nil, "", false, "plan", "--from-metrics", "http://"+s.admin+"/metrics", "--topic", ordersT, "--group", billing, "--window", "500ms", "--processing-time", "20ms", "-o", "json")
	cancel()
	wg.Wait()
	if r.code != 0 {
		t.Fatalf("plan from a real sidecar: exit %d: %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &mp); err != nil {
		t.Fatal(err)
	}
	// The message size is the change of the bytes counter over that of the
	// messages counter; a scrape can fall between the two increments of one
	// publish, so over a short window it may be a few bytes under 500 (once,
	// 492 with 64 messages in the window).
	if mp.PublishedPerS <= 0 || mp.MessageBytes < 450 || mp.Partitions != 3 || mp.Plan.Rate < 1 {
		t.Errorf("from a real sidecar: %+v", mp)
	}
	t.Logf("real sidecar: published %.0f msgs/s of %d bytes, lag growth %.0f/s", mp.PublishedPerS, mp.MessageBytes, mp.LagGrowthPerS)
}

// TestGroupShowsBreakersAndParkedKeys: a handler whose downstream fails
// opens that downstream's breaker, and `spool group describe` says so.
func TestGroupShowsBreakersAndParkedKeys(t *testing.T) {
	s := startSidecar(t)
	stop := s.subscribe(workers, jobsT, func(context.Context, *spool.Message) error {
		return spool.RetryDownstream("mailer", 10*time.Millisecond, errors.New("503 from the mail provider"))
	}, spool.WithConcurrency(4))
	defer stop()
	if r := s.spool("a\nb\nc\n", false, "produce", jobsT, "--key", "user-1"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	var v []groupView
	sawParked := false
	eventually(t, 20*time.Second, "the breaker of mailer shows in group describe", func() bool {
		r := s.spool("", false, "group", "describe", workers, "-o", "json")
		if r.code != 0 {
			t.Fatalf("group describe: %s", r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || len(v) != 1 {
			t.Fatalf("group describe -o json: %v\n%s", err, r.stdout)
		}
		sawParked = sawParked || v[0].ParkedKeys > 0
		return len(v[0].Breakers) == 1 && v[0].Breakers[0].Downstream == "mailer" && v[0].Breakers[0].State != "closed"
	})
	r := s.spool("", false, "group", "list")
	if !strings.Contains(r.stdout, "mailer:") {
		t.Errorf("group list does not show the open breaker:\n%s", r.stdout)
	}
	t.Logf("breakers %+v, parked keys seen: %v", v[0].Breakers, sawParked)
}
