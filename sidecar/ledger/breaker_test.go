package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spoolmq/spool/internal/testredis"
)

// recHooks records what the Breaker reports.
type recHooks struct {
	mu          sync.Mutex
	transitions []string
	calls       map[string]int
	unavailable int
}

func (h *recHooks) LedgerCall(op string, _ int, _ time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls = map[string]int{}
	}
	h.calls[op]++
	if errors.Is(err, ErrUnavailable) {
		h.unavailable++
	}
}

func (h *recHooks) LedgerBreaker(from, to string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.transitions = append(h.transitions, from+"->"+to)
}

func (h *recHooks) path() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.transitions, " ")
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func claimOne(b Ledger, t *testing.T, id string) error {
	_, err := b.Claim(ctxT(t), "g", ownerA, time.Now(), time.Hour, []Claim{{ID: id, Lease: time.Now().Add(time.Minute)}})
	return err
}

// tripAndRecover drives a breaker over a Redis made unavailable by down,
// then brought back by up.
func tripAndRecover(t *testing.T, srv *testredis.Server, cfg BreakerConfig, down, up func()) {
	t.Helper()
	hooks := &recHooks{}
	cfg.Logger = quietLogger()
	b := NewBreaker(newTestRedis(t, srv.Addr()), cfg, hooks)
	if err := claimOne(b, t, "before"); err != nil {
		t.Fatalf("claim with redis up: %v", err)
	}
	down()
	for i := range cfg.ConsecutiveFailures {
		start := time.Now()
		err := claimOne(b, t, fmt.Sprint("down-", i))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d with redis down: err = %v, want ErrUnavailable", i, err)
		}
		if d := time.Since(start); d > cfg.Timeout+time.Second {
			t.Fatalf("call %d took %v, beyond the %v timeout", i, d, cfg.Timeout)
		}
	}
	if b.Available() {
		t.Fatalf("breaker %s after %d failures, want open", b.State(), cfg.ConsecutiveFailures)
	}
	start := time.Now()
	err := claimOne(b, t, "refused")
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("an open breaker took %v to refuse", d)
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "deliveries pause (redis_unavailable: pause) or continue without dedupe (deliver)") {
		t.Fatalf("open breaker: err = %v", err)
	}
	up()
	eventually(t, 5*cfg.OpenTimeout+5*time.Second, "the breaker to let a probe through", b.Available)
	eventually(t, 10*time.Second, "a claim to succeed after recovery", func() bool { return claimOne(b, t, "after") == nil })
	if b.State() != "closed" {
		t.Fatalf("breaker %s after a successful probe", b.State())
	}
	if got, want := hooks.path(), "closed->open open->half-open half-open->closed"; !strings.HasSuffix(got, want) || !strings.HasPrefix(got, "closed->open") {
		t.Fatalf("transitions %q, want %q", got, want)
	}
}

func TestBreakerKilledRedis(t *testing.T) {
	srv := testredis.Start(t)
	tripAndRecover(t, srv, BreakerConfig{Timeout: 500 * time.Millisecond, ConsecutiveFailures: 5, OpenTimeout: 300 * time.Millisecond},
		srv.Kill, srv.Restart)
}

func TestBreakerFrozenRedisTimesOut(t *testing.T) {
	srv := testredis.Start(t)
	tripAndRecover(t, srv, BreakerConfig{Timeout: 150 * time.Millisecond, ConsecutiveFailures: 3, OpenTimeout: 300 * time.Millisecond},
		srv.Freeze, srv.Thaw)
}

func TestBreakerRedisDownAtStart(t *testing.T) {
	srv := testredis.Start(t)
	srv.Kill()
	r, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("NewRedis with redis down: %v (construction must not need redis)", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	b := NewBreaker(r, BreakerConfig{Logger: quietLogger(), OpenTimeout: 200 * time.Millisecond}, nil)
	for range DefaultConsecutiveFailures {
		if err := claimOne(b, t, "m"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
	}
	if b.Available() {
		t.Fatal("breaker still closed")
	}
	srv.Restart()
	eventually(t, 10*time.Second, "the ledger to work once redis is up", func() bool { return claimOne(b, t, "m") == nil })
}

// faulty injects errors in front of a Memory ledger.
type faulty struct {
	*Memory
	fail atomic.Pointer[error]
}

func (f *faulty) Claim(ctx context.Context, group, owner string, now time.Time, ttl time.Duration, c []Claim) ([]ClaimResult, error) {
	if p := f.fail.Load(); p != nil {
		return nil, *p
	}
	return f.Memory.Claim(ctx, group, owner, now, ttl, c)
}

func TestBreakerCountsOnlyRedisFailures(t *testing.T) {
	f := &faulty{Memory: NewMemory(nil)}
	hooks := &recHooks{}
	b := NewBreaker(f, BreakerConfig{ConsecutiveFailures: 2, OpenTimeout: time.Hour, Logger: quietLogger()}, hooks)
	t.Cleanup(func() { _ = b.Close() })

	// Caller bugs and the caller's own cancellation never trip it, and are
	// returned as they were.
	for range 5 {
		if _, err := b.Claim(ctxT(t), "", ownerA, t0, 0, nil); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("bad group: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Claim(ctx, "g", ownerA, t0, 0, []Claim{{ID: "m"}}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("cancelled caller: %v", err)
		}
	}
	// A data error (Redis answered) does not trip it either.
	wrongType := error(redisError("WRONGTYPE Operation against a key holding the wrong kind of value"))
	f.fail.Store(&wrongType)
	for range 5 {
		if err := claimOne(b, t, "m"); err == nil || errors.Is(err, ErrUnavailable) {
			t.Fatalf("wrongtype: %v", err)
		}
	}
	if !b.Available() {
		t.Fatal("breaker opened without a Redis failure")
	}
	// Redis failures do, and a bad reply is one.
	down := fmt.Errorf("ledger claim: %w", ErrBadReply)
	f.fail.Store(&down)
	for range 2 {
		if err := claimOne(b, t, "m"); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrBadReply) {
			t.Fatalf("bad reply: %v", err)
		}
	}
	if b.Available() {
		t.Fatal("breaker closed after 2 failures")
	}
	if got := hooks.path(); got != "closed->open" {
		t.Fatalf("transitions %q", got)
	}
}

func TestBreakerHalfOpenProbeFailureReopens(t *testing.T) {
	f := &faulty{Memory: NewMemory(nil)}
	hooks := &recHooks{}
	b := NewBreaker(f, BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: 50 * time.Millisecond, Logger: quietLogger()}, hooks)
	t.Cleanup(func() { _ = b.Close() })
	down := errors.New("connection refused")
	f.fail.Store(&down)
	if err := claimOne(b, t, "m"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	eventually(t, 5*time.Second, "half-open", b.Available)
	if err := claimOne(b, t, "m"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("probe: %v", err)
	}
	if b.Available() {
		t.Fatal("a failed probe left the breaker closed")
	}
	if got := hooks.path(); got != "closed->open open->half-open half-open->open" {
		t.Fatalf("transitions %q", got)
	}
}

func TestBreakerTimeoutOnSlowLedger(t *testing.T) {
	srv := testredis.Start(t)
	b := NewBreaker(newTestRedis(t, srv.Addr()), BreakerConfig{Timeout: 100 * time.Millisecond, ConsecutiveFailures: 100, Logger: quietLogger()}, nil)
	srv.Pause(time.Second)
	start := time.Now()
	err := claimOne(b, t, "m")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 600*time.Millisecond {
		t.Fatalf("a slow redis held the call for %v", d)
	}
	eventually(t, 10*time.Second, "redis to answer after the pause", func() bool { return claimOne(b, t, "m") == nil })
}

// A key under the ledger's prefix that is not a ledger entry (a hash here,
// and a string in no ledger format) is not an outage, nor even an error:
// the claim treats it as an unknown entry (docs/ledger.md, "Malformed
// entries"), and the breaker stays closed.
func TestRedisMalformedEntryIsNotAnOutage(t *testing.T) {
	srv := testredis.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	if err := raw.HSet(ctxT(t), Key("g", "m"), "state", "done").Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Set(ctxT(t), Key("g", "n"), "not a ledger entry", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b := NewBreaker(newTestRedis(t, srv.Addr()), BreakerConfig{ConsecutiveFailures: 1, Logger: quietLogger()}, nil)
	for _, id := range []string{"m", "n"} {
		if err := claimOne(b, t, id); err != nil {
			t.Fatalf("claim of malformed %s: %v", id, err)
		}
	}
	if !b.Available() {
		t.Fatal("breaker opened on a malformed entry")
	}
}

// redisError is an error reply as go-redis types it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An outage is logged when it starts and when it ends, in the logger the
// node gives: not at every failed probe of the half-open breaker.
func TestBreakerLogsStateChangesNotProbes(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil)).With("node", "n1")
	f := &faulty{Memory: NewMemory(nil)}
	b := NewBreaker(f, BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: 10 * time.Millisecond, Logger: logger}, nil)
	t.Cleanup(func() { _ = b.Close() })
	down := errors.New("connection refused")
	f.fail.Store(&down)
	if err := claimOne(b, t, "m"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	for range 5 { // five failed probes
		eventually(t, 5*time.Second, "half-open", b.Available)
		if err := claimOne(b, t, "m"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("probe: %v", err)
		}
	}
	f.fail.Store(nil)
	eventually(t, 5*time.Second, "half-open", b.Available)
	if err := claimOne(b, t, "m"); err != nil {
		t.Fatalf("probe after recovery: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"level":"WARN"`) || !strings.Contains(lines[0], "breaker open") ||
		!strings.Contains(lines[1], `"level":"INFO"`) || !strings.Contains(lines[1], "closed") || !strings.Contains(lines[1], `"failed_probes":5`) {
		t.Fatalf("want one WARN when the outage starts and one INFO when it ends (with 5 failed probes), got %d lines:\n%s", len(lines), logs.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, `"node":"n1"`) {
			t.Fatalf("a line without the node's logger: %s", l)
		}
	}
}
