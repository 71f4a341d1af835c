// Package testredis starts a real redis-server for a test, on a free
// loopback port, with persistence off, and kills it when the test ends. It
// can kill, restart (same port) and freeze the server for outage and
// slow-Redis tests. Tests never skip for lack of Redis: `make test`
// installs it (scripts/ensure-deps.sh).
//
// It imports no Redis client: readiness is a raw PING.
package testredis

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string

	mu     sync.Mutex
	proc   *os.Process   // nil when not running
	exited chan struct{} // closed when proc has been reaped
	out    *syncBuffer
	frozen bool
	thaw   *time.Timer
}

// Binary finds redis-server on PATH or in /usr/bin.
func Binary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	const fallback = "/usr/bin/redis-server"
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	return "", errors.New("redis-server not found on PATH or in /usr/bin")
}

// Start starts a redis-server on a free loopback port and waits until it
// answers PING. It is killed in t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("%v: install redis-server (make test does: scripts/ensure-deps.sh)", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(s.stop)
	// A free port found by listening on :0 can be taken again before
	// redis-server binds it; try a few ports.
	var lastErr error
	for range 5 {
		if s.port, err = freePort(); err != nil {
			t.Fatalf("testredis: free port: %v", err)
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("testredis: %v", lastErr)
	return nil
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Kill kills the server (SIGKILL) and waits for it to exit. Its data is
// lost (persistence is off).
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Restart starts a killed server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	running := s.proc != nil
	s.mu.Unlock()
	if running {
		s.t.Fatalf("testredis: Restart of a running server (Kill it first)")
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("testredis: restart on port %d: %v", s.port, err)
	}
}

// Freeze stops the process (SIGSTOP): connections stay open, nothing is
// answered, as with a Redis stuck in a long command or a fork.
func (s *Server) Freeze() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.t.Fatalf("testredis: Freeze of a stopped server")
	}
	if err := s.proc.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("testredis: SIGSTOP: %v", err)
	}
	s.frozen = true
}

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.thawLocked()
}

// Pause freezes the server for d, then thaws it (from a timer).
func (s *Server) Pause(d time.Duration) {
	s.t.Helper()
	s.Freeze()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.thaw = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.thawLocked()
	})
}

func (s *Server) thawLocked() {
	if s.thaw != nil {
		s.thaw.Stop()
		s.thaw = nil
	}
	if s.proc != nil && s.frozen {
		_ = s.proc.Signal(syscall.SIGCONT)
	}
	s.frozen = false
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.thaw != nil {
		s.thaw.Stop()
		s.thaw = nil
	}
	if s.proc == nil {
		return
	}
	_ = s.proc.Kill() // SIGKILL ends a stopped process too
	<-s.exited
	s.proc = nil
	s.frozen = false
}

func (s *Server) start() error {
	out := &syncBuffer{}
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "no",
	)
	cmd.Stdout = out
	cmd.Stderr = out
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	// Reaps the process whenever it ends (killed, or failed to start);
	// killLocked waits for it, so no goroutine outlives the test.
	go func() { waitErr = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited on port %d (%v): %s", s.port, waitErr, out.String())
		default:
		}
		if ping(s.Addr()) == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", s.port, startTimeout, out.String())
		}
		time.Sleep(10 * time.Millisecond) // sleep-ok: polling a child process's readiness
	}
	s.mu.Lock()
	s.proc, s.exited, s.out = cmd.Process, exited, out
	s.mu.Unlock()
	return nil
}

// Log is what the server printed so far (for failure messages).
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}

// ping sends a raw PING and expects +PONG.
func ping(addr string) error {
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer collects the server's output; written by exec's copier.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
