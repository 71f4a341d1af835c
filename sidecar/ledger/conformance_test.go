package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spoolmq/spool/internal/testredis"
)

// The conformance suite: every scenario runs against Memory and against a
// real redis-server. Lease times are explicit (t0 + offsets), so only the
// key TTLs run on the wall clock.

var t0 = time.UnixMilli(1_800_000_000_000)

const (
	ownerA  = "node-a/1"
	ownerA2 = "node-a/2" // same node, another incarnation: another owner
	ownerB  = "node-b/1"
	dayTTL  = 24 * time.Hour
)

type subject struct {
	l     Ledger
	group string
	// ttl is the remaining time to live of (group, id); 0 when absent.
	ttl func(t *testing.T, group, id string) time.Duration
}

var groupSeq atomic.Int64

func nextGroup() string { return fmt.Sprintf("g%d", groupSeq.Add(1)) }

// forEachLedger runs fn as a subtest against Memory and against Redis.
func forEachLedger(t *testing.T, fn func(t *testing.T, s subject)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		m := NewMemory(nil)
		t.Cleanup(func() { _ = m.Close() })
		fn(t, subject{l: m, group: nextGroup(), ttl: func(_ *testing.T, group, id string) time.Duration {
			return m.TTL(group, id)
		}})
	})
	t.Run("redis", func(t *testing.T) {
		srv := testredis.Start(t)
		r := newTestRedis(t, srv.Addr())
		raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = raw.Close() })
		fn(t, subject{l: r, group: nextGroup(), ttl: func(t *testing.T, group, id string) time.Duration {
			d, err := raw.PTTL(ctxT(t), Key(group, id)).Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			if d == -1 {
				t.Fatalf("key %s has no TTL", Key(group, id))
			}
			if d < 0 {
				return 0
			}
			return d
		}})
	})
}

func newTestRedis(t testing.TB, addr string) *Redis {
	t.Helper()
	r, err := NewRedis(RedisOptions{Addrs: []string{addr}})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// h wraps a subject with helpers that fail the test on error.
type h struct {
	t *testing.T
	s subject
}

func (x h) claim(owner string, now time.Time, leaseFor time.Duration, ids ...string) []ClaimResult {
	x.t.Helper()
	cs := make([]Claim, len(ids))
	for i, id := range ids {
		cs[i] = Claim{ID: id, Lease: now.Add(leaseFor)}
	}
	res, err := x.s.l.Claim(ctxT(x.t), x.s.group, owner, now, dayTTL, cs)
	if err != nil {
		x.t.Fatalf("Claim: %v", err)
	}
	if len(res) != len(ids) {
		x.t.Fatalf("Claim returned %d results for %d ids", len(res), len(ids))
	}
	return res
}

// gen claims id for owner under an ownership generation, lease 30 s.
func (x h) gen(owner string, gen uint64, now time.Time, id string) ClaimResult {
	x.t.Helper()
	res, err := x.s.l.Claim(ctxT(x.t), x.s.group, owner, now, dayTTL, []Claim{{ID: id, Lease: now.Add(30 * time.Second), Generation: gen}})
	if err != nil {
		x.t.Fatalf("Claim: %v", err)
	}
	return res[0]
}

func (x h) one(owner string, now time.Time, id string) ClaimResult {
	x.t.Helper()
	return x.claim(owner, now, 30*time.Second, id)[0]
}

// complete completes id held under token. Its attempts hint is the token:
// right while every grant counted an attempt (Redis's one-command path),
// wrong after an uncounted release or a reset (the path that puts the
// entry right); the cases hold either way.
func (x h) complete(id string, token uint64) {
	x.t.Helper()
	if err := x.s.l.Complete(ctxT(x.t), x.s.group, dayTTL, []Finish{{ID: id, Token: token, Attempts: int(token)}}); err != nil {
		x.t.Fatalf("Complete: %v", err)
	}
}

func (x h) release(r Release) {
	x.t.Helper()
	if err := x.s.l.Release(ctxT(x.t), x.s.group, dayTTL, []Release{r}); err != nil {
		x.t.Fatalf("Release: %v", err)
	}
}

func (x h) dead(id string, token uint64) {
	x.t.Helper()
	if err := x.s.l.Dead(ctxT(x.t), x.s.group, dayTTL, []Finish{{ID: id, Token: token}}); err != nil {
		x.t.Fatalf("Dead: %v", err)
	}
}

func (x h) reset(ids ...string) []ResetResult {
	x.t.Helper()
	res, err := x.s.l.Reset(ctxT(x.t), x.s.group, ids)
	if err != nil {
		x.t.Fatalf("Reset: %v", err)
	}
	return res
}

func want(t *testing.T, got ClaimResult, w ClaimResult) {
	t.Helper()
	if !got.BusyUntil.Equal(w.BusyUntil) || got.Status != w.Status || got.Token != w.Token || got.Attempts != w.Attempts || got.LastError != w.LastError {
		t.Fatalf("got %+v, want %+v", got, w)
	}
}

var scenarios = []struct {
	name string
	run  func(x h)
}{
	{"new claim is granted token 1 attempt 1", func(x h) {
		want(x.t, x.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	}},
	{"complete then claim is done", func(x h) {
		x.one(ownerA, t0, "m")
		x.complete("m", 1)
		want(x.t, x.one(ownerB, t0.Add(time.Hour), "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
		want(x.t, x.one(ownerA, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
	}},
	{"release then claim is granted token 2 attempt 2 with the last error", func(x h) {
		x.one(ownerA, t0, "m")
		x.release(Release{ID: "m", Token: 1, Error: "boom"})
		want(x.t, x.one(ownerB, t0.Add(time.Second), "m"), ClaimResult{Status: Granted, Token: 2, Attempts: 2, LastError: "boom"})
	}},
	{"release uncount does not count the attempt and keeps the last error", func(x h) {
		x.one(ownerA, t0, "m")
		x.release(Release{ID: "m", Token: 1, Error: "first"})
		x.one(ownerA, t0, "m")
		x.release(Release{ID: "m", Token: 2, Uncount: true})
		want(x.t, x.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 3, Attempts: 2, LastError: "first"})
	}},
	{"live lease of another owner is busy until its deadline", func(x h) {
		x.claim(ownerA, t0, 30*time.Second, "m")
		want(x.t, x.one(ownerB, t0.Add(29*time.Second), "m"), ClaimResult{Status: Busy, Token: 1, Attempts: 1, BusyUntil: t0.Add(30 * time.Second)})
		// Same node id, another incarnation: not our process.
		want(x.t, x.one(ownerA2, t0.Add(time.Second), "m"), ClaimResult{Status: Busy, Token: 1, Attempts: 1, BusyUntil: t0.Add(30 * time.Second)})
	}},
	{"expired lease is taken over with token+1", func(x h) {
		x.claim(ownerA, t0, 30*time.Second, "m")
		want(x.t, x.one(ownerA2, t0.Add(30*time.Second), "m"), ClaimResult{Status: Granted, Token: 2, Attempts: 2})
		x.complete("m", 1) // the old holder's late ack: stale
		want(x.t, x.one(ownerB, t0.Add(31*time.Second), "m"), ClaimResult{Status: Busy, Token: 2, Attempts: 2, BusyUntil: t0.Add(60 * time.Second)})
		x.complete("m", 2)
		want(x.t, x.one(ownerB, t0.Add(time.Hour), "m"), ClaimResult{Status: Done, Token: 2, Attempts: 2})
	}},
	{"a live lease of an older generation is taken over by a newer one", func(x h) {
		want(x.t, x.gen(ownerA, 3, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
		busyA := ClaimResult{Status: Busy, Token: 1, Attempts: 1, BusyUntil: t0.Add(30 * time.Second)}
		want(x.t, x.gen(ownerB, 3, t0.Add(time.Second), "m"), busyA)
		want(x.t, x.gen(ownerB, 2, t0.Add(time.Second), "m"), busyA)
		want(x.t, x.gen(ownerB, 0, t0.Add(time.Second), "m"), busyA)
		want(x.t, x.gen(ownerB, 4, t0.Add(time.Second), "m"), ClaimResult{Status: Granted, Token: 2, Attempts: 2})
		x.complete("m", 1) // the fenced holder's late ack: stale
		// The fenced holder cannot take it back with its old generation.
		want(x.t, x.gen(ownerA, 3, t0.Add(2*time.Second), "m"), ClaimResult{Status: Busy, Token: 2, Attempts: 2, BusyUntil: t0.Add(31 * time.Second)})
		// The same owner reclaims its own lease whatever the generation.
		want(x.t, x.gen(ownerB, 1, t0.Add(2*time.Second), "m"), ClaimResult{Status: Granted, Token: 3, Attempts: 3})
		x.complete("m", 3)
		want(x.t, x.gen(ownerA, 9, t0.Add(3*time.Second), "m"), ClaimResult{Status: Done, Token: 3, Attempts: 3})
	}},
	{"a lease without a generation is taken over by any generation", func(x h) {
		x.one(ownerA, t0, "m") // generation 0: a single node, or the previous release
		want(x.t, x.gen(ownerB, 0, t0.Add(time.Second), "m"), ClaimResult{Status: Busy, Token: 1, Attempts: 1, BusyUntil: t0.Add(30 * time.Second)})
		want(x.t, x.gen(ownerB, 1, t0.Add(time.Second), "m"), ClaimResult{Status: Granted, Token: 2, Attempts: 2})
	}},
	{"a generation survives release and is replaced by the next grant", func(x h) {
		x.gen(ownerA, 5, t0, "m")
		x.release(Release{ID: "m", Token: 1, Error: "e"})
		want(x.t, x.gen(ownerB, 2, t0, "m"), ClaimResult{Status: Granted, Token: 2, Attempts: 2, LastError: "e"})
		// Now held under generation 2: generation 3 takes it over.
		want(x.t, x.gen(ownerA, 3, t0.Add(time.Second), "m"), ClaimResult{Status: Granted, Token: 3, Attempts: 3, LastError: "e"})
	}},
	{"same owner reclaims a live lease with token+1", func(x h) {
		x.one(ownerA, t0, "m")
		want(x.t, x.one(ownerA, t0.Add(time.Second), "m"), ClaimResult{Status: Granted, Token: 2, Attempts: 2})
	}},
	{"stale complete, release and dead change nothing", func(x h) {
		x.one(ownerA, t0, "m")
		x.one(ownerA, t0, "m") // token 2
		x.complete("m", 1)
		x.release(Release{ID: "m", Token: 1, Error: "stale", Uncount: true})
		x.dead("m", 1)
		x.complete("m", 0)
		want(x.t, x.one(ownerB, t0.Add(time.Second), "m"), ClaimResult{Status: Busy, Token: 2, Attempts: 2, BusyUntil: t0.Add(30 * time.Second)})
		// Settling an absent id creates nothing.
		x.complete("absent", 1)
		x.dead("absent2", 1)
		x.release(Release{ID: "absent3", Token: 1, Error: "x"})
		if got := x.reset("absent", "absent2", "absent3"); got[0] != Absent || got[1] != Absent || got[2] != Absent {
			x.t.Fatalf("reset of never-claimed ids = %v", got)
		}
	}},
	{"settling a released entry: complete and release are ignored, dead applies", func(x h) {
		x.one(ownerA, t0, "m")
		x.release(Release{ID: "m", Token: 1, Error: "e1"})
		x.complete("m", 1)
		x.release(Release{ID: "m", Token: 1, Error: "e2"})
		x.dead("m", 1)
		want(x.t, x.one(ownerB, t0, "m"), ClaimResult{Status: Dead, Token: 1, Attempts: 1, LastError: "e1"})
	}},
	{"dead then claim is dead", func(x h) {
		x.one(ownerA, t0, "m")
		x.release(Release{ID: "m", Token: 1, Error: "e1"})
		x.one(ownerA, t0, "m")
		x.dead("m", 2)
		want(x.t, x.one(ownerB, t0, "m"), ClaimResult{Status: Dead, Token: 2, Attempts: 2, LastError: "e1"})
		x.complete("m", 2) // done does not override dead
		want(x.t, x.one(ownerB, t0, "m"), ClaimResult{Status: Dead, Token: 2, Attempts: 2, LastError: "e1"})
	}},
	{"reset of dead, released and in-progress starts afresh; tokens keep rising", func(x h) {
		x.one(ownerA, t0, "d")
		x.release(Release{ID: "d", Token: 1, Error: "e"})
		x.one(ownerA, t0, "d")
		x.dead("d", 2)
		x.one(ownerA, t0, "r")
		x.release(Release{ID: "r", Token: 1, Error: "e"})
		x.one(ownerA, t0, "p")
		if got := x.reset("d", "r", "p"); got[0] != Reset || got[1] != Reset || got[2] != Reset {
			x.t.Fatalf("reset = %v", got)
		}
		want(x.t, x.one(ownerB, t0, "d"), ClaimResult{Status: Granted, Token: 3, Attempts: 1})
		want(x.t, x.one(ownerB, t0, "r"), ClaimResult{Status: Granted, Token: 2, Attempts: 1})
		want(x.t, x.one(ownerB, t0, "p"), ClaimResult{Status: Granted, Token: 2, Attempts: 1})
		// The holder from before the reset cannot settle the new delivery.
		x.complete("p", 1)
		want(x.t, x.one(ownerA, t0, "p"), ClaimResult{Status: Busy, Token: 2, Attempts: 1, BusyUntil: t0.Add(30 * time.Second)})
	}},
	{"reset of a reset entry is absent", func(x h) {
		x.one(ownerA, t0, "m")
		x.dead("m", 1)
		x.reset("m")
		if got := x.reset("m"); got[0] != Absent {
			x.t.Fatalf("second reset = %v", got)
		}
	}},
	{"reset of done is already done and stays done", func(x h) {
		x.one(ownerA, t0, "m")
		x.complete("m", 1)
		if got := x.reset("m", "missing"); got[0] != AlreadyDone || got[1] != Absent {
			x.t.Fatalf("reset = %v", got)
		}
		want(x.t, x.one(ownerB, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
	}},
	{"every write sets the ttl; reads do not refresh it", func(x h) {
		near := func(id string, w time.Duration) {
			x.t.Helper()
			if got := x.s.ttl(x.t, x.s.group, id); got > w || got < w-time.Minute {
				x.t.Fatalf("ttl of %s = %v, want about %v", id, got, w)
			}
		}
		l, g := x.s.l, x.s.group
		ctx := ctxT(x.t)
		for _, id := range []string{"c", "r", "d"} {
			if _, err := l.Claim(ctx, g, ownerA, t0, 2*time.Hour, []Claim{{ID: id, Lease: t0.Add(time.Minute)}}); err != nil {
				x.t.Fatal(err)
			}
			near(id, 2*time.Hour)
		}
		must(x.t, l.Complete(ctx, g, 3*time.Hour, []Finish{{ID: "c", Token: 1}}))
		must(x.t, l.Release(ctx, g, 4*time.Hour, []Release{{ID: "r", Token: 1}}))
		must(x.t, l.Dead(ctx, g, 5*time.Hour, []Finish{{ID: "d", Token: 1}}))
		near("c", 3*time.Hour)
		near("r", 4*time.Hour)
		near("d", 5*time.Hour)
		// A dedupe hit or a dead answer writes nothing: the TTL runs from completion.
		if _, err := l.Claim(ctx, g, ownerA, t0, 10*time.Hour, []Claim{{ID: "c", Lease: t0}, {ID: "d", Lease: t0}}); err != nil {
			x.t.Fatal(err)
		}
		near("c", 3*time.Hour)
		near("d", 5*time.Hour)
		// ttl 0 is the default (7 days).
		if _, err := l.Claim(ctx, g, ownerA, t0, 0, []Claim{{ID: "z", Lease: t0}}); err != nil {
			x.t.Fatal(err)
		}
		near("z", DefaultTTL)
		// A completion that changes nothing (a stale token) still restarts
		// the TTL: Redis's one-command completion writes, then puts the
		// entry back.
		must(x.t, l.Complete(ctx, g, 6*time.Hour, []Finish{{ID: "z", Token: 9, Attempts: 1}}))
		near("z", 6*time.Hour)
	}},
	{"a batch mixing every status answers in order", func(x h) {
		x.one(ownerA, t0, "done")
		x.complete("done", 1)
		x.one(ownerA, t0, "dead")
		x.dead("dead", 1)
		x.one(ownerB, t0, "busy")
		x.one(ownerA, t0, "released")
		x.release(Release{ID: "released", Token: 1, Error: "why"})
		x.claim(ownerB, t0.Add(-time.Hour), time.Second, "expired")
		got := x.claim(ownerA, t0.Add(time.Second), time.Minute, "done", "new", "dead", "busy", "released", "expired")
		want(x.t, got[0], ClaimResult{Status: Done, Token: 1, Attempts: 1})
		want(x.t, got[1], ClaimResult{Status: Granted, Token: 1, Attempts: 1})
		want(x.t, got[2], ClaimResult{Status: Dead, Token: 1, Attempts: 1})
		want(x.t, got[3], ClaimResult{Status: Busy, Token: 1, Attempts: 1, BusyUntil: t0.Add(30 * time.Second)})
		want(x.t, got[4], ClaimResult{Status: Granted, Token: 2, Attempts: 2, LastError: "why"})
		want(x.t, got[5], ClaimResult{Status: Granted, Token: 2, Attempts: 2})
	}},
	{"a batch of 1,500 is split and keeps its order", func(x h) {
		ids := make([]string, 1500)
		for i := range ids {
			ids[i] = fmt.Sprintf("id-%04d", i)
		}
		// Every third id is done before the batch.
		for i := 0; i < len(ids); i += 3 {
			x.one(ownerA, t0, ids[i])
			x.complete(ids[i], 1)
		}
		got := x.claim(ownerA, t0, time.Minute, ids...)
		fin := make([]Finish, 0, len(ids))
		for i, r := range got {
			if i%3 == 0 {
				want(x.t, r, ClaimResult{Status: Done, Token: 1, Attempts: 1})
				continue
			}
			want(x.t, r, ClaimResult{Status: Granted, Token: 1, Attempts: 1})
			fin = append(fin, Finish{ID: ids[i], Token: 1})
		}
		must(x.t, x.s.l.Complete(ctxT(x.t), x.s.group, dayTTL, fin))
		for i, r := range x.reset(ids...) {
			if r != AlreadyDone {
				x.t.Fatalf("reset[%d] = %v", i, r)
			}
		}
		for i, r := range x.claim(ownerB, t0, time.Minute, ids...) {
			if r.Status != Done {
				x.t.Fatalf("claim[%d] after complete = %+v", i, r)
			}
		}
	}},
	{"the recorded error is capped at 1 KiB on a rune boundary", func(x h) {
		x.one(ownerA, t0, "m")
		x.release(Release{ID: "m", Token: 1, Error: "é" + strings.Repeat("x", 1021) + "éé"})
		got := x.one(ownerA, t0, "m").LastError
		if len(got) != 1023 || !strings.HasPrefix(got, "é") {
			x.t.Fatalf("last error has %d bytes", len(got))
		}
	}},
	{"ids and owners are opaque bytes", func(x h) {
		id := "a:{b}:\x00ü\n*1\r\n$3"
		owner := "node {x}/inc:1\x00"
		want(x.t, x.one(owner, t0, id), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
		want(x.t, x.one(ownerB, t0, id), ClaimResult{Status: Busy, Token: 1, Attempts: 1, BusyUntil: t0.Add(30 * time.Second)})
		want(x.t, x.one(owner, t0, id), ClaimResult{Status: Granted, Token: 2, Attempts: 2})
	}},
	{"groups are separate", func(x h) {
		x.one(ownerA, t0, "m")
		x.complete("m", 1)
		other := subject{l: x.s.l, group: x.s.group + "-other"}
		want(x.t, h{x.t, other}.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	}},
	{"empty batches are no-ops", func(x h) {
		ctx := ctxT(x.t)
		res, err := x.s.l.Claim(ctx, x.s.group, ownerA, t0, dayTTL, nil)
		if err != nil || len(res) != 0 {
			x.t.Fatalf("empty claim = %v, %v", res, err)
		}
		must(x.t, x.s.l.Complete(ctx, x.s.group, dayTTL, nil))
		must(x.t, x.s.l.Release(ctx, x.s.group, dayTTL, nil))
		must(x.t, x.s.l.Dead(ctx, x.s.group, dayTTL, nil))
		if rr, err := x.s.l.Reset(ctx, x.s.group, nil); err != nil || len(rr) != 0 {
			x.t.Fatalf("empty reset = %v, %v", rr, err)
		}
	}},
	{"bad arguments are ErrInvalid", func(x h) {
		ctx := ctxT(x.t)
		l := x.s.l
		c := []Claim{{ID: "m", Lease: t0}}
		for name, err := range map[string]error{
			"empty group":  first(l.Claim(ctx, "", ownerA, t0, dayTTL, c)),
			"brace group":  first(l.Claim(ctx, "a{b", ownerA, t0, dayTTL, c)),
			"close brace":  l.Complete(ctx, "a}b", dayTTL, []Finish{{ID: "m", Token: 1}}),
			"empty owner":  first(l.Claim(ctx, x.s.group, "", t0, dayTTL, c)),
			"owner with @": first(l.Claim(ctx, x.s.group, "node@1", t0, dayTTL, c)),
			"empty id":     first(l.Claim(ctx, x.s.group, ownerA, t0, dayTTL, []Claim{{ID: "ok"}, {ID: ""}})),
			"negative ttl": first(l.Claim(ctx, x.s.group, ownerA, t0, -time.Second, c)),
			"release id":   l.Release(ctx, x.s.group, dayTTL, []Release{{ID: ""}}),
			"dead id":      l.Dead(ctx, x.s.group, dayTTL, []Finish{{ID: ""}}),
			"reset id":     second(l.Reset(ctx, x.s.group, []string{""})),
		} {
			if !errors.Is(err, ErrInvalid) {
				x.t.Errorf("%s: err = %v, want ErrInvalid", name, err)
			}
		}
		// Nothing of a refused batch was written.
		want(x.t, x.one(ownerA, t0, "ok"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	}},
}

func first[T any](_ T, err error) error  { return err }
func second[T any](_ T, err error) error { return err }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	forEachLedger(t, func(t *testing.T, s subject) {
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				s := s
				s.group = nextGroup()
				sc.run(h{t, s})
			})
		}
	})
}
