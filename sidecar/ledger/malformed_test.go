package ledger

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spoolmq/spool/internal/testredis"
)

// malformedValues are entries planted under the ledger's prefix that the
// scripts must not trust: text in no ledger format, a field out of range,
// and keys of other Redis types.
var malformedValues = map[string]func(raw *redis.Client, t *testing.T, key string){
	"not the format": setRaw("not a ledger entry"),
	"truncated":      setRaw("in_progress\n1\nbroken"),
	"unknown state":  setRaw("stolen\n1\n0\n\n1\n"),
	"token text":     setRaw("released\nx\n0\n\n1\n"),
	"huge attempts":  setRaw("released\n1\n0\n\n99999999999999999999\n"),
	"huge token":     setRaw("released\n99999999999999999999\n0\n\n1\n"),
	"huge lease":     setRaw("in_progress\n1\n99999999999999999999\nother\n1\n"),
	"long error":     setRaw("released\n1\n0\n\n1\n" + strings.Repeat("e", MaxErrorBytes+1)),
	"a hash": delThen(func(raw *redis.Client, t *testing.T, key string) {
		must(t, raw.HSet(ctxT(t), key, "state", "done").Err())
	}),
	"a list": delThen(func(raw *redis.Client, t *testing.T, key string) {
		must(t, raw.RPush(ctxT(t), key, "x").Err())
	}),
}

func setRaw(v string) func(raw *redis.Client, t *testing.T, key string) {
	return func(raw *redis.Client, t *testing.T, key string) { must(t, raw.Set(ctxT(t), key, v, 0).Err()) }
}

func delThen(plant func(raw *redis.Client, t *testing.T, key string)) func(raw *redis.Client, t *testing.T, key string) {
	return func(raw *redis.Client, t *testing.T, key string) {
		must(t, raw.Del(ctxT(t), key).Err())
		plant(raw, t, key)
	}
}

// malformedCounter records OnMalformed calls.
type malformedCounter struct {
	mu   sync.Mutex
	seen []string // op/group/key
}

func (m *malformedCounter) hook(op, group, key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = append(m.seen, op+" "+group+" "+key)
}

func (m *malformedCounter) count() int { m.mu.Lock(); defer m.mu.Unlock(); return len(m.seen) }

// A malformed entry affects only its own message: a claim of a batch that
// holds one grants the others as if it were not there (attempt 1), and
// treats the malformed one as an unknown entry: overwritten with a first
// attempt, reported once through OnMalformed. Before, the script failed
// on it after writing the keys before it, so each retry of the batch
// burned an attempt of every message ahead of it until they were
// dead-lettered undelivered.
func TestRedisMalformedEntryAffectsOnlyItsMessage(t *testing.T) {
	srv := testredis.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	for name, plant := range malformedValues {
		t.Run(name, func(t *testing.T) {
			var mc malformedCounter
			r, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}, OnMalformed: mc.hook})
			must(t, err)
			t.Cleanup(func() { _ = r.Close() })
			x := h{t, subject{l: r, group: nextGroup()}}
			plant(raw, t, Key(x.s.group, "bad"))
			// The same batch claimed three times, as a delivery loop retries.
			for i := range 3 {
				res := x.claim(ownerA, t0, time.Minute, "a", "bad", "b")
				want(t, res[0], ClaimResult{Status: Granted, Token: uint64(i + 1), Attempts: i + 1})
				want(t, res[1], ClaimResult{Status: Granted, Token: uint64(i + 1), Attempts: i + 1})
				want(t, res[2], ClaimResult{Status: Granted, Token: uint64(i + 1), Attempts: i + 1})
			}
			if n := mc.count(); n != 1 {
				t.Fatalf("OnMalformed called %d times (%v), want once", n, mc.seen)
			}
			if ttl := raw.PTTL(ctxT(t), Key(x.s.group, "bad")).Val(); ttl <= 0 {
				t.Fatalf("the overwritten entry has TTL %v, want the dedupe TTL", ttl)
			}
		})
	}
}

// Complete, Release, Dead and Reset meet a malformed entry too (planted
// after the claim): it is left alone (Complete, Release, Dead: not held
// under the caller's token; Reset: absent, as an unknown entry is),
// reported through OnMalformed, and the other items of the batch are
// applied.
func TestRedisMalformedEntrySettlements(t *testing.T) {
	srv := testredis.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	for name, plant := range malformedValues {
		t.Run(name, func(t *testing.T) {
			var mc malformedCounter
			r, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}, OnMalformed: mc.hook})
			must(t, err)
			t.Cleanup(func() { _ = r.Close() })
			g := nextGroup()
			x := h{t, subject{l: r, group: g}}
			x.claim(ownerA, t0, time.Minute, "c", "r", "d", "bad")
			plant(raw, t, Key(g, "bad"))
			must(t, r.Complete(ctxT(t), g, dayTTL, []Finish{{ID: "bad", Token: 1, Attempts: 1}, {ID: "c", Token: 1, Attempts: 1}}))
			must(t, r.Release(ctxT(t), g, dayTTL, []Release{{ID: "bad", Token: 1}, {ID: "r", Token: 1, Error: "boom"}}))
			must(t, r.Dead(ctxT(t), g, dayTTL, []Finish{{ID: "bad", Token: 1}, {ID: "d", Token: 1}}))
			want(t, x.one(ownerB, t0, "c"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
			want(t, x.one(ownerB, t0, "r"), ClaimResult{Status: Granted, Token: 2, Attempts: 2, LastError: "boom"})
			want(t, x.one(ownerB, t0, "d"), ClaimResult{Status: Dead, Token: 1, Attempts: 1})
			if n := mc.count(); n != 3 {
				t.Fatalf("OnMalformed called %d times (%v), want 3", n, mc.seen)
			}
			res, err := r.Reset(ctxT(t), g, []string{"bad", "d"})
			must(t, err)
			if res[0] != Absent || res[1] != Reset {
				t.Fatalf("reset of a malformed entry and a dead one: %v", res)
			}
			want(t, x.one(ownerB, t0, "bad"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
			if n := mc.count(); n != 5 {
				t.Fatalf("OnMalformed called %d times (%v), want 5 (reset, then the claim)", n, mc.seen)
			}
		})
	}
}
