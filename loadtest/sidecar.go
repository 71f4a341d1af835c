package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
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

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// sidecarProc is one spoold process started for a run.
type sidecarProc struct {
	cmd       *exec.Cmd
	dir       string
	appAddr   string
	adminAddr string
	logPath   string
	exited    chan struct{}
	waitErr   error
}

func (p *sidecarProc) pid() int { return p.cmd.Process.Pid }

// startSidecar writes a config for sc into a fresh temp dir under base,
// starts bin with it and waits for /readyz. redisAddr, when set, is the
// ledger's Redis.
func startSidecar(ctx context.Context, bin, base string, sc *Scenario, redisAddr string) (*sidecarProc, error) {
	dir, err := os.MkdirTemp(base, "run-")
	if err != nil {
		return nil, err
	}
	app, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := sidecarConfig(sc, filepath.Join(dir, "data"), app, admin, redisAddr)
	cfgPath := filepath.Join(dir, "spool.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "spoold.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config", cfgPath, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	if sc.SidecarGOMEMLIMIT != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+sc.SidecarGOMEMLIMIT)
	}
	// Pdeathsig: spoold must never outlive the harness. It fires when the OS
	// thread that started it exits, so that thread stays locked (see startSidecar).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &sidecarProc{cmd: cmd, dir: dir, appAddr: app, adminAddr: admin, logPath: logPath, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the starting thread lives until spoold exits: Pdeathsig must not fire early
		defer runtime.UnlockOSThread()
		defer close(p.exited)
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("loadtest: start spoold: %w", err)
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx, 20*time.Second); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
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
// one stream subscription "load-group", everything on 127.0.0.1; with
// redisAddr, the idempotency ledger in that Redis (subscription defaults:
// dedupe_ttl 168h, redis_unavailable pause).
func sidecarConfig(sc *Scenario, dataDir, app, admin, redisAddr string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  id: loadtest\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n  drain_timeout: 5s\n", dataDir, app, admin)
	fmt.Fprintf(&b, "storage:\n  fsync: %s\n", sc.Fsync)
	if sc.FsyncInterval != "" {
		fmt.Fprintf(&b, "  fsync_interval: %s\n", sc.FsyncInterval)
	}
	fmt.Fprintf(&b, "limits:\n  max_batch_messages: 10000\n")
	fmt.Fprintf(&b, "topics:\n  - name: %s\n    partitions: %d\n    retention: 0s\n", topicName, sc.Partitions)
	fmt.Fprintf(&b, "subscriptions:\n  - topic: %s\n    group: %s\n    delivery: stream\n    ordering: %s\n    max_in_flight: %d\n",
		topicName, groupName, sc.Ordering, sc.SubMaxInFlight)
	if sc.SubWindowMessages > 0 {
		fmt.Fprintf(&b, "    window_messages: %d\n", sc.SubWindowMessages)
	}
	if redisAddr != "" {
		fmt.Fprintf(&b, "redis:\n  addrs: [%q]\n", redisAddr)
	}
	return b.String()
}

const (
	topicName = "load"
	groupName = "load-group"
)
