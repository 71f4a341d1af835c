package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/internal/testport"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// bins holds the binaries built once by TestMain.
var bins struct{ spoold, testapp string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spool-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.spoold = filepath.Join(dir, "spoold")
	bins.testapp = filepath.Join(dir, "testapp")
	for out, pkg := range map[string]string{bins.spoold: "github.com/spoolmq/spool/cmd/spoold", bins.testapp: "github.com/spoolmq/spool/sidecar/e2e/testapp"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", pkg, ":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddrs returns k distinct free addresses on 127.0.0.1, outside the
// ephemeral port range, for spoold processes to listen on (see
// internal/testport: a port from listen(":0") may be taken by an outgoing
// connection before spoold binds it).
func freeAddrs(t *testing.T, k int) []string {
	t.Helper()
	addrs, err := testport.FreeN("127.0.0.1", k)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// node is a running spoold process.
type node struct {
	t       *testing.T
	dataDir string
	cfgPath string
	app     string
	admin   string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
	peer    string // cluster.listen, for cluster nodes
	gone    bool   // left the cluster for good: not a join address any more
	bin     string // the spoold binary to run ("": this tree's, bins.spoold)
}

// startNode writes config (YAML without the node section) and starts spoold
// on a fresh data dir, waiting for /readyz.
func startNode(t *testing.T, config string) *node {
	t.Helper()
	return startNodeWith(t, "", config)
}

// startNodeWith is startNode with extra settings for the node section
// (indented YAML lines, e.g. "  commit_interval: 1m\n").
func startNodeWith(t *testing.T, nodeExtra, config string) *node {
	t.Helper()
	return startNamedNode(t, "e2e", nodeExtra, config)
}

// startNamedNode is startNodeWith for node id id (sidecars sharing a group
// through a broker are told apart by their node ids).
func startNamedNode(t *testing.T, id, nodeExtra, config string) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{t: t, dataDir: filepath.Join(dir, "data"), cfgPath: filepath.Join(dir, "spool.yaml"), logPath: filepath.Join(dir, "spoold.log")}
	addrs := freeAddrs(t, 2)
	n.app, n.admin = addrs[0], addrs[1]
	full := fmt.Sprintf("node:\n  id: %s\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n  drain_timeout: 5s\n", id, n.dataDir, n.app, n.admin) + nodeExtra + config
	if err := os.WriteFile(n.cfgPath, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			b, _ := os.ReadFile(n.logPath)
			t.Logf("spoold log:\n%s", tail(string(b), 60))
		}
	})
	n.start()
	return n
}

func (n *node) start() {
	n.t.Helper()
	n.launch()
	n.awaitStarted(20 * time.Second)
}

// launch starts spoold without waiting for it.
func (n *node) launch() {
	n.t.Helper()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	n.cmd = exec.Command(cmp.Or(n.bin, bins.spoold), "--config", n.cfgPath)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); logf.Close(); close(done) }(n.cmd, n.exited)
}

// awaitStarted waits up to d for /startupz.
func (n *node) awaitStarted(d time.Duration) {
	n.t.Helper()
	eventually(n.t, d, "spoold ready", func() bool {
		select {
		case <-n.exited:
			n.t.Fatalf("spoold exited during start-up with code %d", n.cmd.ProcessState.ExitCode())
		default:
		}
		// /startupz, not /readyz: with node.ready_requires_app the node is
		// ready only once its app consumes.
		resp, err := http.Get("http://" + n.admin + "/startupz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// stop sends SIGTERM and waits for a graceful exit.
func (n *node) stop() {
	n.t.Helper()
	n.stopWithin(20 * time.Second)
}

// stopWithin sends SIGTERM and waits up to d for a graceful exit.
// signal sends sig to the spoold process.
func (n *node) signal(sig os.Signal) {
	n.t.Helper()
	if err := n.cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("signal %v to spoold: %v", sig, err)
	}
}

func (n *node) stopWithin(d time.Duration) {
	n.t.Helper()
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(d):
		n.t.Fatalf("spoold did not exit within %v of SIGTERM", d)
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

func (n *node) restart() { n.stop(); n.start() }

// rssKiB reads a VmHWM/VmRSS-style field of the spoold process.
func (n *node) status(field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		n.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	n.t.Fatalf("no %s in /proc status", field)
	return 0
}

func (n *node) client(ctx context.Context) *spool.Client {
	n.t.Helper()
	c, err := spool.Dial(ctx, n.app)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { c.Close() })
	return c
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

// app is a running testapp process.
type app struct {
	t      *testing.T
	cmd    *exec.Cmd
	exited chan struct{}
	record string
}

func startApp(t *testing.T, n *node, record string, args ...string) *app {
	t.Helper()
	a := &app{t: t, record: record, exited: make(chan struct{})}
	a.cmd = exec.Command(bins.testapp, append([]string{"--addr", n.app, "--record", record}, args...)...)
	logPath := record + ".log"
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = a.cmd.Wait(); logf.Close(); close(a.exited) }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		_ = a.cmd.Process.Kill()
		<-a.exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("testapp log:\n%s", tail(string(b), 30))
		}
	})
	return a
}

func (a *app) signal(s syscall.Signal) {
	if err := a.cmd.Process.Signal(s); err != nil {
		a.t.Fatal(err)
	}
}

// stopGracefully sends SIGTERM (the SDK drains) and waits.
func (a *app) stopGracefully() {
	a.t.Helper()
	a.signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		a.t.Fatal("testapp did not exit within 20s of SIGTERM")
	}
}

func (a *app) waitExit(timeout time.Duration) int {
	a.t.Helper()
	select {
	case <-a.exited:
		return a.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		a.t.Fatalf("testapp still running after %v", timeout)
		return -1
	}
}

// event is one line of a record file.
type event struct {
	kind      string // start | done
	id, key   string
	seq       int
	attempt   int
	token     uint64
	partition int32     // start and done lines only
	offset    int64     // start and done lines only
	at        time.Time // start and done lines only: when the app wrote it
}

func readEvents(t *testing.T, paths ...string) []event {
	t.Helper()
	var out []event
	for _, p := range paths {
		f, err := os.Open(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if e, ok := parseEvent(sc.Text()); ok {
				out = append(out, e)
			}
		}
		f.Close()
	}
	return out
}

// parseEvent parses one record line; false for a line cut by a crash.
func parseEvent(line string) (event, bool) {
	fs := strings.Fields(line)
	if len(fs) < 5 {
		return event{}, false
	}
	e := event{kind: fs[0], id: fs[1], key: fs[2]}
	e.seq, _ = strconv.Atoi(fs[3])
	e.attempt, _ = strconv.Atoi(fs[4])
	if len(fs) > 5 {
		e.token, _ = strconv.ParseUint(fs[5], 10, 64)
	}
	if len(fs) > 8 {
		p, _ := strconv.ParseInt(fs[6], 10, 32)
		e.partition = int32(p)
		e.offset, _ = strconv.ParseInt(fs[7], 10, 64)
		ns, _ := strconv.ParseInt(fs[8], 10, 64)
		e.at = time.Unix(0, ns)
	}
	return e, true
}

// recordTail reads a record file as it grows: each call to more returns
// the lines completed since the last call.
type recordTail struct {
	path string
	off  int64
}

func (r *recordTail) more(t *testing.T) []event {
	t.Helper()
	f, err := os.Open(r.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, r.off, 1<<40))
	if err != nil {
		t.Fatal(err)
	}
	end := bytes.LastIndexByte(b, '\n') + 1 // a line still being written waits for the next call
	r.off += int64(end)
	var out []event
	for _, line := range strings.Split(string(b[:end]), "\n") {
		if e, ok := parseEvent(line); ok {
			out = append(out, e)
		}
	}
	return out
}

// doneCounts counts completions (acks) per message id.
func doneCounts(events []event) map[string]int {
	m := map[string]int{}
	for _, e := range events {
		if e.kind == "done" {
			m[e.id]++
		}
	}
	return m
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// publishSeq publishes count messages with payloads from..from+count-1 and
// keys from keyOf, in batches, returning the ids in seq order.
func publishSeq(t *testing.T, c *spool.Client, topic string, from, count int, keyOf func(seq int) string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids := make([]string, 0, count)
	const batch = 500
	for i := 0; i < count; i += batch {
		var msgs []spool.OutMessage
		for s := from + i; s < from+min(i+batch, count); s++ {
			msgs = append(msgs, spool.OutMessage{Key: []byte(keyOf(s)), Payload: []byte(strconv.Itoa(s))})
		}
		res, err := c.PublishBatch(ctx, topic, msgs)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
