package spool_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
	"github.com/spoolmq/spool/sdk/go/internal/fakesidecar"
)

// env is one twin sidecar and a client connected to it.
type env struct {
	t      *testing.T
	side   *fakesidecar.Sidecar
	client *spool.Client
}

func newEnv(t *testing.T, cfg fakesidecar.Config) *env {
	t.Helper()
	side, err := fakesidecar.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := spool.Dial(ctx, side.Addr())
	if err != nil {
		side.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		side.Stop()
	})
	return &env{t: t, side: side, client: c}
}

// subscribe runs Subscribe in the background; stop cancels it and returns its error.
func (e *env) subscribe(h spool.Handler, opts ...spool.SubscribeOption) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts = append([]spool.SubscribeOption{spool.WithLogger(quietLogger()), spool.WithReconnectBackoff(time.Millisecond, 20*time.Millisecond)}, opts...)
	go func() { done <- e.client.Subscribe(ctx, "billing", []string{"orders"}, h, opts...) }()
	stopped := false
	var res error
	stop = func() error {
		if stopped {
			return res
		}
		stopped = true
		cancel()
		select {
		case res = <-done:
		case <-time.After(10 * time.Second):
			e.t.Fatal("Subscribe did not return 10 s after its ctx was cancelled")
		}
		return res
	}
	e.t.Cleanup(func() { _ = stop() })
	return stop
}

func (e *env) await(what string, cond func(fakesidecar.Record) bool) fakesidecar.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.side.Await(ctx, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v\nrecord: %+v", what, err, e.side.Record())
	}
	return e.side.Record()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
