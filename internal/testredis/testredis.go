// Package testredis starts a real redis-server for a test, on a free
// loopback port, with persistence off, and kills it when the test ends. It
// can kill, restart (same port) and freeze the server for outage and
// slow-Redis tests. Tests never skip for lack of Redis: `make test`
// installs it (scripts/ensure-deps.sh).
//
// Besides a plain server (Start) it starts a server with ACL users or TLS
// (StartWith), a Redis Cluster of masters (StartCluster, cluster.go) and a
// master watched by a sentinel (StartSentinel, sentinel.go).
//
// It imports no Redis client: readiness is a raw PING, and the few commands
// the harness needs go through a minimal RESP exchange (Server.Do).
package testredis

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testport"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Options configure a server started with StartWith. The zero value is
// what Start gives.
type Options struct {
	// Users are ACL users, one rule each in ACL SETUSER syntax, e.g.
	// "spool on >secret ~spool:l:* +evalsha +eval +get +set". They are
	// written as `user` lines of the server's config file. The default user
	// stays on without a password (the harness's PING uses it).
	Users []string
	// TLS: the server listens on a TLS port only (plaintext port 0), with a
	// certificate signed by a CA generated for the test (in the server's
	// temporary directory). Server.TLSConfig is a client config trusting it.
	TLS bool
	// TLSClientAuth (with TLS) makes the server require a client
	// certificate signed by the test CA (--tls-auth-clients yes); the
	// files are named by Server.TLSFiles.
	TLSClientAuth bool
	// Args are extra redis-server arguments, appended last.
	Args []string

	cluster   bool     // cluster-enabled, with the bus port (port+10000) free too
	sentinel  bool     // run as a sentinel (--sentinel)
	confLines []string // extra config file lines (sentinel monitor ...)
}

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	opts Options
	tls  *tls.Config // client config when opts.TLS; nil otherwise

	mu     sync.Mutex
	proc   *os.Process   // nil when not running
	exited chan struct{} // closed when proc has been reaped
	out    *syncBuffer
	frozen bool
	thaw   *time.Timer
}

// Binary finds redis-server on PATH or in /usr/bin.
func Binary() (string, error) { return lookBinary("redis-server") }

func lookBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	fallback := "/usr/bin/" + name
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	return "", fmt.Errorf("%s not found on PATH or in /usr/bin", name)
}

// mustBinary finds a binary or fails the test saying how to install it.
func mustBinary(t testing.TB, name string) string {
	t.Helper()
	bin, err := lookBinary(name)
	if err != nil {
		t.Fatalf("testredis: %v: install it (make test does: scripts/ensure-deps.sh installs redis-server and redis-tools)", err)
	}
	return bin
}

// Start starts a redis-server on a free loopback port and waits until it
// answers PING. It is killed in t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith starts a redis-server configured by opts on a free loopback
// port and waits until it answers PING (over TLS with opts.TLS). It is
// killed in t.Cleanup.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{t: t, bin: mustBinary(t, "redis-server"), dir: t.TempDir(), opts: opts}
	if opts.TLS {
		var err error
		if s.tls, err = writeCerts(s.dir); err != nil {
			t.Fatalf("testredis: TLS certificates: %v", err)
		}
		if opts.TLSClientAuth {
			_, cert, key := s.TLSFiles()
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				t.Fatalf("testredis: client certificate: %v", err)
			}
			s.tls.Certificates = []tls.Certificate{pair}
		}
	}
	t.Cleanup(s.stop)
	// Another process may pick the same free port in the same instant;
	// try a few ports.
	var lastErr error
	for range 5 {
		var err error
		if opts.cluster {
			s.port, err = freeClusterPort()
		} else {
			s.port, err = freePort()
		}
		if err != nil {
			t.Fatalf("testredis: free port: %v", err)
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("testredis: %v", lastErr)
	return nil
}

// Addr is host:port of the server (its TLS port when started with TLS).
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// TLSConfig is a client config that trusts the server's certificate (a
// fresh copy each call); nil for a plaintext server.
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}

// TLSFiles names the PEM files of a TLS server's test CA and of a client
// certificate and key it signed (empty without TLS).
func (s *Server) TLSFiles() (ca, cert, key string) {
	if s.tls == nil {
		return "", "", ""
	}
	return filepath.Join(s.dir, caFile), filepath.Join(s.dir, clientCertFile), filepath.Join(s.dir, clientKeyFile)
}

// Do sends one command over a fresh connection (TLS if the server uses it)
// as the default user and returns the reply: string (simple or bulk),
// int64, nil, []any, or an error for an error reply.
func (s *Server) Do(args ...string) (any, error) { return do(s.Addr(), s.tls, args...) }

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

// args writes the config file (rewritten at each start: a sentinel rewrites
// its own) and returns redis-server's arguments.
func (s *Server) args() ([]string, error) {
	var conf strings.Builder
	for _, u := range s.opts.Users {
		fmt.Fprintf(&conf, "user %s\n", u)
	}
	for _, l := range s.opts.confLines {
		conf.WriteString(l + "\n")
	}
	confPath := filepath.Join(s.dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o600); err != nil {
		return nil, err
	}
	port := strconv.Itoa(s.port)
	args := []string{confPath}
	if s.opts.TLS {
		args = append(args,
			"--port", "0",
			"--tls-port", port,
			"--tls-cert-file", filepath.Join(s.dir, certFile),
			"--tls-key-file", filepath.Join(s.dir, keyFile),
			"--tls-ca-cert-file", filepath.Join(s.dir, caFile),
			"--tls-auth-clients", map[bool]string{true: "yes", false: "no"}[s.opts.TLSClientAuth],
		)
	} else {
		args = append(args, "--port", port)
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "no",
	)
	if s.opts.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
		)
	}
	if s.opts.sentinel {
		args = append(args, "--sentinel")
	}
	return append(args, s.opts.Args...), nil
}

func (s *Server) start() error {
	args, err := s.args()
	if err != nil {
		return fmt.Errorf("config for port %d: %w", s.port, err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(s.bin, args...)
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
		if pingTLS(s.Addr(), s.tls) == nil {
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

// ping sends a raw PING and expects PONG.
func ping(addr string) error { return pingTLS(addr, nil) }

func pingTLS(addr string, tc *tls.Config) error {
	v, err := do(addr, tc, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING answered %q", v)
	}
	return nil
}

// freePort is a free port outside the ephemeral port range: the server
// keeps it across restarts, and a port from listen(":0") may be taken by
// an outgoing connection meanwhile (see internal/testport).
func freePort() (int, error) {
	ports, err := testport.Ports("127.0.0.1", 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freeClusterPort is a free port whose cluster bus port (port+10000) is
// free too, both outside the ephemeral port range.
func freeClusterPort() (int, error) { return testport.FreeSpaced("127.0.0.1", 10000) }

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
