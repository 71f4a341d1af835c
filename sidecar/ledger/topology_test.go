package ledger

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spoolmq/spool/internal/testredis"
)

// The ledger against the topologies of docs/ledger.md's Configuration
// section, each with real redis-server processes (internal/testredis):
// Redis Cluster, Sentinel, an ACL user with the documented permissions,
// and TLS.

// redisSubject is a conformance subject over opts; PTTL goes through a
// client of the same topology as the default user.
func redisSubject(t *testing.T, opts RedisOptions) subject {
	t.Helper()
	r, err := NewRedis(opts)
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	raw := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: opts.Addrs, MasterName: opts.MasterName, TLSConfig: opts.TLS})
	t.Cleanup(func() { _ = raw.Close() })
	return subject{l: r, ttl: func(t *testing.T, group, id string) time.Duration {
		d, err := raw.PTTL(ctxT(t), Key(group, id)).Result()
		if err != nil {
			t.Fatalf("PTTL: %v", err)
		}
		if d == -1 {
			t.Fatalf("key %s has no TTL", Key(group, id))
		}
		return max(d, 0)
	}}
}

// runScenarios runs every conformance scenario against s, each in a fresh
// group.
func runScenarios(t *testing.T, s subject) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			s := s
			s.group = nextGroup()
			sc.run(h{t, s})
		})
	}
}

func TestClusterConformance(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	runScenarios(t, redisSubject(t, RedisOptions{Addrs: c.Addrs()}))
}

func TestSentinelConformance(t *testing.T) {
	s := testredis.StartSentinel(t)
	runScenarios(t, redisSubject(t, RedisOptions{Addrs: s.Addrs(), MasterName: s.MasterName()}))
}

// scriptCounter counts the script commands a client sends.
type scriptCounter struct {
	mu    sync.Mutex
	calls []string // "evalsha 500" (command, number of keys)
}

func (*scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			c.mu.Lock()
			c.calls = append(c.calls, fmt.Sprintf("%s %v", name, cmd.Args()[2]))
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (c *scriptCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// A batch of 500 ids of one group is one EVALSHA on one Cluster slot: the
// group's hash tag puts every key on the same node.
func TestClusterBatchIsOneScriptCallOnOneSlot(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	s := redisSubject(t, RedisOptions{Addrs: c.Addrs()})
	r := s.l.(*Redis)
	counter := &scriptCounter{}
	r.c.AddHook(counter)
	const group = "orders"
	x := h{t, subject{l: r, group: group}}
	// Load the claim and complete scripts on the group's node (the first
	// EVALSHA of each there is answered NOSCRIPT and followed by EVAL).
	x.one(ownerA, t0, "warm-up")
	x.complete("warm-up", 1)
	if got := counter.take(); len(got) != 4 {
		t.Fatalf("warm-up sent %v, want evalsha and eval for each script", got)
	}

	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("m-%03d", i)
	}
	for _, res := range x.claim(ownerA, t0, time.Minute, ids...) {
		want(t, res, ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	}
	if got := counter.take(); len(got) != 1 || got[0] != "evalsha 500" {
		t.Fatalf("a 500-id claim sent %v, want one evalsha of 500 keys", got)
	}
	fin := make([]Finish, len(ids))
	for i, id := range ids {
		fin[i] = Finish{ID: id, Token: 1}
	}
	must(t, r.Complete(ctxT(t), group, dayTTL, fin))
	if got := counter.take(); len(got) != 1 || got[0] != "evalsha 500" {
		t.Fatalf("a 500-id complete sent %v, want one evalsha of 500 keys", got)
	}
	for i, res := range x.claim(ownerB, t0, time.Minute, ids...) {
		if res.Status != Done {
			t.Fatalf("claim[%d] after complete = %+v", i, res)
		}
	}

	// Every key on one slot, held by the node that serves it.
	node, err := c.NodeFor(Key(group, ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	slot, err := node.Do("CLUSTER", "KEYSLOT", Key(group, ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got, err := node.Do("CLUSTER", "KEYSLOT", Key(group, id)); err != nil || got != slot {
			t.Fatalf("KEYSLOT %s = %v, %v; want %v", Key(group, id), got, err, slot)
		}
	}
	if n, err := node.Do("CLUSTER", "COUNTKEYSINSLOT", fmt.Sprint(slot)); err != nil || n != int64(len(ids)+1) {
		t.Fatalf("slot %v on %s holds %v keys (%v), want %d", slot, node.Addr(), n, err, len(ids)+1)
	}
}

// Groups spread over the slots, so over the masters: with several groups
// every master holds some, each key on the node that serves its slot.
func TestClusterGroupsSpreadOverMasters(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	s := redisSubject(t, RedisOptions{Addrs: c.Addrs()})
	perNode := map[string][]string{}
	for i := range 12 {
		group := fmt.Sprintf("group-%d", i)
		x := h{t, subject{l: s.l, group: group}}
		res := x.one(ownerA, t0, "m")
		x.complete("m", res.Token)
		key := Key(group, "m")
		node, err := c.NodeFor(key)
		if err != nil {
			t.Fatal(err)
		}
		// Asked directly (no redirection): the key is on that node.
		if v, err := node.Do("EXISTS", key); err != nil || v != int64(1) {
			t.Fatalf("EXISTS %s on %s = %v, %v", key, node.Addr(), v, err)
		}
		perNode[node.Addr()] = append(perNode[node.Addr()], group)
		want(t, x.one(ownerB, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
	}
	if len(perNode) != len(c.Nodes()) {
		t.Fatalf("12 groups landed on %d of %d masters: %v", len(perNode), len(c.Nodes()), perNode)
	}
}

// docACL is the ACL rule docs/ledger.md gives for the ledger's user: the
// general one, or with cluster the one for a Cluster (+cluster|slots).
func docACL(t *testing.T, cluster bool) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/ledger.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("`ACL SETUSER ([^`]+)`").FindAllSubmatch(doc, -1) {
		rule := string(m[1])
		if strings.Contains(rule, "+cluster|slots") != cluster {
			continue
		}
		if !strings.HasPrefix(rule, "spool on >secret ") {
			t.Fatalf("documented rule %q: want user spool with password secret", rule)
		}
		return rule
	}
	t.Fatalf("docs/ledger.md has no `ACL SETUSER ...` example (Cluster: %v)", cluster)
	return ""
}

// aclRoundTrip drives every call of l (logged in as the ACL user) in group;
// flush empties the servers' script caches midway, so EVAL is exercised
// too.
func aclRoundTrip(t *testing.T, l Ledger, group string, flush func()) {
	t.Helper()
	x := h{t, subject{l: l, group: group}}
	want(t, x.one(ownerA, t0, "c"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	x.complete("c", 1)
	want(t, x.one(ownerA, t0, "c"), ClaimResult{Status: Done, Token: 1, Attempts: 1})
	flush() // the next calls go through EVAL
	x.one(ownerA, t0, "r")
	x.release(Release{ID: "r", Token: 1, Error: "boom"})
	want(t, x.one(ownerA, t0, "r"), ClaimResult{Status: Granted, Token: 2, Attempts: 2, LastError: "boom"})
	x.dead("r", 2)
	want(t, x.one(ownerB, t0, "r"), ClaimResult{Status: Dead, Token: 2, Attempts: 2, LastError: "boom"})
	if got := x.reset("r", "c", "absent"); got[0] != Reset || got[1] != AlreadyDone || got[2] != Absent {
		t.Fatalf("reset = %v", got)
	}
	if p, ok := l.(interface{ Ping(context.Context) error }); ok {
		if err := p.Ping(ctxT(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	}
}

func flushScripts(t *testing.T, nodes ...*testredis.Server) func() {
	return func() {
		t.Helper()
		for _, n := range nodes {
			if _, err := n.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func newACLRedis(t *testing.T, opts RedisOptions) *Redis {
	t.Helper()
	r, err := NewRedis(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// The ACL rule of docs/ledger.md is enough for every call (including the
// EVAL fallback after the script cache is lost). A user without +set gets
// the script's permission error (Redis 7.0 words it "The user executing the
// script can't run this command", later versions NOPERM), and the server's
// ACL LOG names the user and the denied command.
func TestACLUserWithDocumentedPermissions(t *testing.T) {
	rule := docACL(t, false)
	noSet := strings.Replace(strings.Replace(rule, "spool on", "noset on", 1), " +set", "", 1)
	if noSet == rule || strings.Contains(noSet, "+set") {
		t.Fatalf("cannot drop +set from %q", rule)
	}
	srv := testredis.StartWith(t, testredis.Options{Users: []string{rule, noSet}})
	r := newACLRedis(t, RedisOptions{Addrs: []string{srv.Addr()}, Username: "spool", Password: "secret"})
	ctx := ctxT(t)
	x := h{t, subject{l: r, group: "acl"}}
	aclRoundTrip(t, r, "acl", flushScripts(t, srv))

	// The user may not touch other keys.
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "spool", Password: "secret"})
	t.Cleanup(func() { _ = raw.Close() })
	if err := raw.Set(ctx, "other", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("SET outside spool:l:* as spool: %v, want NOPERM", err)
	}

	// Without +set: a clear error, and nothing written.
	bad := newACLRedis(t, RedisOptions{Addrs: []string{srv.Addr()}, Username: "noset", Password: "secret"})
	_, err := bad.Claim(ctx, "acl", ownerA, t0, dayTTL, []Claim{{ID: "n", Lease: t0.Add(time.Minute)}})
	if err == nil || !strings.Contains(err.Error(), "ledger claim") ||
		!(strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't run this command")) {
		t.Fatalf("claim by a user without +set: %v, want the script's permission error", err)
	}
	t.Logf("user without +set: %v", err)
	log, err := srv.Do("ACL", "LOG", "1")
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := log.([]any)
	var kv []any
	if len(entries) == 1 {
		kv, _ = entries[0].([]any)
	}
	entry := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		entry[fmt.Sprint(kv[i])] = kv[i+1]
	}
	if entry["username"] != "noset" || entry["object"] != "set" || entry["context"] != "lua" {
		t.Fatalf("ACL LOG = %v, want user noset denied set from a script", log)
	}
	if got := x.reset("n"); got[0] != Absent {
		t.Fatalf("the refused claim wrote something: reset = %v", got)
	}
}

// On a Cluster the client reads the slot map (CLUSTER SLOTS): the general
// rule is refused for it, the documented Cluster rule serves every call.
func TestClusterACL(t *testing.T) {
	general := strings.Replace(docACL(t, false), "spool on", "general on", 1)
	c := testredis.StartClusterWith(t, 3, testredis.Options{Users: []string{docACL(t, true), general}})
	g := newACLRedis(t, RedisOptions{Addrs: c.Addrs(), Username: "general", Password: "secret"})
	_, err := g.Claim(ctxT(t), "acl", ownerA, t0, dayTTL, []Claim{{ID: "m", Lease: t0}})
	if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "cluster|slots") {
		t.Fatalf("claim on a Cluster without +cluster|slots: %v, want NOPERM for cluster|slots", err)
	}
	r := newACLRedis(t, RedisOptions{Addrs: c.Addrs(), Username: "spool", Password: "secret"})
	aclRoundTrip(t, r, "acl", flushScripts(t, c.Nodes()...))
}

// With Sentinel the ACL user is the master's (the sentinel is asked without
// credentials): the documented rule serves every call.
func TestSentinelACL(t *testing.T) {
	s := testredis.StartSentinel(t)
	if _, err := s.Master().Do(append([]string{"ACL", "SETUSER"}, strings.Fields(docACL(t, false))...)...); err != nil {
		t.Fatal(err)
	}
	r := newACLRedis(t, RedisOptions{Addrs: s.Addrs(), MasterName: s.MasterName(), Username: "spool", Password: "secret"})
	aclRoundTrip(t, r, "acl", flushScripts(t, s.Master()))
	// The ledger's connections to the master are logged in as spool.
	v, err := s.Master().Do("CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(fmt.Sprint(v), "\n") {
		if strings.Contains(line, "name=spool-ledger ") {
			n++
			if !strings.Contains(line, " user=spool ") {
				t.Fatalf("ledger connection not logged in as spool: %s", line)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no spool-ledger connection on the master: %v", v)
	}
}

// Over TLS a claim and its completion round-trip; a plaintext client and a
// client that does not trust the server's CA are refused.
func TestTLS(t *testing.T) {
	srv := testredis.StartWith(t, testredis.Options{TLS: true})
	r, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}, TLS: srv.TLSConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	x := h{t, subject{l: r, group: "tls"}}
	want(t, x.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	x.complete("m", 1)
	want(t, x.one(ownerB, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})

	for name, cfg := range map[string]*tls.Config{
		"plaintext":    nil,
		"untrusted CA": {MinVersion: tls.VersionTLS12},
	} {
		c, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}, TLS: cfg})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = c.Claim(ctxT(t), "tls", ownerA, t0, dayTTL, []Claim{{ID: "p", Lease: t0.Add(time.Minute)}})
		_ = c.Close()
		if err == nil {
			t.Fatalf("%s client to the TLS port: claim succeeded", name)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s client took %v to fail", name, d)
		}
		t.Logf("%s client: %v", name, err)
	}
	if got := x.reset("p"); got[0] != Absent {
		t.Fatalf("a refused client wrote: reset = %v", got)
	}
}
