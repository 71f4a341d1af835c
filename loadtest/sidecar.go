package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spoolmq/spool/internal/testport"
)

// moduleRoot finds the directory of Spool's go.mod from the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/spoolmq/spool\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("loadtest: run from inside the Spool repository (no go.mod of github.com/spoolmq/spool above the working directory)")
		}
		dir = parent
	}
}

// buildSpoold builds cmd/spoold (or the package pkg) into dir and returns the binary's path.
func buildSpoold(root, dir, pkg string) (string, error) {
	bin := filepath.Join(dir, "spoold")
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("loadtest: go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// freePort is a free TCP address on 127.0.0.1 outside the ephemeral
// port range, for a child process to listen on (see internal/testport).
func freePort() (string, error) { return testport.Free("127.0.0.1") }

// sidecarProc is one spoold process started for a run. In a cluster run it
// is one node; restart starts it again with the same config and data dir.
type sidecarProc struct {
	bin, cfgPath string
	env          []string
	dir          string
	appAddr      string
	adminAddr    string
	clusterAddr  string // "" outside a cluster
	logPath      string

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	pidv    atomic.Int64 // of the current process: samplers read it while a node restarts
	// earlierTicks is the CPU (utime+stime, clock ticks) of this node's
	// processes that have exited, from their rusage: added by the waiter
	// before it closes exited.
	earlierTicks atomic.Int64
}

func (p *sidecarProc) pid() int { return int(p.pidv.Load()) }

// cpuTicks is the CPU this node used so far, over all its processes (a
// restarted node counts the processes before the restart through their
// rusage, the current one through /proc). Call it from the goroutine that
// launches the node.
func (p *sidecarProc) cpuTicks() (int64, error) {
	if !p.alive() {
		return p.earlierTicks.Load(), nil
	}
	earlier := p.earlierTicks.Load() // without the current process: it is added when it exits
	c, err := procCPU(p.pid())
	if err == nil {
		return earlier + c, nil
	}
	select { // it exited between the two reads: its waiter adds its total
	case <-p.exited:
		return p.earlierTicks.Load(), nil
	case <-time.After(5 * time.Second):
		return 0, err
	}
}

// node is where one spoold of a run listens; join is the cluster address of
// the node it joins ("" for a single node or the bootstrapping one).
type node struct {
	index       int // 0-based; node.id is loadtest-<index+1>
	dir         string
	app, admin  string
	cluster     string
	join        string
	replication int
}

// startSidecar writes a config for sc into a fresh temp dir under base,
// starts bin with it and waits for /readyz. redisAddr, when set, is the
// ledger's Redis.
func startSidecar(ctx context.Context, bin, base string, sc *Scenario, redisAddr string) (*sidecarProc, error) {
	nd, err := newNode(base, 0, false, "", 0)
	if err != nil {
		return nil, err
	}
	return startNode(ctx, bin, sc, nd, redisAddr)
}

// newNode picks a fresh run dir under base and free ports for one node.
func newNode(base string, index int, clustered bool, join string, rf int) (node, error) {
	nd := node{index: index, join: join, replication: rf}
	var err error
	if nd.dir, err = os.MkdirTemp(base, fmt.Sprintf("run-%d-", index+1)); err != nil {
		return nd, err
	}
	k := 2
	if clustered {
		k = 3
	}
	addrs, err := testport.FreeN("127.0.0.1", k)
	if err != nil {
		return nd, err
	}
	nd.app, nd.admin = addrs[0], addrs[1]
	if clustered {
		nd.cluster = addrs[2]
	}
	return nd, nil
}

// startNode writes nd's config and starts spoold with it.
func startNode(ctx context.Context, bin string, sc *Scenario, nd node, redisAddr string) (*sidecarProc, error) {
	cfg := sidecarConfigOn(sc, nd, filepath.Join(nd.dir, "data"), redisAddr, sc.brokerStorage)
	cfgPath := filepath.Join(nd.dir, "spool.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	env := os.Environ()
	if sc.SidecarGOMEMLIMIT != "" {
		env = append(env, "GOMEMLIMIT="+sc.SidecarGOMEMLIMIT)
	}
	p := &sidecarProc{bin: bin, cfgPath: cfgPath, env: env, dir: nd.dir, appAddr: nd.app, adminAddr: nd.admin,
		clusterAddr: nd.cluster, logPath: filepath.Join(nd.dir, "spoold.log")}
	if err := p.launch(); err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx, readyWithin); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// readyWithin bounds the wait for /readyz (a joining node waits for the
// controller to admit it).
const readyWithin = 60 * time.Second

// launch starts spoold (again, after a kill: same config and data dir),
// appending to its log. It does not wait for /readyz.
func (p *sidecarProc) launch() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, "--config", p.cfgPath, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = p.env
	// Pdeathsig: spoold must never outlive the harness. It fires when the OS
	// thread that started it exits, so that thread stays locked (below).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd, p.exited, p.waitErr = cmd, make(chan struct{}), nil
	exited := p.exited
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the starting thread lives until spoold exits: Pdeathsig must not fire early
		defer runtime.UnlockOSThread()
		defer close(exited)
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("loadtest: start spoold: %w", err)
			return
		}
		p.pidv.Store(int64(cmd.Process.Pid))
		started <- nil
		p.waitErr = cmd.Wait()
		if st := cmd.ProcessState; st != nil {
			p.earlierTicks.Add(int64((st.UserTime() + st.SystemTime()) * clockTicks / time.Second))
		}
	}()
	return <-started
}

// alive reports whether the process has not exited.
func (p *sidecarProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *sidecarProc) waitReady(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	url := "http://" + p.adminAddr + "/readyz"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("loadtest: spoold exited before it was ready (%v); its log:\n%s", p.waitErr, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("loadtest: spoold not ready at %s within %s; its log:\n%s", url, within, p.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (p *sidecarProc) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.waitErr != nil {
			return fmt.Errorf("loadtest: spoold exited with %v after SIGTERM; its log:\n%s", p.waitErr, p.logTail())
		}
		return nil
	case <-time.After(grace):
		p.kill()
		return fmt.Errorf("loadtest: spoold did not stop within %s of SIGTERM; killed it", grace)
	}
}

func (p *sidecarProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (p *sidecarProc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// sidecarConfig is the spoold config file of a run: one topic "load" and
// one stream subscription "load-group" (none with no_subscription),
// everything on 127.0.0.1; with redisAddr, the idempotency ledger in that
// Redis (subscription defaults: dedupe_ttl 168h, redis_unavailable pause);
// in a cluster run (nd.cluster set), the cluster section: the first node
// bootstraps, the others join it.
func sidecarConfig(sc *Scenario, nd node, dataDir, redisAddr string) string {
	return sidecarConfigOn(sc, nd, dataDir, redisAddr, "")
}

// sidecarConfigOn is sidecarConfig on a broker backend when storage (the
// broker's storage section) is set.
func sidecarConfigOn(sc *Scenario, nd node, dataDir, redisAddr, storage string) string {
	var b strings.Builder
	id := "loadtest"
	if nd.cluster != "" {
		id = fmt.Sprintf("loadtest-%d", nd.index+1)
	}
	fmt.Fprintf(&b, "node:\n  id: %s\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n  drain_timeout: 5s\n", id, dataDir, nd.app, nd.admin)
	if storage != "" {
		b.WriteString(storage)
	} else {
		fmt.Fprintf(&b, "storage:\n  fsync: %s\n", sc.Fsync)
		if sc.FsyncInterval != "" {
			fmt.Fprintf(&b, "  fsync_interval: %s\n", sc.FsyncInterval)
		}
		if sc.StorageSync != "" {
			fmt.Fprintf(&b, "  sync: %s\n", sc.StorageSync)
		}
	}
	fmt.Fprintf(&b, "limits:\n  max_batch_messages: 10000\n")
	fmt.Fprintf(&b, "topics:\n  - name: %s\n    partitions: %d\n    retention: 0s\n", topicName, sc.Partitions)
	if !sc.NoSubscription {
		fmt.Fprintf(&b, "subscriptions:\n  - topic: %s\n    group: %s\n    delivery: stream\n    ordering: %s\n    max_in_flight: %d\n",
			topicName, groupName, sc.Ordering, sc.SubMaxInFlight)
		if sc.SubWindowMessages > 0 {
			fmt.Fprintf(&b, "    window_messages: %d\n", sc.SubWindowMessages)
		}
	}
	if redisAddr != "" {
		fmt.Fprintf(&b, "redis:\n  addrs: [%q]\n", redisAddr)
	}
	b.WriteString(sc.SidecarYAML)
	if nd.cluster != "" {
		// Load runs are on one host's loopback, where nothing else reaches
		// the peer port: no join secret (it is checked at joins only).
		fmt.Fprintf(&b, "cluster:\n  listen: %q\n  replication_factor: %d\n  insecure_no_join_secret: true\n", nd.cluster, nd.replication)
		if f := sc.clusterTLS; f != nil {
			fmt.Fprintf(&b, "  tls:\n    cert_file: %s\n    key_file: %s\n    ca_file: %s\n", f.Cert, f.Key, f.CA)
		} else {
			b.WriteString("  insecure: true\n")
		}
		if nd.join != "" {
			fmt.Fprintf(&b, "  join: [%q]\n", nd.join)
		}
	}
	return b.String()
}

const (
	topicName = "load"
	groupName = "load-group"
)
