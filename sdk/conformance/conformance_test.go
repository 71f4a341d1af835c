package conformance

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testredis"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// scenario is one line of the language-neutral list (docs/sdks.md says
// what each checks); it runs once per SDK.
type scenario struct {
	name string
	run  func(t *testing.T, l *language, redis *testredis.Server)
}

var scenarios = []scenario{
	{"ack", testAck},
	{"retry_backoff", testRetryBackoff},
	{"dead_letter", testDeadLetter},
	{"release", testRelease},
	{"lease_extension", testLeaseExtension},
	{"key_order", testKeyOrder},
	{"app_killed", testAppKilled},
	{"reconnect", testReconnect},
	{"drain", testDrain},
	{"bad_input", testBadInput},
	{"publish_batch", testPublishBatch},
}

// TestConformance runs every scenario with every SDK's conformance app
// against a real spoold and a real Redis: TestConformance/<scenario>/<lang>.
func TestConformance(t *testing.T) {
	langs := selected(t)
	redis := testredis.Start(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, l := range langs {
				t.Run(l.name, func(t *testing.T) {
					l.ready(t)
					sc.run(t, l, redis)
				})
			}
		})
	}
}

// 1. A message is delivered once, acked, and never delivered again.
func testAck(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{visibility: "1s"})
	want := ids(e.publish(msgs(5, "k", "ack")...))
	a := e.startApp("consumer", e.consumer(4, 4, 0))
	a.await("every message acked", 30*time.Second, all(want, "finish", "ack"))
	e.awaitLag(10 * time.Second) // the sidecar holds nothing it could redeliver
	evs := a.terminate()
	for _, id := range want {
		ss := starts(evs, id)
		if len(ss) != 1 || ss[0].Attempt != 1 {
			t.Errorf("message %s: want one delivery at attempt 1, got %+v", id, ss)
		}
	}
	if n := len(count(evs, "start", "")); n != len(want) {
		t.Errorf("deliveries of %d ids, published %d", n, len(want))
	}
	checkExit(t, evs, 0)
}

// checkExit checks the app's exit event: no settlement refused by the
// sidecar, and at least minReleased deliveries released.
func checkExit(t *testing.T, evs []event, minReleased int64) event {
	t.Helper()
	for _, ev := range evs {
		if ev.Ev == "exit" {
			if ev.SettleErrors != 0 {
				t.Errorf("the sidecar refused %d settlements (a lease lost or a settlement sent twice)", ev.SettleErrors)
			}
			if ev.Released < minReleased {
				t.Errorf("released %d deliveries at the drain, want at least %d", ev.Released, minReleased)
			}
			return ev
		}
	}
	t.Errorf("the app wrote no exit event")
	return event{}
}

// 2. A failing handler is retried after the backoff (or the handler's own
// retry-after), with attempt numbers 1, 2, 3 ..., the previous error as
// last error and a growing fencing token.
func testRetryBackoff(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{maxAttempts: 10, backoff: "{base: 100ms, max: 1s, multiplier: 2}"})
	a := e.startApp("consumer", e.consumer(2, 2, 0))
	// A first message warms the app up (a cold JVM takes 100 ms for its
	// first handler): the retry-after check below has 50 ms of slack.
	warm := e.publish(spool.OutMessage{Key: []byte("warm"), Payload: []byte("ack")})[0].ID
	a.await("a first message acked", 30*time.Second, all([]string{warm}, "finish", "ack"))
	rs := e.publish(
		spool.OutMessage{Key: []byte("plain"), Payload: []byte("fail=3")},
		spool.OutMessage{Key: []byte("after"), Payload: []byte("fail=2 retry_after=400")},
	)
	plain, after := rs[0].ID, rs[1].ID
	evs := a.await("both messages acked", 30*time.Second, all([]string{plain, after}, "finish", "ack"))
	for id, attempts := range map[string]int{plain: 4, after: 3} {
		ss := starts(evs, id)
		if len(ss) != attempts {
			t.Fatalf("message %s: want %d deliveries, got %d: %+v", id, attempts, len(ss), ss)
		}
		for i, s := range ss {
			if s.Attempt != i+1 {
				t.Errorf("message %s delivery %d: attempt %d, want %d", id, i+1, s.Attempt, i+1)
			}
			if i == 0 {
				if s.LastError != "" {
					t.Errorf("message %s attempt 1: last error %q, want none", id, s.LastError)
				}
				continue
			}
			if !strings.Contains(s.LastError, fmt.Sprintf("fail attempt %d", i)) {
				t.Errorf("message %s attempt %d: last error %q, want the previous attempt's (fail attempt %d)", id, s.Attempt, s.LastError, i)
			}
			if s.Token <= ss[i-1].Token {
				t.Errorf("message %s attempt %d: fencing token %d not above the previous %d", id, s.Attempt, s.Token, ss[i-1].Token)
			}
			if id == after {
				// From the handler's return (its finish event, before the
				// SDK sends the nack) to the next delivery's start; 50 ms
				// of slack for the time between the two clocks' readings
				// (the sidecar dates the nack when it applies it).
				if gap := s.TimeMs - finishOf(evs, id, i).TimeMs; gap < 350 {
					t.Errorf("message %s attempt %d started %d ms after attempt %d returned its retry-after of 400 ms", id, s.Attempt, gap, i)
				}
			}
		}
	}
}

// 3. A dead-lettered message reaches the subscription's DLQ with the
// handler's reason; one that fails max_attempts times with
// max_attempts_exceeded and its attempt history. Read through the admin API.
func testDeadLetter(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{maxAttempts: 2})
	rs := e.publish(
		spool.OutMessage{Key: []byte("poison"), Payload: []byte("dead=bad-schema")},
		spool.OutMessage{Key: []byte("failing"), Payload: []byte("fail=99")},
	)
	poison, failing := rs[0].ID, rs[1].ID
	a := e.startApp("consumer", e.consumer(2, 2, 0))
	a.await("the poison message dead-lettered and the failing one tried twice", 30*time.Second, func(evs []event) bool {
		return count(evs, "finish", "dead")[poison] == 1 && count(evs, "finish", "retry")[failing] == 2
	})
	admin := e.node.adminClient()
	var entries []*spoolv1.DeadLetter
	deadline := time.Now().Add(20 * time.Second)
	for len(entries) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("dead-letter entries after 20s: %d, want 2: %v", len(entries), entries)
		}
		time.Sleep(50 * time.Millisecond) // sleep-ok: polling interval of a condition wait
		entries = nil
		cursor := ""
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := admin.PeekDeadLetters(ctx, &spoolv1.PeekDeadLettersRequest{Group: e.group, Topic: topic, Cursor: cursor})
			cancel()
			if err != nil {
				break // the DLQ topic may not exist yet
			}
			entries = append(entries, resp.GetEntries()...)
			if cursor = resp.GetNextCursor(); cursor == "" {
				break
			}
		}
	}
	byID := map[string]*spoolv1.DeadLetter{}
	for _, d := range entries {
		byID[d.GetMessage().GetMessageId()] = d
	}
	if d := byID[poison]; d == nil || d.GetReason() != "bad-schema" || d.GetMessage().GetAttempt() != 1 {
		t.Errorf("poison message's DLQ entry: %v; want reason bad-schema at attempt 1", d)
	}
	if d := byID[failing]; d == nil || d.GetReason() != "max_attempts_exceeded" || d.GetMessage().GetAttempt() != 2 || len(d.GetAttempts()) != 2 {
		t.Errorf("failing message's DLQ entry: %v; want reason max_attempts_exceeded after 2 attempts", d)
	} else if !strings.Contains(d.GetAttempts()[1].GetError(), "fail attempt 2") {
		t.Errorf("failing message's last attempt error %q, want the handler's (fail attempt 2)", d.GetAttempts()[1].GetError())
	}
	for _, d := range entries {
		if want := "conformance-" + strings.TrimSuffix(l.name, "-previous"); d.GetAppVersion() != want {
			t.Errorf("DLQ entry of %s: app version %q, want %q", d.GetMessage().GetMessageId(), d.GetAppVersion(), want)
		}
	}
	evs := a.snapshot()
	if n := len(starts(evs, poison)); n != 1 {
		t.Errorf("poison message delivered %d times, want once", n)
	}
}

// 4. A release counts no attempt: deliveries handed back unstarted at the
// drain come back at attempt 1, and so does a
// message its handler releases twice.
func testRelease(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{ordering: "none"})
	first := ids(e.publish(msgs(4, "k", "ack")...))
	// One worker, three prefetched: SIGTERM while the first runs.
	a1 := e.startApp("draining", e.consumer(1, 3, 1500))
	a1.await("a handler started", 20*time.Second, func(evs []event) bool { return len(count(evs, "start", "")) >= 1 })
	evs1 := a1.terminate()
	checkExit(t, evs1, 1)
	started1, acked1 := count(evs1, "start", ""), count(evs1, "finish", "ack")
	var want []string // what the next app must ack
	for _, id := range first {
		if acked1[id] == 0 {
			want = append(want, id)
		}
	}
	var released string
	if l.releaseInHandler {
		released = e.publish(spool.OutMessage{Key: []byte("r"), Payload: []byte("release=2")})[0].ID
		want = append(want, released)
	}
	a2 := e.startApp("consumer", e.consumer(4, 4, 0))
	evs2 := a2.await("every message acked", 30*time.Second, all(want, "finish", "ack"))
	for _, id := range first {
		if started1[id] > 0 {
			continue
		}
		for _, s := range starts(evs2, id) {
			if s.Attempt != 1 {
				t.Errorf("message %s, released unstarted at the drain, came back at attempt %d, want 1", id, s.Attempt)
			}
		}
	}
	if released != "" {
		ss := starts(evs2, released)
		if len(ss) != 3 {
			t.Errorf("message released twice by its handler: %d deliveries, want 3", len(ss))
		}
		for _, s := range ss {
			if s.Attempt != 1 {
				t.Errorf("message released by its handler came back at attempt %d, want 1", s.Attempt)
			}
		}
	} else {
		t.Logf("the %s SDK has no release outcome for a handler: only the drain's release is checked", l.name)
	}
}

// 5. A handler slower than the visibility timeout keeps its lease, and so
// do deliveries prefetched and waiting for the busy worker: each message is
// delivered once, and no settlement is refused.
func testLeaseExtension(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{visibility: "1s", ordering: "none"})
	want := ids(e.publish(msgs(3, "k", "ack")...))
	// One worker, two prefetched, 1.6 s per handler: the last waits 3.2 s.
	a := e.startApp("consumer", e.consumer(1, 2, 1600))
	a.await("every message acked", 30*time.Second, all(want, "finish", "ack"))
	e.awaitLag(10 * time.Second)
	evs := a.terminate()
	for _, id := range want {
		if ss := starts(evs, id); len(ss) != 1 || ss[0].Attempt != 1 {
			t.Errorf("message %s: want one delivery at attempt 1, got %d: %+v", id, len(ss), ss)
		}
	}
	checkExit(t, evs, 0)
}

// 6. With ordering key and concurrency 8, messages of a key are handled one
// at a time in publish order, while keys run in parallel.
func testKeyOrder(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{ordering: "key"})
	const keys, perKey = 4, 10
	var out []spool.OutMessage
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			out = append(out, spool.OutMessage{Key: []byte(fmt.Sprintf("key%d", k)), Payload: []byte(fmt.Sprintf("seq=%d", i))})
		}
	}
	want := ids(e.publish(out...))
	a := e.startApp("consumer", e.consumer(8, 8, 30))
	evs := a.await("every message acked", 60*time.Second, all(want, "finish", "ack"))
	running := map[string]string{} // key -> id of its running handler
	next := map[string]int{}       // key -> next seq
	maxRunning := 0
	for _, ev := range evs {
		switch ev.Ev {
		case "start":
			if id, busy := running[ev.Key]; busy {
				t.Errorf("key %s: %s started while %s still ran", ev.Key, ev.ID, id)
			}
			running[ev.Key] = ev.ID
			if want := fmt.Sprintf("seq=%d", next[ev.Key]); ev.Payload != want {
				t.Errorf("key %s: handled %q, want %q next", ev.Key, ev.Payload, want)
			}
			next[ev.Key]++
			maxRunning = max(maxRunning, len(running))
		case "finish":
			delete(running, ev.Key)
		}
	}
	if maxRunning < 2 {
		t.Errorf("at most %d handlers ran at once with concurrency 8 and %d keys: keys did not run in parallel", maxRunning, keys)
	}
}

// 7. The app killed (SIGKILL) mid-handle: its messages are redelivered to
// the next app (counted as an attempt) and nothing is lost.
func testAppKilled(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{ordering: "none"})
	want := ids(e.publish(msgs(3, "k", "ack")...))
	a1 := e.startApp("killed", e.consumer(2, 2, 60000))
	a1.await("two handlers started", 20*time.Second, func(evs []event) bool { return len(count(evs, "start", "")) >= 2 })
	a1.signal(syscall.SIGKILL)
	a1.waitExit(10 * time.Second)
	started1 := count(a1.snapshot(), "start", "")
	a2 := e.startApp("consumer", e.consumer(4, 4, 0))
	evs := a2.await("every message acked by the next app", 30*time.Second, all(want, "finish", "ack"))
	for id := range started1 {
		for _, s := range starts(evs, id) {
			if s.Attempt < 2 {
				t.Errorf("message %s, killed mid-handle, came back at attempt %d: the killed attempt was not counted", id, s.Attempt)
			}
		}
	}
	e.awaitLag(10 * time.Second)
}

// Reconnect bound and the down time that tests it (scenario 8).
const (
	// reconnectBound is how soon after its sidecar is ready again an app
	// must be handed a new message (docs/semantics.md).
	reconnectBound = time.Second
	// sidecarDownFor is how long spoold stays stopped. gRPC's default
	// connect backoff (1 s, ×1.6, ±20 % jitter, up to 120 s) has made its
	// fourth retry by then (at most 6.2 s after the connection broke) and
	// makes its fifth at 7.4 s or later (9.3 s on average): an SDK that
	// leaves it in place reconnects about 2.8 s (at least 0.9 s) after
	// spoold is ready, and fails the bound.
	sidecarDownFor = 6500 * time.Millisecond
)

// 8. spoold stops under a running app and starts again 6.5 s later on the
// same address and data: the SDK reconnects by itself, and the same app
// process gets a message published after the restart within
// reconnectBound of spoold being ready.
func testReconnect(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{})
	before := ids(e.publish(msgs(3, "a", "ack")...))
	a := e.startApp("consumer", e.consumer(2, 2, 0))
	a.await("messages before the restart acked", 30*time.Second, all(before, "finish", "ack"))
	e.awaitLag(10 * time.Second)
	e.node.stop()
	time.Sleep(sidecarDownFor) // sleep-ok: the outage under test; the SDK's backoff grows meanwhile
	ready := e.node.start()
	after := ids(e.publishFresh(msgs(3, "b", "ack")...))
	evs := a.await("messages after the restart acked by the same app", 30*time.Second, all(after, "finish", "ack"))
	select {
	case <-a.exited:
		t.Fatalf("the app exited with code %d across the restart", a.cmd.ProcessState.ExitCode())
	default:
	}
	var first int64
	for _, id := range after {
		for _, ev := range starts(evs, id) {
			if first == 0 || ev.TimeMs < first {
				first = ev.TimeMs
			}
		}
	}
	took := time.UnixMilli(first).Sub(ready)
	t.Logf("first delivery after the restart: %v after spoold was ready (down %v)", took, sidecarDownFor)
	if took > reconnectBound {
		t.Errorf("the app got its first message %v after spoold was ready again, want at most %v: the SDK's reconnect waits too long (gRPC's connect backoff, or its own)", took, reconnectBound)
	}
}

// 9. SIGTERM while handlers run: they finish and are acked (none cancelled),
// deliveries not started are released, the app exits 0, and the next app
// handles the rest: every message acked exactly once.
func testDrain(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{ordering: "none"})
	want := ids(e.publish(msgs(8, "k", "ack")...))
	a1 := e.startApp("draining", e.consumer(2, 2, 1000))
	a1.await("two handlers started", 20*time.Second, func(evs []event) bool { return len(count(evs, "start", "")) >= 2 })
	evs1 := a1.terminate()
	checkExit(t, evs1, 0)
	started, acked := count(evs1, "start", ""), count(evs1, "finish", "ack")
	for id, n := range started {
		if acked[id] != n {
			t.Errorf("message %s: started %d times in the draining app, acked %d: a handler did not finish", id, n, acked[id])
		}
	}
	a2 := e.startApp("consumer", e.consumer(4, 4, 0))
	evs2 := a2.await("every message acked", 30*time.Second, func(evs []event) bool {
		c := count(evs, "finish", "ack")
		for _, id := range want {
			if acked[id]+c[id] == 0 {
				return false
			}
		}
		return true
	})
	e.awaitLag(10 * time.Second)
	acked2 := count(a2.snapshot(), "finish", "ack")
	_ = evs2
	for _, id := range want {
		if n := acked[id] + acked2[id]; n != 1 {
			t.Errorf("message %s acked %d times (draining app %d, next app %d), want once", id, n, acked[id], acked2[id])
		}
	}
}

// 10. Bad input is refused with a typed error carrying the sidecar's
// reason: a publish to an undeclared topic and a message over
// limits.max_message_bytes.
func testBadInput(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{limits: "  max_message_bytes: 65536\n"})
	cases := []struct {
		name, topic, reason, code string
		msg                       outMessage
	}{
		{"unknown-topic", "no-such-topic", "UNKNOWN_TOPIC", "NOT_FOUND", outMessage{Key: "k", Payload: "x"}},
		{"oversize", topic, "MESSAGE_TOO_LARGE", "INVALID_ARGUMENT", outMessage{Key: "k", PayloadBytes: 100000}},
	}
	for _, c := range cases {
		ev := e.run(c.name, spec{Addr: e.node.app, Mode: "publish", Topic: c.topic, Messages: []outMessage{c.msg}})
		if ev.Ev != "publish_error" {
			t.Errorf("%s: want a publish error, got %+v", c.name, ev)
			continue
		}
		if ev.Reason != c.reason {
			t.Errorf("%s: reason %q, want %q (message %q)", c.name, ev.Reason, c.reason, ev.Message)
		}
		if want := l.errorTypes[c.reason]; ev.Type != want {
			t.Errorf("%s: error type %q, want %q", c.name, ev.Type, want)
		}
		if normCode(ev.Code) != c.code {
			t.Errorf("%s: code %q, want %s", c.name, ev.Code, c.code)
		}
		if ev.Message == "" {
			t.Errorf("%s: the error says nothing", c.name)
		}
	}
}

// normCode turns each SDK's spelling of a gRPC code (NotFound, NOT_FOUND, 5)
// into the proto's (NOT_FOUND).
func normCode(c string) string {
	switch strings.ToUpper(strings.ReplaceAll(c, "_", "")) {
	case "NOTFOUND", "5":
		return "NOT_FOUND"
	case "INVALIDARGUMENT", "3":
		return "INVALID_ARGUMENT"
	}
	return c
}

// 11. A batch published by the app: one result per message in request
// order, the app's ids kept (an empty one generated), offsets growing in
// request order within a partition, and the messages delivered with them.
func testPublishBatch(t *testing.T, l *language, redis *testredis.Server) {
	e := newEnv(t, l, redis, sub{})
	in := []outMessage{
		{ID: "order-1", Key: "cust-1", Payload: "p1"},
		{ID: "order-2", Key: "cust-2", Payload: "p2"},
		{ID: "", Key: "cust-1", Payload: "p3"},
		{ID: "order-4", Key: "cust-1", Payload: "p4"},
		{ID: "order-5", Key: "cust-3", Payload: "p5"},
	}
	ev := e.run("publisher", spec{Addr: e.node.app, Mode: "publish", Topic: topic, Messages: in})
	if ev.Ev != "published" {
		t.Fatalf("want published, got %+v", ev)
	}
	if len(ev.Results) != len(in) {
		t.Fatalf("%d results for %d messages", len(ev.Results), len(in))
	}
	last := map[int32]int64{}
	for i, r := range ev.Results {
		if in[i].ID != "" && r.ID != in[i].ID {
			t.Errorf("result %d: id %q, want %q", i, r.ID, in[i].ID)
		}
		if r.ID == "" {
			t.Errorf("result %d: no id generated", i)
		}
		if o, ok := last[r.Partition]; ok && r.Offset <= o {
			t.Errorf("result %d: offset %d in partition %d not after %d: results out of request order", i, r.Offset, r.Partition, o)
		}
		last[r.Partition] = r.Offset
	}
	if ev.Results[0].Partition != ev.Results[2].Partition || ev.Results[0].Partition != ev.Results[3].Partition {
		t.Errorf("messages of key cust-1 in partitions %d, %d, %d: one key, one partition", ev.Results[0].Partition, ev.Results[2].Partition, ev.Results[3].Partition)
	}
	// The messages are delivered with those ids, partitions and offsets.
	want := map[string]result{}
	for _, r := range ev.Results {
		want[r.ID] = r
	}
	a := e.startApp("consumer", e.consumer(4, 4, 0))
	evs := a.await("the batch delivered", 30*time.Second, func(evs []event) bool { return len(count(evs, "finish", "ack")) >= len(in) })
	for _, s := range evs {
		if s.Ev != "start" {
			continue
		}
		r, ok := want[s.ID]
		if !ok {
			t.Errorf("delivered id %q not among the results", s.ID)
			continue
		}
		if r.Partition != s.Partition || r.Offset != s.Offset {
			t.Errorf("message %s delivered at %d/%d, published at %d/%d", s.ID, s.Partition, s.Offset, r.Partition, r.Offset)
		}
	}
}
