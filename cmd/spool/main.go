// Command spool is Spool's command-line tool: it looks at and operates a
// running sidecar through its AdminService (topics, groups and lag, dead
// letters, offsets, tail), publishes through PublisherService, sizes a
// deployment (`spool plan`, also from a sidecar's /metrics), and runs a
// development sidecar (`spool dev`) or the demo (`spool demo`).
// docs/cli.md describes every command.
//
// Exit codes (exitOK ... exitUnreachable below, docs/cli.md): 0 done, 1 the
// operation failed or was refused, 2 usage error, 3 the sidecar did not
// answer.
//
// The sidecar itself is spoold (cmd/spoold).
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, env{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		stdinTTY: isTerminal(os.Stdin), stderrTTY: isTerminal(os.Stderr), getenv: os.LookupEnv,
	}, os.Args[1:])
	stop()
	os.Exit(code)
}

// env is what a run of spool reads and writes: the process's streams and
// environment in main, buffers in tests.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// stdinTTY: a person can answer a confirmation prompt on stdin.
	stdinTTY bool
	// stderrTTY: progress bars are drawn on stderr (only on a terminal).
	stderrTTY bool
	getenv    func(string) (string, bool)
	// now is the clock (time.Now when nil; tests step it).
	now func() time.Time
	// redact replaces what differs between runs (times, lag ages,
	// generated ids) with fixed text, for the golden tests.
	redact bool
}

// isTerminal says whether f is a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (e env) clock() time.Time {
	if e.now != nil {
		return e.now()
	}
	return time.Now()
}
