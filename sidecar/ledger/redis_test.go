package ledger

import (
	"errors"
	"fmt"
	"strings"
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

// commandCalls is how many times redis-server ran each command
// (INFO commandstats: SET and GET run inside the ledger's scripts).
func commandCalls(t *testing.T, raw *redis.Client) map[string]int {
	t.Helper()
	info, err := raw.Info(ctxT(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		var calls int
		if _, err := fmt.Sscanf(stats, "calls=%d", &calls); err == nil {
			out[name] = calls
		}
	}
	return out
}

// The common cases take one command per message: a first claim (SET NX
// GET), and a completion with the attempts its claim answered and no
// error recorded (SET XX GET). A completion with a wrong hint, of an entry
// with a last error, or with a stale token takes a second SET that puts
// the entry right: done with its own attempts and error, or as it was.
func TestRedisOneCommandPerClaimAndCompletion(t *testing.T) {
	srv := testredis.Start(t)
	r := newTestRedis(t, srv.Addr())
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	x := h{t, subject{l: r, group: "g"}}
	before := commandCalls(t, raw)
	x.claim(ownerA, t0, time.Minute, "a", "b")
	must(t, r.Complete(ctxT(t), "g", dayTTL, []Finish{{ID: "a", Token: 1, Attempts: 1}, {ID: "b", Token: 1, Attempts: 1}}))
	after := commandCalls(t, raw)
	if set, get := after["set"]-before["set"], after["get"]-before["get"]; set != 4 || get != 0 {
		t.Fatalf("two first claims and two completions ran %d SET and %d GET; want 4 and 0", set, get)
	}
	if v := raw.Get(ctxT(t), Key("g", "a")).Val(); v != "done\n1\n0\n\n1\n" {
		t.Fatalf("done entry %q", v)
	}

	// A wrong hint, and an entry with a last error: right all the same.
	x.one(ownerA, t0, "c")
	x.release(Release{ID: "c", Token: 1, Error: "boom"})
	want(t, x.one(ownerA, t0, "c"), ClaimResult{Status: Granted, Token: 2, Attempts: 2, LastError: "boom"})
	must(t, r.Complete(ctxT(t), "g", dayTTL, []Finish{{ID: "c", Token: 2, Attempts: 2}}))
	want(t, x.one(ownerB, t0, "c"), ClaimResult{Status: Done, Token: 2, Attempts: 2, LastError: "boom"})
	x.one(ownerA, t0, "d")
	must(t, r.Complete(ctxT(t), "g", dayTTL, []Finish{{ID: "d", Token: 1, Attempts: 7}}))
	want(t, x.one(ownerB, t0, "d"), ClaimResult{Status: Done, Token: 1, Attempts: 1})

	// A stale token changes nothing; an absent id creates nothing.
	x.one(ownerA, t0, "e")
	x.one(ownerA, t0, "e") // token 2
	v := raw.Get(ctxT(t), Key("g", "e")).Val()
	must(t, r.Complete(ctxT(t), "g", dayTTL, []Finish{{ID: "e", Token: 1, Attempts: 1}, {ID: "nope", Token: 1, Attempts: 1}}))
	if got := raw.Get(ctxT(t), Key("g", "e")).Val(); got != v {
		t.Fatalf("a stale completion changed %q to %q", v, got)
	}
	if n := raw.Exists(ctxT(t), Key("g", "nope")).Val(); n != 0 {
		t.Fatal("completing an absent id created it")
	}

	// A value in no ledger format is not held under the token: it is left
	// as it was (a claim would overwrite it: malformed_test.go).
	for _, bad := range []string{"not a ledger entry", "in_progress\n1\nbroken"} {
		must(t, raw.Set(ctxT(t), Key("g", "bad"), bad, 0).Err())
		must(t, r.Complete(ctxT(t), "g", dayTTL, []Finish{{ID: "bad", Token: 1, Attempts: 1}}))
		if got := raw.Get(ctxT(t), Key("g", "bad")).Val(); got != bad {
			t.Fatalf("completing %q left %q", bad, got)
		}
	}
}

// Entries written by the previous release have no generation: they parse
// as generation 0, and an entry claimed without a generation is written
// in that same format, so a spoold of the previous release reads what
// this one writes (docs/ledger.md, "Generations").
func TestRedisEntriesWithoutGeneration(t *testing.T) {
	srv := testredis.Start(t)
	r := newTestRedis(t, srv.Addr())
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	x := h{t, subject{l: r, group: "g"}}
	get := func(id string) string {
		t.Helper()
		v, err := raw.Get(ctxT(t), Key("g", id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	lease := t0.Add(30 * time.Second).UnixMilli()
	old := fmt.Sprintf("in_progress\n4\n%d\n%s\n3\nboom", lease, ownerA)
	if err := raw.Set(ctxT(t), Key("g", "old"), old, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	want(t, x.gen(ownerB, 0, t0, "old"), ClaimResult{Status: Busy, Token: 4, Attempts: 3, LastError: "boom", BusyUntil: t0.Add(30 * time.Second)})
	want(t, x.gen(ownerB, 1, t0, "old"), ClaimResult{Status: Granted, Token: 5, Attempts: 4, LastError: "boom"})
	if got, w := get("old"), fmt.Sprintf("in_progress\n5\n%d\n%s@1\n4\nboom", lease, ownerB); got != w {
		t.Fatalf("entry after a claim under generation 1 = %q, want %q", got, w)
	}
	x.gen(ownerA, 0, t0, "new")
	if got, w := get("new"), fmt.Sprintf("in_progress\n1\n%d\n%s\n1\n", lease, ownerA); got != w {
		t.Fatalf("entry claimed without a generation = %q, want the previous release's format %q", got, w)
	}
	x.gen(ownerA, 7, t0, "new")
	if got, w := get("new"), fmt.Sprintf("in_progress\n2\n%d\n%s@7\n2\n", lease, ownerA); got != w {
		t.Fatalf("entry = %q, want %q", got, w)
	}
	x.complete("new", 2)
	if got, w := get("new"), "done\n2\n0\n\n2\n"; got != w {
		t.Fatalf("done entry = %q, want %q", got, w)
	}
}
