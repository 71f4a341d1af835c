package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// redisProc is the redis-server a scenario with `redis: true` runs spoold's
// idempotency ledger against: started on a free 127.0.0.1 port with
// persistence off, stopped at the end of the run.
//
// The start and PING logic is a small copy of internal/testredis, which
// cannot be used here: it needs a *testing.T.
type redisProc struct {
	cmd     *exec.Cmd
	addr    string
	logPath string
	exited  chan struct{}
	waitErr error
}

func (r *redisProc) pid() int { return r.cmd.Process.Pid }

// redisBinary finds redis-server on PATH or in /usr/bin.
func redisBinary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	const fallback = "/usr/bin/redis-server"
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	return "", errors.New("loadtest: the scenario needs redis-server, found neither on PATH nor in /usr/bin: install redis-server (scripts/ensure-deps.sh does)")
}

// startRedis starts redis-server in a fresh dir under base and waits until
// it answers PING. A free port found by listening on :0 can be taken again
// before redis-server binds it, so a few ports are tried.
func startRedis(ctx context.Context, base string) (*redisProc, error) {
	bin, err := redisBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		addr, err := freePort()
		if err != nil {
			return nil, err
		}
		r, err := startRedisOn(ctx, bin, dir, addr)
		if err == nil {
			return r, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startRedisOn(ctx context.Context, bin, dir, addr string) (*redisProc, error) {
	_, port, _ := net.SplitHostPort(addr)
	logPath := filepath.Join(dir, "redis-"+port+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--port", port,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--protected-mode", "no",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// As for spoold: Pdeathsig fires when the starting OS thread exits, so
	// that thread stays locked until redis-server exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &redisProc{cmd: cmd, addr: addr, logPath: logPath, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(r.exited)
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("loadtest: start %s: %w", bin, err)
			return
		}
		started <- nil
		r.waitErr = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if redisPing(addr) == nil {
			return r, nil
		}
		select {
		case <-r.exited:
			return nil, fmt.Errorf("loadtest: redis-server exited on %s (%v): %s", addr, r.waitErr, tail(logPath))
		case <-ctx.Done():
			r.kill()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.kill()
			return nil, fmt.Errorf("loadtest: redis-server on %s did not answer PING within 10s: %s", addr, tail(logPath))
		}
	}
}

// redisPing sends a raw PING and expects +PONG (no Redis client needed).
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// stop sends SIGTERM (persistence is off, so it exits at once) and kills
// after grace.
func (r *redisProc) stop(grace time.Duration) error {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		return nil
	case <-time.After(grace):
		r.kill()
		return fmt.Errorf("loadtest: redis-server did not stop within %s of SIGTERM; killed it", grace)
	}
}

func (r *redisProc) kill() {
	_ = r.cmd.Process.Kill()
	<-r.exited
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// redisCommandStats reads INFO commandstats: the calls and microseconds
// of the commands clients sent (scripts counted once, with the commands
// they run inside), and how many commands ran inside scripts.
func redisCommandStats(addr string) (calls, usec, inner int64, err error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("INFO commandstats\r\n")); err != nil {
		return 0, 0, 0, err
	}
	rd := bufio.NewReader(c)
	head, err := rd.ReadString('\n')
	if err != nil {
		return 0, 0, 0, err
	}
	var size int
	if _, err := fmt.Sscanf(head, "$%d\r\n", &size); err != nil {
		return 0, 0, 0, fmt.Errorf("INFO answered %q", head)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(rd, body); err != nil {
		return 0, 0, 0, err
	}
	// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...
	for _, line := range strings.Split(string(body), "\r\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		name, stats, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		// The ledger's commands run inside its scripts: counted here as
		// well as in the script's own time.
		script := name == "evalsha" || name == "eval"
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch {
			case k == "calls" && script:
				calls += n
			case k == "usec" && script:
				usec += n
			case k == "calls" && name != "info":
				inner += n
			}
		}
	}
	return calls, usec, inner, nil
}
