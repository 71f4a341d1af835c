// Package testnats starts a real nats-server with JetStream for a test, on
// a free loopback port with a temporary store directory, and kills it
// when the test ends. It can stop and start the server again (same port,
// same store) for broker-restart tests.
//
// The binary is built from the nats-server module that go.mod pins (a
// tool dependency), once, into the user's cache directory
// (scripts/ensure-deps.sh builds it there ahead of `make test`). A test
// skips, saying why, only when it cannot be built (no Go toolchain or no
// module proxy). CLI installs the nats command (`nats bench`) the same
// way, for the loadtest's --broker-tool.
package testnats

import (
	"bytes"
	"fmt"
	"net"
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

// Module is the nats-server module built for the tests.
const Module = "github.com/nats-io/nats-server/v2"

// startTimeout bounds how long a server may take to accept connections.
const startTimeout = 15 * time.Second

// Binary returns the path of nats-server built from the version go.mod
// pins, building it into the cache directory the first time.
func Binary() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", Module).Output()
	if err != nil {
		return "", fmt.Errorf("testnats: go list -m %s: %w (is go on PATH, and go.mod's tool dependency in place?)", Module, err)
	}
	version := strings.TrimSpace(string(out))
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("testnats: %w", err)
	}
	bin := filepath.Join(cache, "spool", "nats-server-"+version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("testnats: %w", err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, Module)
	var stderr bytes.Buffer
	build.Stderr = &stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("testnats: go build %s@%s: %w: %s", Module, version, err, stderr.String())
	}
	return bin, os.Rename(tmp, bin) // atomic: a concurrent build of another package renames the same bytes
}

// CLIModule and CLIVersion are the nats command whose `nats bench` the
// loadtest's --broker-tool runs next to Spool's JetStream scenarios. The
// version is pinned here, not in go.mod: the command is a benchmark
// tool, not a dependency of Spool or its tests.
const (
	CLIModule  = "github.com/nats-io/natscli/nats"
	CLIVersion = "v0.5.0"
)

// CLI returns the path of the nats command at CLIVersion, installing it
// into the cache directory the first time (go install; a minute or two).
func CLI() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("testnats: %w", err)
	}
	bin := filepath.Join(cache, "spool", "nats-cli-"+CLIVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("testnats: %w", err)
	}
	gobin, err := os.MkdirTemp(filepath.Dir(bin), "nats-cli-")
	if err != nil {
		return "", fmt.Errorf("testnats: %w", err)
	}
	defer os.RemoveAll(gobin)
	install := exec.Command("go", "install", CLIModule+"@"+CLIVersion)
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	var stderr bytes.Buffer
	install.Stderr = &stderr
	if err := install.Run(); err != nil {
		return "", fmt.Errorf("testnats: go install %s@%s: %w: %s (is go on PATH, and the module proxy reachable?)", CLIModule, CLIVersion, err, tail(stderr.String(), 20))
	}
	return bin, os.Rename(filepath.Join(gobin, "nats"), bin) // atomic: a concurrent install renames the same bytes
}

// Server is one nats-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	conf string // a configuration file, if any (StartConfig)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

// Start builds (once) and starts a nats-server with JetStream, skipping
// the test if the binary cannot be had.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartConfig(t, "")
}

// StartConfig is Start with a configuration file holding conf (for
// example an authorization block) besides the command line's options.
func StartConfig(t testing.TB, conf string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skipf("no nats-server for the JetStream tests: %v", err)
	}
	s := &Server{t: t, bin: bin, port: freePort(t), dir: t.TempDir()}
	s.log = filepath.Join(s.dir, "nats-server.log")
	if conf != "" {
		s.conf = filepath.Join(s.dir, "nats-server.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.Start()
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(s.log)
			t.Logf("nats-server log (tail):\n%s", tail(string(b), 30))
		}
	})
	return s
}

// URL is the server's client URL.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server (again) on its port and store directory and
// waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", filepath.Join(s.dir, "store")}
	if s.conf != "" {
		args = append(args, "-c", s.conf)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	setDeathSignal(cmd) // dies with the test binary
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("testnats: start %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }() // owned: ends with the process
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.log)
			s.t.Fatalf("testnats: nats-server exited during start-up:\n%s", tail(string(b), 20))
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("testnats: nats-server not accepting connections on port %d after %v", s.port, startTimeout)
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// Stop shuts the server down gracefully (SIGTERM: JetStream flushes its
// store) and waits for it to exit.
func (s *Server) Stop() { s.signalAndWait(syscall.SIGTERM) }

// Kill kills the server at once (SIGKILL).
func (s *Server) Kill() { s.signalAndWait(syscall.SIGKILL) }

func (s *Server) signalAndWait(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// freePort is a free port outside the ephemeral port range: the server
// keeps it across restarts, and a port from listen(":0") may be taken by
// an outgoing connection meanwhile (see internal/testport).
func freePort(t testing.TB) int {
	t.Helper()
	ports, err := testport.Ports("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
