package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spoolmq/spool/internal/testredis"
)

// Two installations with their own key prefixes share one Redis without
// seeing each other's entries: the same group and id are two messages.
func TestRedisKeyPrefixesDoNotInterfere(t *testing.T) {
	srv := testredis.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	open := func(prefix string) h {
		r, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}, KeyPrefix: prefix})
		must(t, err)
		t.Cleanup(func() { _ = r.Close() })
		return h{t, subject{l: r, group: "g"}}
	}
	a, b := open("shop-a:l:"), open("shop-b:l:")
	want(t, a.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	a.complete("m", 1)
	want(t, b.one(ownerB, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	want(t, a.one(ownerB, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
	b.dead("m", 1)
	want(t, a.one(ownerB, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
	if got := b.reset("m"); got[0] != Reset {
		t.Fatalf("reset under shop-b: %v", got)
	}
	keys, err := raw.Keys(ctxT(t), "*").Result()
	must(t, err)
	if strings.Join(keys, ",") != "shop-a:l:{g}:m,shop-b:l:{g}:m" && strings.Join(keys, ",") != "shop-b:l:{g}:m,shop-a:l:{g}:m" {
		t.Fatalf("keys in Redis: %v, want one under each prefix", keys)
	}
	// The default is the prefix of every earlier release.
	d := open("")
	d.one(ownerA, t0, "x")
	if n := raw.Exists(ctxT(t), "spool:l:{g}:x").Val(); n != 1 {
		t.Fatal("the default prefix is not spool:l:")
	}
}

func TestRedisKeyPrefixValidated(t *testing.T) {
	for _, p := range []string{"has space:", "tab\t", "new\nline", "{tag}:", "a}", strings.Repeat("p", MaxKeyPrefixBytes+1), "\x00"} {
		if _, err := NewRedis(RedisOptions{Addrs: []string{"127.0.0.1:1"}, KeyPrefix: p}); !errors.Is(err, ErrInvalid) {
			t.Errorf("prefix %q: err = %v, want ErrInvalid", p, err)
		}
	}
	r, err := NewRedis(RedisOptions{Addrs: []string{"127.0.0.1:1"}, KeyPrefix: strings.Repeat("p", MaxKeyPrefixBytes)})
	must(t, err)
	_ = r.Close()
}

// The documented ACL rule with the installation's prefix as its key
// pattern (~<key_prefix>*) is enough for every call, and keeps the user
// out of another installation's prefix on the same Redis.
func TestACLKeyPatternPerPrefix(t *testing.T) {
	rule := docACL(t, false)
	shopA := strings.Replace(rule, "~spool:l:*", "~shop-a:l:*", 1)
	if shopA == rule {
		t.Fatalf("documented rule %q has no ~spool:l:* key pattern", rule)
	}
	srv := testredis.StartWith(t, testredis.Options{Users: []string{shopA}})
	r := newACLRedis(t, RedisOptions{Addrs: []string{srv.Addr()}, Username: "spool", Password: "secret", KeyPrefix: "shop-a:l:"})
	aclRoundTrip(t, r, "acl", flushScripts(t, srv))
	other := newACLRedis(t, RedisOptions{Addrs: []string{srv.Addr()}, Username: "spool", Password: "secret", KeyPrefix: "shop-b:l:"})
	_, err := other.Claim(ctxT(t), "acl", ownerA, t0, dayTTL, []Claim{{ID: "m", Lease: t0.Add(time.Minute)}})
	if err == nil || !(strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "no permissions")) {
		t.Fatalf("claim under another installation's prefix: %v, want a permission error", err)
	}
	t.Logf("claim under shop-b:l: as shop-a's user: %v", err)
}
