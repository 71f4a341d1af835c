package installtest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testport"
	"github.com/spoolmq/spool/internal/testredis"
)

// repo is the repository's root (this package is sdk/installtest).
var repo = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}()

// version is the one version of every artifact (VERSION at the root).
func version(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// selected skips t unless SPOOL_INSTALL_LANGS names lang.
func selected(t *testing.T, lang string) {
	t.Helper()
	if !slices.Contains(strings.Split(os.Getenv("SPOOL_INSTALL_LANGS"), ","), lang) {
		t.Skipf("SPOOL_INSTALL_LANGS does not name %s: `make test-sdk-%s` runs this test", lang, lang)
	}
}

// scratchDir is a fresh directory outside the repository.
func scratchDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if rel, err := filepath.Rel(repo, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("scratch directory %s is inside the repository %s: set TMPDIR outside it", dir, repo)
	}
	return dir
}

// run runs a command in dir with extra environment, failing t with its
// output when it fails; it returns the standard output.
func run(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	t.Logf("%s %s: %.1f s", filepath.Base(name), strings.Join(args, " "), time.Since(began).Seconds())
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), dir, err, tail(stdout.String(), 40), tail(stderr.String(), 40))
	}
	return stdout.String()
}

// process is a command started in the background; its output is kept.
type process struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	exited chan struct{}
}

func start(t *testing.T, dir string, env []string, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), exited: make(chan struct{})}
	p.cmd.Dir, p.cmd.Env = dir, append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// wait waits for the process to exit by itself and returns its output;
// it fails t if that takes longer than timeout or the exit code is not 0.
func (p *process) wait(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("%s did not exit within %s; output:\n%s", p.cmd.Path, timeout, tail(p.out.String(), 40))
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited with code %d; output:\n%s", p.cmd.Path, code, tail(p.out.String(), 40))
	}
	return p.out.String()
}

// spoold is a sidecar built from this repository, with topic "orders" (two
// partitions) and group "workers" on it, and the Redis ledger on redis.
type spoold struct {
	app, admin string
}

func startSpoold(t *testing.T) *spoold {
	t.Helper()
	redis := testredis.Start(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "spoold")
	run(t, 5*time.Minute, repo, nil, "go", "build", "-o", bin, "./cmd/spoold")
	addrs, err := testport.FreeN("127.0.0.1", 2)
	if err != nil {
		t.Fatal(err)
	}
	s := &spoold{app: addrs[0], admin: addrs[1]}
	config := fmt.Sprintf(`node:
  id: install
  data_dir: %s
  app_listen: [%q]
  admin_listen: %q
  drain_timeout: 5s
redis:
  addrs: [%q]
topics:
  - name: orders
    partitions: 2
subscriptions:
  - topic: orders
    group: workers
    max_attempts: 3
    visibility_timeout: 10s
`, filepath.Join(dir, "data"), s.app, s.admin, redis.Addr())
	cfg := filepath.Join(dir, "spool.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, nil, bin, "--config", cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("spoold's output:\n%s", tail(p.out.String(), 40))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.exited:
			t.Fatalf("spoold exited during start-up:\n%s", tail(p.out.String(), 40))
		default:
		}
		if resp, err := http.Get("http://" + s.admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("spoold not ready after 30s:\n%s", tail(p.out.String(), 40))
		}
		time.Sleep(20 * time.Millisecond) // sleep-ok: polling interval of a condition wait
	}
}

// orderIDs are the ids the producers publish and the workers must handle.
func orderIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("order-%d", i+1)
	}
	return ids
}

// checkHandled checks that out has a line "handled <id>" for each id, and
// no line "handled" for another.
func checkHandled(t *testing.T, out string, ids []string) {
	t.Helper()
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "handled" {
			got = append(got, f[1])
		}
	}
	slices.Sort(got)
	got = slices.Compact(got)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		t.Fatalf("the worker handled %v, want %v; its output:\n%s", got, want, tail(out, 40))
	}
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
