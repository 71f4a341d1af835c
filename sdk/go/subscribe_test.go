package spool_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

func oneNack(t *testing.T, e *env, h spool.Handler) *spoolv1.Nack {
	t.Helper()
	e.side.Enqueue("orders", "m1")
	e.subscribe(h)
	r := e.await("one nack", func(r fakesidecar.Record) bool { return len(r.Nacks) == 1 })
	if len(r.Acks) != 0 {
		t.Fatalf("acks = %d, want 0", len(r.Acks))
	}
	return r.Nacks[0]
}

func TestStartFrame(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	stop := e.subscribe(func(context.Context, *spool.Message) error { return nil },
		spool.WithConcurrency(3), spool.WithPrefetch(2), spool.WithConsumerName("pod-1"), spool.WithAppVersion("v1.2.3"))
	r := e.await("start", func(r fakesidecar.Record) bool { return len(r.Starts) == 1 })
	s := r.Starts[0]
	if s.GetGroup() != "billing" || len(s.GetTopics()) != 1 || s.GetTopics()[0] != "orders" ||
		s.GetConsumerName() != "pod-1" || s.GetAppVersion() != "v1.2.3" || s.GetMaxInFlight() != 5 {
		t.Fatalf("start = %v", s)
	}
	if r.CreditGranted != 5 {
		t.Fatalf("initial credit = %d, want concurrency+prefetch = 5", r.CreditGranted)
	}
	// Stop only once the session is live on the client (a delivery handled):
	// a ctx cancelled while the stream is still being opened cancels that
	// stream instead of half-closing it, which is correct (nothing was
	// delivered) but is not what this test checks.
	e.side.Enqueue("orders", "m1")
	e.await("ack", func(r fakesidecar.Record) bool { return len(r.Acks) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The sidecar sees the half-close after Subscribe returns: await it.
	e.await("stream half-closed cleanly", func(r fakesidecar.Record) bool { return r.StreamsEnded == 1 })
}

func TestAckOnNil(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	e.side.Enqueue("orders", "hello")
	var got atomic.Pointer[spool.Message]
	e.subscribe(func(_ context.Context, m *spool.Message) error { got.Store(m); return nil })
	r := e.await("ack", func(r fakesidecar.Record) bool { return len(r.Acks) == 1 })
	m := got.Load()
	if string(m.Payload) != "hello" || m.Topic != "orders" || m.Attempt != 1 || m.Group != "billing" || m.FencingToken == 0 ||
		m.ID == "" || m.LeaseDeadline.IsZero() || m.PublishTime.IsZero() {
		t.Fatalf("message = %+v", m)
	}
	ref := r.Acks[0].GetRef()
	if ref.GetTopic() != "orders" || ref.GetOffset() != m.Offset || ref.GetFencingToken() != m.FencingToken {
		t.Fatalf("ack ref = %v, message %+v", ref, m)
	}
	if len(r.Nacks) != 0 || r.SettleErrors != 0 {
		t.Fatalf("record = %+v", r)
	}
}

func TestRetryOnError(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	n := oneNack(t, e, func(context.Context, *spool.Message) error { return errors.New("payment gateway said 502") })
	if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RETRY || n.GetError() != "payment gateway said 502" || n.GetRetryAfterMs() != 0 {
		t.Fatalf("nack = %v", n)
	}
}

func TestRetryAfter(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	n := oneNack(t, e, func(context.Context, *spool.Message) error {
		return spool.Retry(1500*time.Millisecond, errors.New("rate limited"))
	})
	if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RETRY || n.GetRetryAfterMs() != 1500 || !strings.Contains(n.GetError(), "rate limited") || n.GetDownstream() != "" {
		t.Fatalf("nack = %v", n)
	}
}

func TestRetryDownstreamWrapped(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	n := oneNack(t, e, func(context.Context, *spool.Message) error {
		return errors.Join(errors.New("sending receipt"), spool.RetryDownstream("email-provider", 2*time.Second, errors.New("timeout")))
	})
	if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RETRY || n.GetRetryAfterMs() != 2000 || n.GetDownstream() != "email-provider" {
		t.Fatalf("nack = %v", n)
	}
}

func TestDeadLetter(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	n := oneNack(t, e, func(context.Context, *spool.Message) error { return spool.DeadLetter("unknown schema version 7") })
	if n.GetOutcome() != spoolv1.Outcome_OUTCOME_DEAD_LETTER || n.GetReason() != "unknown schema version 7" {
		t.Fatalf("nack = %v", n)
	}
}

func TestPanicRetries(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	n := oneNack(t, e, func(context.Context, *spool.Message) error { panic("nil map in handler") })
	if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RETRY || !strings.Contains(n.GetError(), "panicked: nil map in handler") {
		t.Fatalf("nack = %v", n)
	}
}

func TestInvalidUTF8ErrorTextIsCleaned(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	n := oneNack(t, e, func(context.Context, *spool.Message) error {
		return errors.New("bad \xff byte " + strings.Repeat("x", 10000))
	})
	if !strings.HasPrefix(n.GetError(), "bad \uFFFD byte") || len(n.GetError()) > 4200 {
		t.Fatalf("error text len %d starts %q", len(n.GetError()), n.GetError()[:12])
	}
}

// Concurrency is honoured, credit never exceeds concurrency+prefetch, and
// every settled delivery returns one credit.
func TestConcurrencyAndCredit(t *testing.T) {
	const total, conc, prefetch = 200, 4, 3
	e := newEnv(t, fakesidecar.Config{MaxBatch: 2})
	for i := 0; i < total; i++ {
		e.side.Enqueue("orders", "m")
	}
	var running, peak atomic.Int32
	var handled atomic.Int32
	e.subscribe(func(context.Context, *spool.Message) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond) // sleep-ok: the handler's simulated work, so that others pile up
		running.Add(-1)
		handled.Add(1)
		return nil
	}, spool.WithConcurrency(conc), spool.WithPrefetch(prefetch))
	r := e.await("all acked", func(r fakesidecar.Record) bool { return len(r.Acks) == total })
	if p := peak.Load(); p > conc || p < 2 {
		t.Fatalf("peak concurrent handlers = %d, want 2..%d", p, conc)
	}
	if r.MaxOutstanding > conc+prefetch {
		t.Fatalf("outstanding deliveries peaked at %d > credit %d", r.MaxOutstanding, conc+prefetch)
	}
	if r.CreditGranted != conc+prefetch+total {
		t.Fatalf("credit granted = %d, want initial %d + one per settlement %d", r.CreditGranted, conc+prefetch, total)
	}
	if r.Frames >= total {
		t.Logf("settlement frames = %d for %d messages (no coalescing happened)", r.Frames, total)
	}
}

func TestExcessDeliveriesAreReleased(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{ExtraDeliveries: 2})
	for i := 0; i < 5; i++ {
		e.side.Enqueue("orders", "m")
	}
	stats := new(spool.Stats)
	e.subscribe(func(context.Context, *spool.Message) error { return nil }, spool.WithConcurrency(1), spool.WithPrefetch(0), spool.WithStats(stats))
	r := e.await("3 acks and 2 releases", func(r fakesidecar.Record) bool { return len(r.Acks) == 3 && len(r.Nacks) == 2 })
	for _, n := range r.Nacks {
		if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RELEASE {
			t.Fatalf("nack = %v, want release", n)
		}
	}
}

func TestLeaseExtension(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{VisibilityMs: 90})
	e.side.Enqueue("orders", "slow")
	release := make(chan struct{})
	e.subscribe(func(ctx context.Context, _ *spool.Message) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	r := e.await("3 extends", func(r fakesidecar.Record) bool { return len(r.Extends) >= 3 })
	close(release)
	r = e.await("ack", func(r fakesidecar.Record) bool { return len(r.Acks) == 1 })
	for _, x := range r.Extends {
		if x.GetExtendByMs() != 0 || x.GetRef().GetFencingToken() != r.Acks[0].GetRef().GetFencingToken() {
			t.Fatalf("extend = %v", x)
		}
	}
	if r.SettleErrors != 0 {
		t.Fatalf("settle errors = %d", r.SettleErrors)
	}
	// That extensions stop when the handler returns is TestLeaseKeeperStopsAtEnd.
}

// A delivery received ahead (prefetched) while the handler is busy keeps
// its lease: it is extended while it waits, not only once a handler runs
// it (with a handler slower than the visibility timeout, a waiting
// delivery's lease would otherwise expire and its settlement be refused).
func TestPrefetchedLeaseExtended(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{VisibilityMs: 90})
	e.side.Enqueue("orders", "first")
	e.side.Enqueue("orders", "second")
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // a failed await must not leave the handler blocked
	var first atomic.Uint64
	e.subscribe(func(ctx context.Context, m *spool.Message) error {
		if string(m.Payload) == "first" {
			first.Store(m.FencingToken)
			<-release
		}
		return nil
	}, spool.WithConcurrency(1), spool.WithPrefetch(1))
	// The second delivery waits behind the first: its lease must be
	// extended meanwhile (extensions of another token than the running
	// first's).
	e.await("the waiting delivery's lease extended twice", func(r fakesidecar.Record) bool {
		n := 0
		for _, x := range r.Extends {
			if tok := x.GetRef().GetFencingToken(); first.Load() != 0 && tok != first.Load() {
				n++
			}
		}
		return n >= 2
	})
	once.Do(func() { close(release) })
	r := e.await("both acked", func(r fakesidecar.Record) bool { return len(r.Acks) == 2 })
	if r.SettleErrors != 0 || len(r.Nacks) != 0 {
		t.Fatalf("settle errors %d, nacks %v", r.SettleErrors, r.Nacks)
	}
}

func TestReconnectAfterBrokenStream(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	e.side.Enqueue("orders", "before")
	var lostLease atomic.Bool
	block := make(chan struct{})
	stuck := make(chan struct{})
	stats := new(spool.Stats)
	stop := e.subscribe(func(ctx context.Context, m *spool.Message) error {
		if string(m.Payload) == "stuck" && m.Attempt == 1 {
			close(stuck)
			<-ctx.Done() // the stream breaks: the lease is gone
			lostLease.Store(true)
			close(block)
			return ctx.Err()
		}
		return nil
	}, spool.WithStats(stats))
	e.await("first ack", func(r fakesidecar.Record) bool { return len(r.Acks) == 1 })
	e.side.Enqueue("orders", "stuck")
	<-stuck
	e.side.BreakStreams()
	<-block
	e.side.Enqueue("orders", "after")
	r := e.await("reconnect, redelivery and ack", func(r fakesidecar.Record) bool { return len(r.Starts) == 2 && len(r.Acks) == 3 })
	if !lostLease.Load() {
		t.Fatal("the handler's ctx was not cancelled when the stream broke")
	}
	if r.SettleErrors != 0 || len(r.Nacks) != 0 {
		t.Fatalf("the settlement of the broken stream was not dropped: %+v", r)
	}
	// The stuck handler's settlement is dropped after it returns, which
	// can be after the other deliveries are acked: read the counters once
	// Subscribe has returned (its workers are done).
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if stats.Reconnects.Load() != 1 || stats.Dropped.Load() != 1 {
		t.Fatalf("reconnects = %d dropped = %d, want 1 and 1", stats.Reconnects.Load(), stats.Dropped.Load())
	}
}

func TestSubscribeWithoutSidecarRetriesUntilCancelled(t *testing.T) {
	// No sidecar listens at addr yet: Subscribe keeps retrying (each
	// attempt logged), consumes once a sidecar appears there, and returns
	// nil when ctx is cancelled.
	side, err := fakesidecar.Start(fakesidecar.Config{})
	if err != nil {
		t.Fatal(err)
	}
	addr := side.Addr()
	side.Stop()
	// gRPC's own reconnect backoff (1 s base) shortened, so the test does
	// not wait for it once the sidecar is up.
	fast := grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 50 * time.Millisecond}, MinConnectTimeout: time.Second})
	c, err := spool.Dial(ctxT(t), addr, spool.WithConnectTimeout(0), spool.WithGRPCDialOptions(fast))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	logs := newLogRecorder()
	var handled atomic.Int32
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, "billing", nil, func(context.Context, *spool.Message) error { handled.Add(1); return nil },
			spool.WithLogger(slog.New(logs)), spool.WithReconnectBackoff(5*time.Millisecond, 20*time.Millisecond))
	}()
	logs.await(t, 3, "reconnecting")
	if n := logs.count("is spoold running"); n < 3 {
		t.Errorf("%d of the failed attempts ask whether spoold runs, want every one: nothing answers at %s", n, addr)
	}
	side, err = fakesidecar.Start(fakesidecar.Config{Addr: addr})
	if err != nil {
		t.Fatalf("restarting the twin at %s: %v", addr, err)
	}
	defer side.Stop()
	side.Enqueue("orders", "after the sidecar came up")
	if err := side.Await(ctx, func(r fakesidecar.Record) bool { return len(r.Acks) == 1 }); err != nil {
		t.Fatalf("no ack once the sidecar came up: %v (handled %d)", err, handled.Load())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Subscribe = %v, want nil after ctx cancellation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe did not return 5 s after its ctx was cancelled")
	}
}

func TestSubscribeResumesAsSoonAsTheSidecarIsBack(t *testing.T) {
	// The subscription's own backoff is a minute: once the sidecar is back,
	// Subscribe must not sleep it out, but resume as soon as the connection
	// (default connect backoff: retries at most 600 ms apart) is ready.
	side, err := fakesidecar.Start(fakesidecar.Config{})
	if err != nil {
		t.Fatal(err)
	}
	addr := side.Addr()
	side.Stop()
	c, err := spool.Dial(ctxT(t), addr, spool.WithConnectTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	logs := newLogRecorder()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, "billing", nil, func(context.Context, *spool.Message) error { return nil },
			spool.WithLogger(slog.New(logs)), spool.WithReconnectBackoff(time.Minute, time.Minute))
	}()
	logs.await(t, 1, "is spoold running")
	side, err = fakesidecar.Start(fakesidecar.Config{Addr: addr})
	if err != nil {
		t.Fatalf("restarting the twin at %s: %v", addr, err)
	}
	defer side.Stop()
	back := time.Now()
	side.Enqueue("orders", "after the sidecar came up")
	if err := side.Await(ctx, func(r fakesidecar.Record) bool { return len(r.Acks) == 1 }); err != nil {
		t.Fatalf("no ack once the sidecar came up: %v", err)
	}
	// 600 ms of connect backoff at most, and the stream's set-up.
	took := time.Since(back)
	t.Logf("acked %v after the sidecar came back", took)
	if took > time.Second {
		t.Errorf("acked %v after the sidecar came back, want at most 1 s: Subscribe slept out its own backoff", took)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Subscribe = %v, want nil after ctx cancellation", err)
	}
}

func TestStaleSettlementIsCounted(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	e.side.Enqueue("orders", "m")
	stats := new(spool.Stats)
	first := make(chan struct{})
	release := make(chan struct{})
	e.subscribe(func(_ context.Context, m *spool.Message) error {
		if m.Attempt == 1 {
			close(first)
			<-release
		}
		return nil
	}, spool.WithStats(stats))
	<-first
	e.side.ExpireLeases() // redelivered with a new token while attempt 1 still runs
	e.await("redelivery acked", func(r fakesidecar.Record) bool { return len(r.Acks) == 1 })
	close(release)
	e.await("stale ack rejected", func(r fakesidecar.Record) bool { return r.SettleErrors == 1 })
	deadline := time.Now().Add(5 * time.Second)
	for stats.SettleErrors.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("SettleError not counted")
		}
		time.Sleep(time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

func TestDrainReleasesUnstartedAndWaitsForRunning(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	for i := 0; i < 4; i++ {
		e.side.Enqueue("orders", "m")
	}
	started := make(chan struct{})
	finish := make(chan struct{})
	var ctxErr atomic.Value
	var returned, returnedEarly atomic.Bool // Subscribe returned; it had when the handler finished
	stop := e.subscribe(func(ctx context.Context, m *spool.Message) error {
		close(started) // only one handler may ever start
		<-finish
		if ctx.Err() != nil {
			ctxErr.Store(ctx.Err())
		}
		returnedEarly.Store(returned.Load())
		return nil
	}, spool.WithConcurrency(1), spool.WithPrefetch(3))
	<-started
	e.await("all 4 delivered", func(r fakesidecar.Record) bool { return r.Delivered == 4 })
	stopped := make(chan error, 1)
	go func() {
		err := stop()
		returned.Store(true)
		stopped <- err
	}()
	r := e.await("3 releases", func(r fakesidecar.Record) bool { return len(r.Nacks) == 3 })
	for _, n := range r.Nacks {
		if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RELEASE {
			t.Fatalf("nack = %v, want release", n)
		}
	}
	close(finish)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if returnedEarly.Load() {
		t.Fatal("Subscribe returned while a handler was running")
	}
	// The sidecar reads the last frames after Subscribe returns: await them.
	r = e.await("the running handler's ack, then a clean half-close", func(r fakesidecar.Record) bool {
		return r.StreamsEnded == 1
	})
	if len(r.Acks) != 1 {
		t.Fatalf("acks = %d, want the running handler's ack sent before closing", len(r.Acks))
	}
	if r.CreditAfter != 0 {
		t.Fatalf("credit granted during drain = %d, want 0", r.CreditAfter)
	}
	if ctxErr.Load() != nil {
		t.Fatal("handler ctx cancelled before the drain timeout")
	}
}

func TestDrainTimeoutCancelsHandlers(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	e.side.Enqueue("orders", "m")
	started := make(chan struct{})
	stop := e.subscribe(func(ctx context.Context, _ *spool.Message) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, spool.WithDrainTimeout(30*time.Millisecond))
	<-started
	t0 := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 30*time.Millisecond {
		t.Fatalf("returned after %s, before the drain timeout", d)
	}
	r := e.await("retry sent", func(r fakesidecar.Record) bool { return len(r.Nacks) == 1 })
	if r.Nacks[0].GetOutcome() != spoolv1.Outcome_OUTCOME_RETRY {
		t.Fatalf("nack = %v", r.Nacks[0])
	}
}

func TestUnknownGroupIsPermanent(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{Groups: []string{"shipping"}})
	err := e.client.Subscribe(ctxT(t), "billing", nil, func(context.Context, *spool.Message) error { return nil }, spool.WithLogger(quietLogger()))
	if err == nil || !strings.Contains(err.Error(), "not declared") || !strings.Contains(err.Error(), "check the group") {
		t.Fatalf("err = %v", err)
	}
}

func TestInvalidOptions(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	h := func(context.Context, *spool.Message) error { return nil }
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"concurrency", e.client.Subscribe(ctxT(t), "g", nil, h, spool.WithConcurrency(0))},
		{"backoff", e.client.Subscribe(ctxT(t), "g", nil, h, spool.WithReconnectBackoff(0, time.Second))},
		{"receive limit", e.client.Subscribe(ctxT(t), "g", nil, h, spool.WithMaxReceiveBytes(1000))},
		{"group", e.client.Subscribe(ctxT(t), "", nil, h)},
		{"handler", e.client.Subscribe(ctxT(t), "g", nil, nil)},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), "spool: ") {
			t.Errorf("%s: err = %v", tc.name, tc.err)
		}
	}
}

func TestDialFailureSaysWhatToDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := spool.Dial(ctx, "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "spoold --dev") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("err = %v", err)
	}
}

// A message above gRPC's default 4 MiB receive limit (the sidecar allows up
// to 64 MiB) reaches the handler with the default options.
func TestDeliveryAboveGRPCDefaultLimitIsReceived(t *testing.T) {
	const size = 6 << 20
	e := newEnv(t, fakesidecar.Config{})
	e.side.Enqueue("orders", strings.Repeat("x", size))
	var got atomic.Int64
	stats := new(spool.Stats)
	e.subscribe(func(_ context.Context, m *spool.Message) error { got.Store(int64(len(m.Payload))); return nil }, spool.WithStats(stats))
	r := e.await("the 6 MiB message acked", func(r fakesidecar.Record) bool { return len(r.Acks) == 1 })
	if mr := r.Starts[0].GetMaxReceiveBytes(); mr != spool.DefaultMaxReceiveBytes {
		t.Fatalf("Start.max_receive_bytes = %d, want the default %d", mr, spool.DefaultMaxReceiveBytes)
	}
	if got.Load() != size {
		t.Fatalf("payload = %d bytes, want %d", got.Load(), size)
	}
	if n := stats.Reconnects.Load(); n != 0 {
		t.Fatalf("reconnects = %d, want 0", n)
	}
}

// A frame larger than the client can receive is an error that says what to
// raise, not a reconnect loop (each reconnect would get the same frame).
func TestFrameAboveReceiveLimitStopsWithAClearError(t *testing.T) {
	e := newEnv(t, fakesidecar.Config{})
	e.side.Enqueue("orders", strings.Repeat("x", 2<<20))
	stats := new(spool.Stats)
	logs := newLogRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := e.client.Subscribe(ctx, "billing", []string{"orders"}, func(context.Context, *spool.Message) error { return nil },
		spool.WithMaxReceiveBytes(1<<20), spool.WithLogger(slog.New(logs)), spool.WithStats(stats), spool.WithReconnectBackoff(time.Millisecond, 20*time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("Subscribe ran until its ctx ended (%d reconnects) instead of reporting the frame it cannot receive; err = %v", stats.Reconnects.Load(), err)
	}
	if err == nil || !strings.Contains(err.Error(), "WithMaxReceiveBytes") || !strings.Contains(err.Error(), "max_message_bytes") {
		t.Fatalf("err = %v, want one naming WithMaxReceiveBytes and max_message_bytes", err)
	}
	if n := stats.Reconnects.Load(); n != 0 {
		t.Fatalf("reconnects = %d, want 0", n)
	}
	if logs.count("WithMaxReceiveBytes") == 0 {
		t.Fatal("the error was not logged")
	}
	if mr := e.side.Record().Starts[0].GetMaxReceiveBytes(); mr != 1<<20 {
		t.Fatalf("Start.max_receive_bytes = %d, want the limit set, %d", mr, 1<<20)
	}
}

// A handler returning spool.Release (wrapped too) settles its delivery as
// RELEASE, with no error text: handed back without an attempt counted.
func TestRelease(t *testing.T) {
	for _, err := range []error{spool.Release(), fmt.Errorf("not mine: %w", spool.Release())} {
		e := newEnv(t, fakesidecar.Config{})
		n := oneNack(t, e, func(context.Context, *spool.Message) error { return err })
		if n.GetOutcome() != spoolv1.Outcome_OUTCOME_RELEASE || n.GetError() != "" || n.GetRetryAfterMs() != 0 {
			t.Errorf("%v: nack %v", err, n)
		}
	}
}
