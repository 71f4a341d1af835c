// Command spoold-pprof is cmd/spoold plus net/http/pprof, for profiling the
// sidecar under the load tests without touching the sidecar's own code:
//
//	go run ./loadtest --scenario e2e --spoold-pkg ./loadtest/cmd/spoold-pprof --profile /tmp/prof
//
// The pprof listener is 127.0.0.1 only, on the address in
// SPOOL_LOADTEST_PPROF (the harness sets it). Never ship this binary.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spoolmq/spool/sidecar"
	"github.com/spoolmq/spool/sidecar/config"
)

func main() {
	if addr := os.Getenv("SPOOL_LOADTEST_PPROF"); addr != "" {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			fmt.Fprintln(os.Stderr, "spoold-pprof: SPOOL_LOADTEST_PPROF must be 127.0.0.1:port")
			os.Exit(2)
		}
		go func() { _ = http.ListenAndServe(addr, nil) }()
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := sidecar.Run(ctx, cfg, sidecar.Options{Logger: logger}); err != nil {
		logger.Error("spoold failed", "err", err)
		os.Exit(1)
	}
}
