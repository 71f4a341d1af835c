package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spoolmq/spool/cmd/spool/demo"
	"github.com/spoolmq/spool/sidecar"
	"github.com/spoolmq/spool/sidecar/config"
)

func (a *app) devCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "dev [spoold flags]",
		Short: "Run a development sidecar in the foreground (the same as spoold --dev)",
		Long: `Runs a sidecar in this process, as ` + "`spoold --dev`" + ` does: a temporary data
directory (deleted on exit), an in-process dedupe ledger instead of Redis,
topic "demo" with 4 partitions and subscription demo/demo-app, unless
--config names a file. It takes every flag of spoold (spool dev --help-spoold
lists them) and stops on Ctrl-C. Apps connect to 127.0.0.1:7070, spool to
127.0.0.1:7071.`,
		Example: example(
			"spool dev",
			"spool dev --topic orders:8 --admin-listen 127.0.0.1:9071",
			"spool dev --config spool.yaml --log-level debug"),
		// spoold's flags are parsed by its own flag set (config.Resolve).
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, arg := range args {
				if arg == "-h" || arg == "--help" {
					return cmd.Help()
				}
			}
			fs := flag.NewFlagSet("spool dev", flag.ContinueOnError)
			fs.SetOutput(a.stderr)
			logLevel := fs.String("log-level", "info", "debug, info, warn or error")
			for i, arg := range args {
				if arg == "--help-spoold" {
					args[i] = "-h"
				}
			}
			cfg, err := config.Resolve(fs, append([]string{"--dev"}, args...), a.getenv)
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			if err != nil {
				return usageErr("dev: %s", oneLine(err.Error()))
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
				return usageErr("dev: --log-level %q: use debug, info, warn or error", *logLevel)
			}
			logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
			ready := func(addrs sidecar.Addrs) {
				fmt.Fprintf(a.stdout, "spool dev: sidecar running; apps connect to %s, spool to --admin %s; Ctrl-C stops it and deletes its data\n",
					strings.Join(addrs.App, ", "), addrs.Admin)
			}
			if err := sidecar.Run(cmd.Context(), cfg, sidecar.Options{Logger: logger, Ready: ready}); err != nil {
				return failed("dev: the sidecar stopped: %s", oneLine(err.Error()))
			}
			return nil
		},
	}
}

func (a *app) demoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo [flags]",
		Short: "Run a checkout producer and a flaky email worker on an in-process sidecar",
		Long: `Runs a Spool sidecar in this process, a checkout service publishing
"order-placed" events to it, and an email worker (Go SDK) whose email
provider is slow, sometimes fails and has one outage. Shows live counts,
then a summary of what the queue bought (docs/demo.md). spool demo -h lists
its flags.`,
		Example:            example("spool demo", "spool demo --duration 10s --rate 500"),
		DisableFlagParsing: true, // the demo parses its own flags
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := demo.Command(cmd.Context(), args, a.stdout, a.stderr); code != 0 {
				// The demo printed why; exit with its code.
				return &exitError{code: code, msg: "demo: see above"}
			}
			return nil
		},
	}
}
