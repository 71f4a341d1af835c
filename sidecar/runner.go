package sidecar

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// component is one long-lived part of spoold. Run runs it until ctx ends,
// stops what it runs, and returns; returning earlier with an error means it
// failed, and spoold shuts down.
type component interface {
	Run(ctx context.Context) error
}

// componentFunc adapts a function to component.
type componentFunc func(ctx context.Context) error

func (f componentFunc) Run(ctx context.Context) error { return f(ctx) }

// runner starts spoold's components and stops them in one order: the
// reverse of the order in which they were added, a stack (run, in
// sidecar.go, writes the order down). Components are started on an
// errgroup, each with a context of its own, so that stopping one leaves
// the others running; steps are stop-only work (closing a client, leaving
// the cluster, saying not ready) placed in the same order.
type runner struct {
	eg     errgroup.Group
	failed chan error // the first failure of a running component
	stack  []stage
}

type stage struct {
	name string
	stop func() error
}

func newRunner() *runner { return &runner{failed: make(chan error, 1)} }

// start runs c until its turn to stop comes.
func (r *runner) start(name string, c component) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	reported := false
	r.eg.Go(func() error {
		defer close(done)
		err = c.Run(ctx)
		if err != nil && ctx.Err() == nil {
			reported = true
			r.fail(fmt.Errorf("%s: %w", name, err))
		}
		return err
	})
	r.onStop(name, func() error {
		cancel()
		<-done
		if reported {
			return nil // wait returned it
		}
		return err
	})
}

// fail reports a component's failure (the first one counts): spoold shuts
// down. A component may report one and go on running until its turn to
// stop (a server whose listener failed keeps serving the others' streams
// through the drain).
func (r *runner) fail(err error) {
	select {
	case r.failed <- err:
	default:
	}
}

// onStop places a stop-only step in the stop order.
func (r *runner) onStop(name string, f func() error) {
	r.stack = append(r.stack, stage{name: name, stop: f})
}

// wait blocks until ctx ends (told to stop: stopped is true) or a
// component fails (its error).
func (r *runner) wait(ctx context.Context) (stopped bool, err error) {
	select {
	case <-ctx.Done():
		return true, nil
	case err := <-r.failed:
		return false, err
	}
}

// stop runs the stop order, the last stage added first, each awaited
// before the next, and returns the errors the components returned.
func (r *runner) stop() error {
	var errs []error
	for i := len(r.stack) - 1; i >= 0; i-- {
		if err := r.stack[i].stop(); err != nil {
			errs = append(errs, err)
		}
	}
	r.stack = nil
	_ = r.eg.Wait() // every component has returned: its error is in errs
	return errors.Join(errs...)
}
