package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/internal/testnats"
	"github.com/spoolmq/spool/internal/testredis"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// evidence gathers what a spoold shows to the outside: its log files, the
// /metrics pages, and the errors its clients got.
type evidence struct {
	t      *testing.T
	logs   []string // paths, read at the end
	pages  []string
	errors []string
}

// page fetches url's body (with a bearer token, if any).
func (e *evidence) page(url, token string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	e.pages = append(e.pages, string(b))
}

// refused records err, which must be a refusal.
func (e *evidence) refused(what string, err error, want codes.Code) {
	e.t.Helper()
	if status.Code(err) != want {
		e.t.Errorf("%s: %v, want %v", what, err, want)
	}
	if err != nil {
		e.errors = append(e.errors, err.Error())
	}
}

// check fails for every secret found anywhere, saying where.
func (e *evidence) check(secrets map[string]string) {
	e.t.Helper()
	var logs []string
	for _, p := range e.logs {
		b, err := os.ReadFile(p)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(b) == 0 {
			e.t.Errorf("%s is empty: nothing was searched", p)
		}
		logs = append(logs, string(b))
		e.t.Logf("%s: %d lines searched", filepath.Base(p), strings.Count(string(b), "\n"))
	}
	e.t.Logf("%d /metrics pages and %d client errors searched", len(e.pages), len(e.errors))
	for name, secret := range secrets {
		for where, texts := range map[string][]string{"a log": logs, "a /metrics page": e.pages, "an error a client got": e.errors} {
			for _, text := range texts {
				if i := strings.Index(text, secret); i >= 0 {
					e.t.Errorf("the %s appears in %s: ...%s...", name, where, text[max(i-200, 0):min(i+len(secret)+50, len(text))])
				}
			}
		}
	}
}

// No credential reaches a log line, a /metrics page or an error a client
// gets, from real spoold processes started with known secrets and put
// through their paces, failures included: the NATS password in its URL,
// the Redis password, an admin and an app token (and wrong ones a client
// tried), a cluster's join secret (and a wrong one a node tried). Redis
// is killed and brought back, NATS is stopped and started, a second
// spoold is given a wrong NATS password, a node tries to join with the
// wrong join secret.
func TestNoCredentialInLogsMetricsOrErrors(t *testing.T) {
	secrets := map[string]string{
		"NATS password":       "nats-pw-Secret-41a7c9",
		"wrong NATS password": "nats-wrong-pw-Secret-5e21",
		"Redis password":      "redis-pw-Secret-77d0b3",
		"admin token":         "admin-token-Secret-0123456789abcdef0123",
		"wrong admin token":   "admin-wrong-token-Secret-0123456789abcd",
		"app token":           "app-token-Secret-0123456789abcdef012345",
		"wrong app token":     "app-wrong-token-Secret-0123456789abcdef",
		"join secret":         "e2e-join-secret-0123456789", // newPeerCreds's
		"wrong join secret":   "wrong-join-secret-Secret-0123456789",
	}
	e := &evidence{t: t}
	dir := t.TempDir()
	srv := testnats.StartConfig(t, fmt.Sprintf("authorization { user: spool, password: %q }\n", secrets["NATS password"]))
	port := strings.TrimPrefix(srv.URL(), "nats://127.0.0.1:")
	r := testredis.StartWith(t, testredis.Options{Users: []string{"spool on >" + secrets["Redis password"] + " ~* &* +@all"}})
	adminTokens, appTokens := filepath.Join(dir, "admin-tokens"), filepath.Join(dir, "app-tokens")
	writeFile(t, adminTokens, []byte(secrets["admin token"]+" oncall operate\n"))
	writeFile(t, appTokens, []byte(secrets["app token"]+" orders-app\n"))
	config := func(natsPW string) string {
		return fmt.Sprintf(`storage:
  backend: jetstream
  jetstream:
    urls: ["nats://spool:%s@127.0.0.1:%s"]
redis:
  addrs: [%q]
  username: spool
  password: %q
topics:
  - name: orders
subscriptions:
  - {topic: orders, group: workers, visibility_timeout: 10s}
admin:
  tokens_file: %s
apps:
  tokens_file: %s
`, natsPW, port, r.Addr(), secrets["Redis password"], adminTokens, appTokens)
	}
	probe := freeAddrs(t, 1)[0]
	n := startNodeWith(t, "  probe_listen: "+probe+"\n", config(secrets["NATS password"]))
	e.logs = append(e.logs, n.logPath)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+n.app, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pub := spoolv1.NewPublisherServiceClient(conn)
	publish := func(token, payload string) error {
		c := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		_, err := pub.Publish(c, &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{{Payload: []byte(payload)}}})
		return err
	}
	if err := publish(secrets["app token"], "m1"); err != nil {
		t.Fatalf("publish with the app token: %v", err)
	}
	e.refused("publish with a wrong token", publish(secrets["wrong app token"], "x"), codes.Unauthenticated)
	s := subscribeInProcess(t, n)
	eventually(t, 30*time.Second, "m1 delivered", func() bool { return s.has("m1") })

	adm := n.adminClient()
	_, err = adm.CreateTopic(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secrets["admin token"]), &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 1})
	if err != nil {
		t.Fatalf("CreateTopic with the admin token: %v", err)
	}
	_, err = adm.ListTopics(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secrets["wrong admin token"]), &spoolv1.ListTopicsRequest{})
	e.refused("ListTopics with a wrong token", err, codes.Unauthenticated)
	_, err = adm.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	e.refused("ListTopics without a token", err, codes.Unauthenticated)

	// Redis goes away: deliveries meet ledger errors, then it is back.
	r.Kill()
	if err := publish(secrets["app token"], "m2"); err != nil {
		t.Fatalf("publish while Redis is down: %v", err)
	}
	eventually(t, 30*time.Second, "spoold logs the ledger's failure", func() bool {
		b, _ := os.ReadFile(n.logPath)
		return strings.Contains(string(b), r.Addr()) && strings.Contains(strings.ToLower(string(b)), "redis")
	})
	r.Restart()
	eventually(t, 60*time.Second, "m2 delivered once Redis is back", func() bool { return s.has("m2") })

	// NATS goes away and comes back: reconnecting is logged with its URL.
	srv.Stop()
	eventually(t, 30*time.Second, "spoold logs the lost NATS connection", func() bool {
		b, _ := os.ReadFile(n.logPath)
		return strings.Contains(string(b), "disconnected from NATS")
	})
	srv.Start()
	eventually(t, 60*time.Second, "publishing works again", func() bool { return publish(secrets["app token"], "m3") == nil })
	eventually(t, 30*time.Second, "m3 delivered", func() bool { return s.has("m3") })

	e.page("http://"+n.admin+"/metrics", secrets["admin token"])
	e.page("http://"+probe+"/metrics", "")

	// A spoold with a wrong NATS password does not start, and says so
	// without either password.
	bad := &node{t: t, dataDir: filepath.Join(dir, "bad", "data"), cfgPath: filepath.Join(dir, "bad.yaml"), logPath: filepath.Join(dir, "bad.log")}
	addrs := freeAddrs(t, 2)
	bad.app, bad.admin = addrs[0], addrs[1]
	writeFile(t, bad.cfgPath, []byte(fmt.Sprintf("node:\n  id: bad\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n", bad.dataDir, bad.app, bad.admin)+config(secrets["wrong NATS password"])))
	t.Cleanup(bad.kill)
	bad.launch()
	select {
	case <-bad.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("a spoold with a wrong NATS password is still running")
	}
	e.logs = append(e.logs, bad.logPath)
	if b, _ := os.ReadFile(bad.logPath); !strings.Contains(strings.ToLower(string(b)), "authorization") {
		t.Errorf("the spoold with a wrong NATS password does not say why it stopped:\n%s", tail(string(b), 20))
	}

	// A cluster node (its join secret from newPeerCreds), and one that
	// tries to join it with a wrong secret.
	sc := startClusterWith(t, 1, "", clusterTopics)
	e.logs = append(e.logs, sc.nodes[0].logPath)
	out := &node{t: t, dataDir: filepath.Join(dir, "out", "data"), cfgPath: filepath.Join(dir, "out.yaml"), logPath: filepath.Join(dir, "out.log")}
	addrs = freeAddrs(t, 3)
	out.app, out.admin = addrs[0], addrs[1]
	wrong := filepath.Join(dir, "wrong-join-secret")
	writeFile(t, wrong, []byte(secrets["wrong join secret"]+"\n"))
	writeFile(t, out.cfgPath, []byte(fmt.Sprintf("node:\n  id: outsider\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n  drain_timeout: 5s\ncluster:\n  listen: %q\n  join: [%q]\n%s",
		out.dataDir, out.app, out.admin, addrs[2], sc.seed, sc.creds.section("node", "", wrong))+clusterTopics))
	t.Cleanup(out.kill)
	out.launch()
	select {
	case <-out.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("a spoold with a wrong join secret is still running: admitted?")
	}
	e.logs = append(e.logs, out.logPath)
	if b, _ := os.ReadFile(out.logPath); !strings.Contains(string(b), "join secret") {
		t.Errorf("the node with a wrong join secret does not say why it stopped:\n%s", tail(string(b), 20))
	}
	e.page("http://"+sc.nodes[0].admin+"/metrics", "")

	e.check(secrets)
}
