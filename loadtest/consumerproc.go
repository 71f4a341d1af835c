package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A scenario's consumer_sdk says which SDK consumes: "go" (the default) is
// the Go SDK inside this process (drive.go consumeAll); every other value
// runs a consumer program per SDK as a process of its own
// (loadtest/consumers/<lang>, loadtest/consumers/README.md is their
// contract), whose CPU is measured like spoold's.
//
// The contract, in short: the program's only argument is a JSON spec
// (procSpec). It connects, writes "ready" on stdout and waits for a line
// on stdin; then it subscribes (no-op handler, every message acked) and
// writes the ids it handled in batches, "i ID ID ...\n", at least every
// report_ms. When its stdin ends it drains, writes the ids still
// buffered, one line `{"ev":"exit",...}` with its SDK's counters, and
// exits 0. Reporting costs one string append per message and one write per
// batch: small next to the SDK's own cost per message.

// consumerLangs are the consumer_sdk values that run a process, with what
// each needs.
var consumerLangs = map[string]string{
	"go-process": "the Go toolchain (the program is built for the run)",
	"python":     "sdk/python/.venv (make build-sdk-python)",
	"typescript": "node 20+ and sdk/typescript/dist (make build-sdk-typescript)",
	"java":       "a JDK 17+, sdk/java/target/classes and target/classpath.txt (make build-sdk-java)",
}

// errSDKNotBuilt marks a consumer program that cannot run because its
// toolchain or SDK build is missing (the loadtest's tests skip on it).
var errSDKNotBuilt = errors.New("SDK not built")

// procSpec is the consumer program's JSON argument.
type procSpec struct {
	Addr        string `json:"addr"`
	Group       string `json:"group"`
	Topic       string `json:"topic"`
	Name        string `json:"name"`
	Concurrency int    `json:"concurrency"`
	Prefetch    int    `json:"prefetch"` // -1: the SDK's default
	ReportMs    int    `json:"report_ms"`
	// Options are the scenario's consumer_options, passed through: knobs
	// one SDK has and the others do not (docs/benchmarks/sdks.md).
	Options map[string]string `json:"options,omitempty"`
}

// stderrKeep is how much of a program's stderr a run keeps for its errors.
const stderrKeep = 4096

// procExit is the program's last line.
type procExit struct {
	Ev           string `json:"ev"`
	Handled      int64  `json:"handled"`
	SettleErrors int64  `json:"settle_errors"`
	Reconnects   int64  `json:"reconnects"`
}

// reportMs is how often a consumer program writes the ids it handled (at
// most this late: the end of a measured phase is seen up to this late).
const reportMs = 20

// consumerCommand returns the command line that runs lang's consumer
// program (its spec goes last), building what needs building into tmp.
func consumerCommand(root, tmp, lang string) ([]string, error) {
	dir := filepath.Join(root, "loadtest", "consumers", lang)
	notBuilt := func(format string, a ...any) error {
		return fmt.Errorf("loadtest: consumer_sdk %s: %s: %w", lang, fmt.Sprintf(format, a...), errSDKNotBuilt)
	}
	need := func(path, what string) error {
		if _, err := os.Stat(path); err != nil {
			return notBuilt("%s (%s) is missing: it needs %s", what, path, consumerLangs[lang])
		}
		return nil
	}
	switch lang {
	case "go-process":
		bin := filepath.Join(tmp, "consumer-go")
		cmd := exec.Command("go", "build", "-o", bin, "./loadtest/consumers/go-process")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("loadtest: go build ./loadtest/consumers/go-process: %w\n%s", err, out)
		}
		return []string{bin}, nil
	case "python":
		py := filepath.Join(root, "sdk/python/.venv/bin/python")
		if err := need(py, "the Python SDK's venv"); err != nil {
			return nil, err
		}
		if out, err := exec.Command(py, "-c", "import spool").CombinedOutput(); err != nil {
			return nil, notBuilt("%s cannot import spool (%v: %s): run make build-sdk-python", py, err, strings.TrimSpace(string(out)))
		}
		return []string{py, filepath.Join(dir, "consumer.py")}, nil
	case "typescript":
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, notBuilt("node is not on PATH: the TypeScript SDK needs Node 20 or later")
		}
		if err := need(filepath.Join(root, "sdk/typescript/dist/index.js"), "the TypeScript SDK's build"); err != nil {
			return nil, err
		}
		return []string{node, filepath.Join(dir, "consumer.js")}, nil
	case "java":
		javac, err := exec.LookPath("javac")
		if err != nil {
			return nil, notBuilt("javac is not on PATH: the Java SDK needs a JDK 17 or later (make deps installs one)")
		}
		classes := filepath.Join(root, "sdk/java/target/classes")
		cpFile := filepath.Join(root, "sdk/java/target/classpath.txt")
		if err := need(classes, "the Java SDK's classes"); err != nil {
			return nil, err
		}
		if err := need(cpFile, "the Java SDK's runtime classpath"); err != nil {
			return nil, err
		}
		deps, err := os.ReadFile(cpFile)
		if err != nil {
			return nil, err
		}
		cp := classes + string(os.PathListSeparator) + strings.TrimSpace(string(deps))
		out := filepath.Join(tmp, "consumer-java")
		if b, err := exec.Command(javac, "-d", out, "-cp", cp, filepath.Join(dir, "Consumer.java")).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("loadtest: compiling loadtest/consumers/java/Consumer.java: %v\n%s", err, b)
		}
		return []string{"java", "-cp", out + string(os.PathListSeparator) + cp, "Consumer"}, nil
	}
	return nil, fmt.Errorf("loadtest: consumer_sdk %q has no consumer program", lang)
}

// procConsumers are the consumer programs of a run, one per consumer.
type procConsumers struct {
	lang  string
	procs []*procConsumer
}

// procConsumer is one consumer program: its process, the goroutine reading
// its stdout (reads) and the one waiting for it (waits).
type procConsumer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{} // closed at the "ready" line
	exited chan struct{} // closed when the process was waited for
	read   chan struct{} // closed when its stdout was read to the end
	stderr *tailBuffer

	// Set by the reader before read is closed:
	exit     *procExit
	badLines int
	firstBad string
	waitErr  error // set before exited is closed
}

// drainWithin bounds how long a consumer program may take to drain and
// exit after its stdin ended, before it is killed.
const drainWithin = 30 * time.Second

// startConsumerProcs starts sc.Consumers consumer programs of
// sc.ConsumerSDK (consumer i talks to addrs[i % len(addrs)]) and waits
// until each has connected; they consume once begin is called, and every
// id they report goes to cs.
func startConsumerProcs(ctx context.Context, root, tmp string, addrs []string, sc *Scenario, cs *consStats) (*procConsumers, error) {
	argv, err := consumerCommand(root, tmp, sc.ConsumerSDK)
	if err != nil {
		return nil, err
	}
	pc := &procConsumers{lang: sc.ConsumerSDK}
	cs.node = make([]int, sc.Consumers)
	cs.byNode = make([]atomic.Int64, len(addrs))
	for i := range sc.Consumers {
		node := i % len(addrs)
		cs.node[i] = node
		spec, _ := json.Marshal(procSpec{
			Addr: addrs[node], Group: groupName, Topic: topicName, Name: fmt.Sprintf("loadtest-%s-%d", sc.ConsumerSDK, i),
			Concurrency: sc.ConsumerConcurrency, Prefetch: sc.ConsumerPrefetch, ReportMs: reportMs, Options: sc.ConsumerOptions,
		})
		p, err := startConsumerProc(argv, string(spec), node, cs)
		if err != nil {
			pc.kill()
			return nil, fmt.Errorf("loadtest: consumer %d (%s): %w", i, sc.ConsumerSDK, err)
		}
		pc.procs = append(pc.procs, p)
	}
	deadline := time.NewTimer(60 * time.Second) // a JVM on a busy machine
	defer deadline.Stop()
	for i, p := range pc.procs {
		select {
		case <-p.ready:
		case <-p.exited:
			pc.kill()
			return nil, fmt.Errorf("loadtest: consumer %d (%s) exited before it was ready: %v; its stderr:\n%s", i, sc.ConsumerSDK, p.waitErr, p.stderr)
		case <-deadline.C:
			pc.kill()
			return nil, fmt.Errorf("loadtest: consumer %d (%s) not ready within 60s; its stderr:\n%s", i, sc.ConsumerSDK, p.stderr)
		case <-ctx.Done():
			pc.kill()
			return nil, ctx.Err()
		}
	}
	return pc, nil
}

func startConsumerProc(argv []string, spec string, node int, cs *consStats) (*procConsumer, error) {
	cmd := exec.Command(argv[0], append(argv[1:len(argv):len(argv)], spec)...)
	p := &procConsumer{cmd: cmd, ready: make(chan struct{}), exited: make(chan struct{}), read: make(chan struct{}), stderr: &tailBuffer{max: stderrKeep}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go p.readStdout(out, node, cs)
	go func() {
		<-p.read // Wait closes stdout: read it to the end first
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// readStdout reads the program's lines until its stdout ends.
func (p *procConsumer) readStdout(out io.Reader, node int, cs *consStats) {
	defer close(p.read)
	r := bufio.NewReaderSize(out, 256<<10)
	readyClosed := false
	bad := func(line []byte) {
		if p.badLines == 0 {
			p.firstBad = string(line[:min(len(line), 200)])
		}
		p.badLines++
	}
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull { // a very long batch: keep it whole
			buf := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		if len(line) > 0 {
			line = bytes.TrimRight(line, "\r\n")
			switch {
			case len(line) >= 2 && line[0] == 'i' && line[1] == ' ':
				now := time.Now()
				for f := range bytes.FieldsSeq(line[2:]) {
					cs.handleID(node, f, now)
				}
			case string(line) == "ready" && !readyClosed:
				readyClosed = true
				close(p.ready)
			case len(line) > 0 && line[0] == '{':
				var e procExit
				if json.Unmarshal(line, &e) == nil && e.Ev == "exit" {
					p.exit = &e
				} else {
					bad(line)
				}
			case len(line) == 0:
			default:
				bad(line)
			}
		}
		if err != nil {
			return
		}
	}
}

// pids are the processes' ids, for their CPU.
func (pc *procConsumers) pids() []int {
	out := make([]int, len(pc.procs))
	for i, p := range pc.procs {
		out[i] = p.cmd.Process.Pid
	}
	return out
}

// begin tells every program to subscribe.
func (pc *procConsumers) begin() error {
	var errs []error
	for i, p := range pc.procs {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			errs = append(errs, fmt.Errorf("consumer %d (%s): %w; its stderr:\n%s", i, pc.lang, err, p.stderr))
		}
	}
	return errors.Join(errs...)
}

// stop ends every program's stdin (they drain and exit), waits for them
// (killing those that take longer than drainWithin) and says what went
// wrong.
func (pc *procConsumers) stop() error {
	for _, p := range pc.procs {
		_ = p.stdin.Close()
	}
	deadline := time.NewTimer(drainWithin)
	defer deadline.Stop()
	var errs []error
	for i, p := range pc.procs {
		select {
		case <-p.exited:
		case <-deadline.C:
			_ = p.cmd.Process.Kill()
			<-p.exited
			errs = append(errs, fmt.Errorf("consumer %d (%s) did not exit within %s of its stdin ending: killed", i, pc.lang, drainWithin))
		}
		switch {
		case p.waitErr != nil:
			errs = append(errs, fmt.Errorf("consumer %d (%s): %v; its stderr:\n%s", i, pc.lang, p.waitErr, p.stderr))
		case p.exit == nil:
			errs = append(errs, fmt.Errorf("consumer %d (%s) exited without its exit line; its stderr:\n%s", i, pc.lang, p.stderr))
		}
		if p.badLines > 0 {
			errs = append(errs, fmt.Errorf("consumer %d (%s) wrote %d lines outside its contract (loadtest/consumers/README.md), the first: %q", i, pc.lang, p.badLines, p.firstBad))
		}
	}
	return errors.Join(errs...)
}

// totals sums the programs' exit counters (after stop).
func (pc *procConsumers) totals() (reconnects, settleErrors int64) {
	for _, p := range pc.procs {
		if p.exit != nil {
			reconnects += p.exit.Reconnects
			settleErrors += p.exit.SettleErrors
		}
	}
	return
}

// hwmKiB sums the programs' VmHWM (while they run).
func (pc *procConsumers) hwmKiB() int64 {
	var sum int64
	for _, p := range pc.procs {
		if _, h, err := procMem(p.cmd.Process.Pid); err == nil {
			sum += h
		}
	}
	return sum
}

// kill ends every program at once (a run that failed).
func (pc *procConsumers) kill() {
	for _, p := range pc.procs {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
