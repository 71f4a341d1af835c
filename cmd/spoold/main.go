// Command spoold is the Spool sidecar: run one next to each application.
//
//	spoold --dev                      # temporary data dir, topic "demo", group "demo-app"
//	spoold --config /etc/spool/spool.yaml
//	spoold repair --data-dir D --partition orders-3   # truncate a quarantined partition (stopped node)
//	spoold version [--json]           # release, commit, Go version, protocol and data formats
//
// Configuration: docs/configuration.md. Flags override SPOOL_* environment
// variables, which override the file.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spoolmq/spool/sidecar"
	"github.com/spoolmq/spool/sidecar/config"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "repair":
			os.Exit(repair(os.Args[2:], os.Stdout, os.Stderr))
		case "version":
			os.Exit(version(os.Args[2:], os.Stdout, os.Stderr))
		}
	}
	fs := flag.NewFlagSet("spoold", flag.ContinueOnError)
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	cfg, err := config.Resolve(fs, os.Args[1:], os.LookupEnv)
	if err == flag.ErrHelp {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spoold:", err)
		os.Exit(2)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "spoold: --log-level %q: use debug, info, warn or error\n", *logLevel)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	applyMemoryLimit(cfg, logger)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := sidecar.Run(ctx, cfg, sidecar.Options{Logger: logger}); err != nil {
		logger.Error("spoold failed", "err", err)
		os.Exit(1)
	}
}

// applyMemoryLimit gives the Go runtime node.memory_limit as its soft
// memory limit, unless GOMEMLIMIT is set (the operator's explicit choice
// wins) or the limit is -1. The process owns the runtime's settings, so
// this is done here and not in sidecar.Run (tests run several sidecars in
// one process).
func applyMemoryLimit(cfg *config.Config, logger *slog.Logger) {
	if env, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		logger.Info("memory limit from GOMEMLIMIT; node.memory_limit ignored", "GOMEMLIMIT", env)
		return
	}
	if cfg.Node.MemoryLimit > 0 {
		debug.SetMemoryLimit(cfg.Node.MemoryLimit)
	}
}
