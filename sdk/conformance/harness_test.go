package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/internal/testport"
	"github.com/spoolmq/spool/internal/testredis"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// sub is the one subscription of a scenario's spoold: group on topic
// "orders" (4 partitions), with the Redis ledger.
type sub struct {
	visibility  string // visibility_timeout, default 10s
	ordering    string // default key
	maxAttempts int    // default 5
	backoff     string // YAML flow map, default {base: 50ms, max: 500ms, multiplier: 2}
	limits      string // extra YAML for the limits section
}

const topic = "orders"

func (s sub) config(redisAddr, group string) string {
	if s.visibility == "" {
		s.visibility = "10s"
	}
	if s.ordering == "" {
		s.ordering = "key"
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = 5
	}
	if s.backoff == "" {
		s.backoff = "{base: 50ms, max: 500ms, multiplier: 2}"
	}
	c := fmt.Sprintf(`redis:
  addrs: [%q]
topics:
  - name: %s
    partitions: 4
subscriptions:
  - topic: %s
    group: %s
    max_attempts: %d
    visibility_timeout: %s
    ordering: %s
    backoff: %s
`, redisAddr, topic, topic, group, s.maxAttempts, s.visibility, s.ordering, s.backoff)
	if s.limits != "" {
		c += "limits:\n" + s.limits
	}
	return c
}

// env is one scenario run for one language: a fresh spoold (with the
// shared Redis, flushed) and the apps it starts.
type env struct {
	t     *testing.T
	lang  *language
	group string
	node  *node
	// client publishes and reads through the Go SDK, for the harness.
	client *spool.Client
}

func newEnv(t *testing.T, lang *language, redis *testredis.Server, s sub) *env {
	t.Helper()
	if _, err := redis.Do("FLUSHALL"); err != nil {
		t.Fatalf("flushing redis: %v", err)
	}
	group := "conformance-" + lang.name
	e := &env{t: t, lang: lang, group: group}
	e.node = startNode(t, s.config(redis.Addr(), group))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := spool.Dial(ctx, e.node.app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.client = c
	return e
}

// publish publishes msgs to the scenario's topic through the Go SDK.
func (e *env) publish(msgs ...spool.OutMessage) []spool.PublishResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := e.client.PublishBatch(ctx, topic, msgs)
	if err != nil {
		e.t.Fatalf("publish: %v", err)
	}
	return res
}

// publishFresh publishes msgs through a Go client dialled now, so that a
// publish right after a restart of spoold does not wait for the harness's
// own client to reconnect.
func (e *env) publishFresh(msgs ...spool.OutMessage) []spool.PublishResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := spool.Dial(ctx, e.node.app)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	res, err := c.PublishBatch(ctx, topic, msgs)
	if err != nil {
		e.t.Fatalf("publish: %v", err)
	}
	return res
}

// msgs builds n messages with keys prefix0..prefix(n-1), each with payload.
func msgs(n int, prefix, payload string) []spool.OutMessage {
	out := make([]spool.OutMessage, n)
	for i := range out {
		out[i] = spool.OutMessage{Key: []byte(fmt.Sprintf("%s%d", prefix, i)), Payload: []byte(payload)}
	}
	return out
}

func ids(rs []spool.PublishResult) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// spec is what the app is told to do (sdk/conformance/README.md).
type spec struct {
	Addr           string       `json:"addr"`
	Mode           string       `json:"mode"`
	Group          string       `json:"group,omitempty"`
	Topics         []string     `json:"topics,omitempty"`
	Concurrency    int          `json:"concurrency,omitempty"`
	Prefetch       int          `json:"prefetch"`
	DelayMs        int          `json:"delay_ms,omitempty"`
	DrainTimeoutMs int          `json:"drain_timeout_ms,omitempty"`
	Topic          string       `json:"topic,omitempty"`
	Messages       []outMessage `json:"messages,omitempty"`
}

type outMessage struct {
	ID           string `json:"id"`
	Key          string `json:"key"`
	Payload      string `json:"payload"`
	PayloadBytes int    `json:"payload_bytes,omitempty"`
}

// consumer is the spec of a consuming app.
func (e *env) consumer(concurrency, prefetch, delayMs int) spec {
	return spec{Addr: e.node.app, Mode: "consume", Group: e.group, Topics: []string{topic}, Concurrency: concurrency, Prefetch: prefetch, DelayMs: delayMs, DrainTimeoutMs: 10000}
}

// event is one line the app wrote.
type event struct {
	Ev           string   `json:"ev"` // start | finish | exit | published | publish_error | subscribe_error
	ID           string   `json:"id"`
	Key          string   `json:"key"`
	Payload      string   `json:"payload"`
	Attempt      int      `json:"attempt"`
	Partition    int32    `json:"partition"`
	Offset       int64    `json:"offset"`
	Token        uint64   `json:"token"`
	LastError    string   `json:"last_error"`
	Outcome      string   `json:"outcome"` // ack | retry | dead | release | cancelled | unsupported
	TimeMs       int64    `json:"time_ms"` // start and finish: the app's clock when it wrote the event
	Released     int64    `json:"released"`
	SettleErrors int64    `json:"settle_errors"`
	Type         string   `json:"type"`
	Code         string   `json:"code"`
	Reason       string   `json:"reason"`
	Message      string   `json:"message"`
	Results      []result `json:"results"`
}

type result struct {
	ID        string `json:"id"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// app is a running conformance app process.
type app struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	stderr string

	mu     sync.Mutex
	events []event
	bad    []string // lines that are not events
}

func (e *env) startApp(name string, s spec) *app {
	e.t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		e.t.Fatal(err)
	}
	a := &app{t: e.t, name: name, exited: make(chan struct{}), stderr: filepath.Join(e.t.TempDir(), name+".stderr")}
	a.cmd = e.lang.command(string(b))
	errf, err := os.Create(a.stderr)
	if err != nil {
		e.t.Fatal(err)
	}
	a.cmd.Stderr = errf
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		e.t.Fatalf("starting the %s app: %v", e.lang.name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Ev == "" {
				a.mu.Lock()
				a.bad = append(a.bad, sc.Text())
				a.mu.Unlock()
				continue
			}
			a.mu.Lock()
			a.events = append(a.events, ev)
			a.mu.Unlock()
		}
		_ = a.cmd.Wait()
		errf.Close()
		close(a.exited)
	}()
	e.t.Cleanup(func() {
		_ = a.cmd.Process.Kill()
		<-a.exited
		if e.t.Failed() {
			b, _ := os.ReadFile(a.stderr)
			e.t.Logf("%s app %s: events:\n%s\nstderr:\n%s", e.lang.name, name, a.dump(), tail(string(b), 40))
		}
	})
	return a
}

func (a *app) snapshot() []event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]event(nil), a.events...)
}

func (a *app) dump() string {
	var b strings.Builder
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.events {
		fmt.Fprintf(&b, "  %s id=%s key=%s attempt=%d outcome=%s p=%d o=%d token=%d reason=%s %s\n", ev.Ev, ev.ID, ev.Key, ev.Attempt, ev.Outcome, ev.Partition, ev.Offset, ev.Token, ev.Reason, ev.Message)
	}
	for _, l := range a.bad {
		fmt.Fprintf(&b, "  not an event: %s\n", l)
	}
	return b.String()
}

// await waits until cond holds for the events so far.
func (a *app) await(what string, timeout time.Duration, cond func([]event) bool) []event {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		evs := a.snapshot()
		if cond(evs) {
			return evs
		}
		select {
		case <-a.exited:
			if evs := a.snapshot(); cond(evs) {
				return evs
			}
			a.t.Fatalf("%s app %s exited (code %d) while waiting for: %s", a.t.Name(), a.name, a.cmd.ProcessState.ExitCode(), what)
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

func (a *app) signal(s syscall.Signal) {
	a.t.Helper()
	if err := a.cmd.Process.Signal(s); err != nil {
		a.t.Fatal(err)
	}
}

// waitExit waits for the process to end and returns its exit code (-1 when killed).
func (a *app) waitExit(timeout time.Duration) int {
	a.t.Helper()
	select {
	case <-a.exited:
		return a.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		a.t.Fatalf("app %s still running %v after being told to stop", a.name, timeout)
		return 0
	}
}

// terminate sends SIGTERM (the app drains), waits for a clean exit and
// returns everything the app wrote.
func (a *app) terminate() []event {
	a.t.Helper()
	a.signal(syscall.SIGTERM)
	if code := a.waitExit(20 * time.Second); code != 0 {
		a.t.Fatalf("app %s exited with code %d after SIGTERM", a.name, code)
	}
	return a.snapshot()
}

// run starts a publishing app and returns its one event.
func (e *env) run(name string, s spec) event {
	e.t.Helper()
	a := e.startApp(name, s)
	if code := a.waitExit(60 * time.Second); code != 0 {
		e.t.Fatalf("app %s exited with code %d", name, code)
	}
	evs := a.snapshot()
	if len(evs) != 1 {
		e.t.Fatalf("app %s: want one event, got %d:\n%s", name, len(evs), a.dump())
	}
	return evs[0]
}

// count counts the events of kind ev (and outcome, if not empty) per id.
func count(evs []event, ev, outcome string) map[string]int {
	m := map[string]int{}
	for _, x := range evs {
		if x.Ev == ev && (outcome == "" || x.Outcome == outcome) {
			m[x.ID]++
		}
	}
	return m
}

// all reports whether every id has at least one event of kind ev with outcome.
func all(ids []string, ev, outcome string) func([]event) bool {
	return func(evs []event) bool {
		c := count(evs, ev, outcome)
		for _, id := range ids {
			if c[id] == 0 {
				return false
			}
		}
		return true
	}
}

// finishOf is the finish event of id's attempt.
func finishOf(evs []event, id string, attempt int) event {
	for _, x := range evs {
		if x.Ev == "finish" && x.ID == id && x.Attempt == attempt {
			return x
		}
	}
	return event{}
}

func starts(evs []event, id string) []event {
	var out []event
	for _, x := range evs {
		if x.Ev == "start" && x.ID == id {
			out = append(out, x)
		}
	}
	return out
}

// awaitLag waits until the group has processed everything published.
func (e *env) awaitLag(timeout time.Duration) {
	e.t.Helper()
	admin := e.node.adminClient()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := admin.ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: e.group})
		cancel()
		lag := int64(-1)
		if err == nil {
			lag = 0
			for _, g := range resp.GetGroups() {
				if g.GetTopic() != topic {
					continue
				}
				for _, p := range g.GetPartitions() {
					lag += p.GetLagMessages()
				}
			}
		}
		if lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("group %s still has lag %d (err %v) after %v", e.group, lag, err, timeout)
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// node is a running spoold process.
type node struct {
	t       *testing.T
	cfgPath string
	app     string
	admin   string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// freeAddrs returns k distinct free addresses on 127.0.0.1 for spoold to
// listen on, outside the ephemeral port range: a port from listen(":0")
// may be taken by an outgoing connection before spoold binds it (see
// internal/testport).
func freeAddrs(t *testing.T, k int) []string {
	t.Helper()
	addrs, err := testport.FreeN("127.0.0.1", k)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

func startNode(t *testing.T, config string) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{t: t, cfgPath: filepath.Join(dir, "spool.yaml"), logPath: filepath.Join(dir, "spoold.log")}
	addrs := freeAddrs(t, 2)
	n.app, n.admin = addrs[0], addrs[1]
	full := fmt.Sprintf("node:\n  id: conformance\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n  drain_timeout: 5s\n", filepath.Join(dir, "data"), n.app, n.admin) + config
	if err := os.WriteFile(n.cfgPath, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			b, _ := os.ReadFile(n.logPath)
			t.Logf("spoold log:\n%s", tail(string(b), 40))
		}
	})
	n.start()
	return n
}

// start starts spoold and returns when its /readyz first answered 200
// (polled every 20 ms: spoold was ready at most that much earlier).
func (n *node) start() time.Time {
	n.t.Helper()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	n.cmd = exec.Command(bins.spoold, "--config", n.cfgPath)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); logf.Close(); close(done) }(n.cmd, n.exited)
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-n.exited:
			n.t.Fatalf("spoold exited during start-up with code %d", n.cmd.ProcessState.ExitCode())
		default:
		}
		if resp, err := http.Get("http://" + n.admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			n.t.Fatal("spoold not ready after 20s")
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// stop sends SIGTERM and waits for a graceful exit.
func (n *node) stop() {
	n.t.Helper()
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		n.t.Fatal("spoold did not exit within 20s of SIGTERM")
	}
	if code := n.cmd.ProcessState.ExitCode(); code != 0 {
		n.t.Fatalf("spoold exited with code %d after SIGTERM", code)
	}
}

func (n *node) kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.exited
}

func (n *node) adminClient() spoolv1.AdminServiceClient {
	n.t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+n.admin, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { conn.Close() })
	return spoolv1.NewAdminServiceClient(conn)
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
