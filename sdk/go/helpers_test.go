package spool_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
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

// logRecorder is a slog.Handler that keeps the messages logged at Warn and
// above, so tests can await what the SDK reports.
type logRecorder struct {
	mu      sync.Mutex
	msgs    []string
	changed chan struct{} // closed and replaced on every record
}

func newLogRecorder() *logRecorder { return &logRecorder{changed: make(chan struct{})} }

func (l *logRecorder) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *logRecorder) WithGroup(string) slog.Handler                 { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// count is how many records contain substr.
func (l *logRecorder) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// await waits until at least n records contain substr.
func (l *logRecorder) await(t *testing.T, n int, substr string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		if l.count(substr) >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("waiting for %d log records containing %q; got:\n%s", n, substr, strings.Join(l.msgs, "\n"))
		}
	}
}
