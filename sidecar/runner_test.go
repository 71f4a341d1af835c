package sidecar

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestRunnerStopsInReverseOrder: the runner stops its stages one by one,
// the last added first, each awaited before the next; a component that
// fails ends wait with its error, reported once.
func TestRunnerStopsInReverseOrder(t *testing.T) {
	r := newRunner()
	var order []string
	comp := func(name string) component {
		return componentFunc(func(ctx context.Context) error {
			<-ctx.Done()
			order = append(order, name) // each stop is awaited: no race
			return nil
		})
	}
	r.onStop("dir", func() error { order = append(order, "dir"); return nil })
	r.start("engine", comp("engine"))
	r.start("server", comp("server"))
	boom := errors.New("listener closed")
	r.start("failing", componentFunc(func(ctx context.Context) error { return boom }))
	r.start("delivery", componentFunc(func(ctx context.Context) error {
		<-ctx.Done()
		order = append(order, "delivery")
		return errors.New("final commit failed")
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopped, err := r.wait(ctx)
	if stopped || !errors.Is(err, boom) {
		t.Fatalf("wait = %v, %v; want the failing component's error", stopped, err)
	}
	err = r.stop()
	if want := []string{"delivery", "server", "engine", "dir"}; !slices.Equal(order, want) {
		t.Fatalf("stop order %v, want %v", order, want)
	}
	if err == nil || err.Error() != "final commit failed" {
		t.Fatalf("stop = %v, want only the delivery's error (the failure was reported by wait)", err)
	}
}

// TestRunnerWaitStopped: wait says when spoold was told to stop.
func TestRunnerWaitStopped(t *testing.T) {
	r := newRunner()
	r.start("idle", componentFunc(func(ctx context.Context) error { <-ctx.Done(); return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if stopped, err := r.wait(ctx); !stopped || err != nil {
		t.Fatalf("wait = %v, %v; want stopped", stopped, err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}
