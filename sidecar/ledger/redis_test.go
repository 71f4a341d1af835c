package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spoolmq/spool/internal/testredis"
)

// A server that lost its script cache (restart, failover to a replica
// that never saw the script, SCRIPT FLUSH) is answered with EVAL.
func TestRedisScriptCacheFlushed(t *testing.T) {
	srv := testredis.Start(t)
	r := newTestRedis(t, srv.Addr())
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	x := h{t, subject{l: r, group: "g"}}
	want(t, x.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	if err := raw.ScriptFlush(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	x.complete("m", 1)
	want(t, x.one(ownerA, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
}

// After a restart the ledger is empty (persistence is the operator's
// choice; docs/ledger.md) and the client reconnects by itself.
func TestRedisReconnectsAfterRestart(t *testing.T) {
	srv := testredis.Start(t)
	r := newTestRedis(t, srv.Addr())
	x := h{t, subject{l: r, group: "g"}}
	x.one(ownerA, t0, "m")
	srv.Kill()
	if err := claimOne(r, t, "m"); err == nil {
		t.Fatal("claim succeeded with redis killed")
	}
	srv.Restart()
	eventually(t, 10*time.Second, "a claim to succeed after restart", func() bool { return claimOne(r, t, "x") == nil })
	want(t, x.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
}

func TestRedisClosed(t *testing.T) {
	srv := testredis.Start(t)
	r := newTestRedis(t, srv.Addr())
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := claimOne(r, t, "m"); !errors.Is(err, ErrClosed) {
		t.Fatalf("claim after close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestNewRedisOptions(t *testing.T) {
	for name, o := range map[string]RedisOptions{
		"no address":    {},
		"empty address": {Addrs: []string{""}},
		"negative pool": {Addrs: []string{"a:1"}, PoolSize: -1},
		"cluster db":    {Addrs: []string{"a:1", "b:2"}, DB: 3},
	} {
		if _, err := NewRedis(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// Cluster and Sentinel clients are built without contacting anyone.
	for _, o := range []RedisOptions{
		{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}},
		{Addrs: []string{"127.0.0.1:1"}, MasterName: "mymaster", DB: 2},
	} {
		r, err := NewRedis(o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		_ = r.Close()
	}
}
