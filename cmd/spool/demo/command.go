package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Command runs `spool demo` with its command-line arguments and returns the
// exit code: 0 when every published order was emailed or dead-lettered, 1
// when an order was lost (or the demo failed), 2 for bad flags.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := DefaultOptions()
	fs := flag.NewFlagSet("spool demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long checkout places orders (then the worker drains)")
	fs.IntVar(&o.Rate, "rate", o.Rate, "orders placed per second")
	fs.Float64Var(&o.FailRate, "fail-rate", o.FailRate, "share of email provider calls that fail outside the outage (0..1)")
	fs.DurationVar(&o.ProviderLatency, "provider-latency", o.ProviderLatency, "mean email provider latency (each call takes 0.5x to 1.5x of it)")
	fs.DurationVar(&o.Outage, "outage", o.Outage, "length of the email provider outage, starting at 1/3 of the run (0: none)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the sidecar running after the summary, to look at it with spool (Ctrl-C stops it)")
	fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "host:port of an OTLP/gRPC collector (e.g. Jaeger's 127.0.0.1:4317): export one trace per order, checkout to email (docs/demo.md)")
	fs.StringVar(&o.AdminListen, "admin-listen", "", "the sidecar's admin address (default: 127.0.0.1:7071 with --keep, so that spool finds it; else a free port)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: spool demo [flags]

Runs a Spool sidecar in this process, a checkout service publishing
"order-placed" events to it, and an email worker (Go SDK) whose email
provider is slow, sometimes fails and has one outage. Shows live counts,
then a summary of what the queue bought. Ctrl-C ends early. docs/demo.md
explains the numbers.

flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "spool demo: unexpected argument %q (flags only; see spool demo -h)\n", fs.Arg(0))
		return 2
	}
	if o.AdminListen == "" {
		o.AdminListen = "127.0.0.1:0"
		if o.Keep {
			o.AdminListen = "127.0.0.1:7071" // spool's default --admin
		}
	}
	o.Out = stdout
	o.Live = isTerminal(stdout)
	s, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "spool demo:", err)
		if s == nil {
			var bad *OptionError
			if errors.As(err, &bad) {
				return 2
			}
			return 1
		}
	}
	if s.Lost > 0 || s.Unfinished > 0 && !s.Interrupted {
		return 1
	}
	return 0
}

// isTerminal says whether w is a terminal (then the live view redraws in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
