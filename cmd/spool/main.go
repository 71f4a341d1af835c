// Command spool is Spool's command-line tool.
//
//	spool demo [flags]   a checkout producer and a flaky email worker on an in-process sidecar
//
// The sidecar itself is spoold (cmd/spoold).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spoolmq/spool/cmd/spool/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: spool <command> [flags]

commands:
  demo    run a checkout producer and a flaky email worker on an in-process
          sidecar, and show what the queue buys (spool demo -h for its flags)
`

// run dispatches a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return demo.Command(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "spool: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
