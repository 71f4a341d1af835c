// Package rsm is the one applier of Spool's replicated state machines: the
// controller (raft group 0, engine/meta) and the consumer-group coordinators
// (the partitions of __groups, engine/groups/coord). A replica's committed
// log is read in order, each record decoded and validated, then applied to
// a deterministic state machine; proposers wait for the result of their
// command; a machine whose log starts at a checkpoint is restored from it.
// It has the shape of CockroachDB's kvserver/apply and dragonboat's rsm:
// decode → validate → apply, catch-up from the log, wait-for-applied,
// checkpoints as a hook.
//
// # A record that does not decode or validate
//
// Proposers validate a command before they propose it, so a record that
// does not decode, or decodes to a command its machine refuses to read,
// reached the log some other way: written by a peer that is not trusted, a
// newer release, or damage. It is skipped, on every replica alike (each
// decodes the same bytes the same way, so no two replicas diverge), logged
// as an error with its offset, and counted (Skipped); whoever waits for its
// result is told it was skipped. It never stops the applier: one bad record
// must not halt the cluster's control plane for good.
//
// What stops an applier is what makes its state untrustworthy: the log
// cannot be read (a damaged file), a checkpoint that disagrees with the
// state, or a log that starts past what was applied with no checkpoint to
// rebuild from. Then Err says why, waiters are released, and nothing more
// is applied until the node restarts.
//
// # Concurrency
//
// CatchUp runs on one goroutine at a time (the owner's applier loop); the
// machine's Decode, Apply and Restore run there, with no lock of the
// Applier held (a machine may call out, as the controller does to open
// replicas). WaitApplied, Await, Applied, Err and Stop may be called from
// any goroutine. A machine makes its state visible to its readers inside
// Apply or Restore, before the Applier moves Applied past the records:
// whoever sees Applied >= n finds the state at least that new.
//
// This package imports no raft and no transport: it reads a Log and calls
// a Machine.
package rsm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// Log is the committed log of one replica: a partition's log on this node.
type Log interface {
	Read(from int64, maxBytes int, end int64, dst []log.Record) ([]log.Record, error)
	StartOffset() int64
}

// Entry is one decoded command at its offset in the log.
type Entry[C any] struct {
	Offset int64
	Cmd    C
}

// Machine is a deterministic state machine fed committed commands in log
// order. Every replica given the same records reaches the same state.
type Machine[C, R any] interface {
	// Decode parses and validates one record's value. An error skips the
	// record (see the package doc); it must depend on the bytes alone.
	Decode(value []byte) (C, error)
	// Apply applies entries, in log order, and returns each one's result
	// (res[i] for entries[i]); it makes the new state visible to its
	// readers before returning. An error stops the applier after the
	// first n entries, which were applied (a state that diverged from a
	// checkpoint): res then holds their results.
	Apply(entries []Entry[C]) (res []R, n int, err error)
	// Restore rebuilds the state when the log starts at start, past the
	// next offset to apply (the log was compacted to a checkpoint, or a
	// snapshot replaced it). It returns the next offset to apply, or -1
	// while the checkpoint's records are not all committed below end; an
	// error stops the applier.
	Restore(lg Log, start, end int64) (next int64, err error)
}

// Config names an Applier's log and bounds what it keeps.
type Config struct {
	// Name is what errors and logs call the log ("the controller's log",
	// "__groups/3").
	Name string
	// MaxResults is how many recent results are kept for proposers
	// waiting on them. Default 4096.
	MaxResults int
	// ReadBytes is how much one read of the log takes. Default 1 MiB.
	ReadBytes int
	// Logger receives the skipped records and why an applier stopped.
	Logger interface {
		Error(string, ...any)
	}
}

// ErrSkipped: the command at an offset did not decode or validate and was
// skipped (it changed nothing).
var ErrSkipped = errors.New("command skipped: it does not decode or validate")

// ErrResultUnknown: the command was applied too long ago for its result to
// be kept. It wraps engine.ErrOutcomeUnknown.
var ErrResultUnknown = fmt.Errorf("%w: applied too long ago to know its result", engine.ErrOutcomeUnknown)

// Applier applies one replica's committed log to a Machine.
type Applier[C, R any] struct {
	cfg Config
	m   Machine[C, R]
	lg  Log

	skipped atomic.Uint64

	mu      sync.Mutex // guards the fields below; a leaf, never held while calling the machine
	applied int64      // next offset to apply
	results map[int64]outcome[R]
	changed chan struct{} // closed and replaced after each change of the fields above
	err     error         // why the applier stopped (nil: running)

	// Owned by CatchUp's goroutine.
	recs    []log.Record
	entries []Entry[C]
}

type outcome[R any] struct {
	res R
	err error // ErrSkipped, wrapped
}

// New returns an applier of lg to m that starts at offset 0.
func New[C, R any](cfg Config, lg Log, m Machine[C, R]) *Applier[C, R] {
	if cfg.MaxResults <= 0 {
		cfg.MaxResults = 4096
	}
	if cfg.ReadBytes <= 0 {
		cfg.ReadBytes = 1 << 20
	}
	return &Applier[C, R]{cfg: cfg, m: m, lg: lg, results: map[int64]outcome[R]{}, changed: make(chan struct{})}
}

// Log is the log the applier reads.
func (a *Applier[C, R]) Log() Log { return a.lg }

// Skipped counts the records skipped since the applier started.
func (a *Applier[C, R]) Skipped() uint64 { return a.skipped.Load() }

// Applied is the next offset to apply: every command below it is applied.
func (a *Applier[C, R]) Applied() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied
}

// Err is why the applier stopped (nil while it runs).
func (a *Applier[C, R]) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Stop stops the applier (the first error stays) and releases its waiters.
func (a *Applier[C, R]) Stop(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
		a.signal()
	}
}

// signal wakes the waiters; a.mu is held.
func (a *Applier[C, R]) signal() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// CatchUp applies the committed records below end not applied yet. It
// returns the applier's error once stopped (also when it stopped before).
func (a *Applier[C, R]) CatchUp(end int64) error {
	a.mu.Lock()
	from, err := a.applied, a.err
	a.mu.Unlock()
	for err == nil && from < end {
		if start := a.lg.StartOffset(); from < start {
			next, rerr := a.m.Restore(a.lg, start, end)
			if rerr != nil {
				err = fmt.Errorf("%s starts at offset %d, past offset %d this replica applied up to, and its state cannot be rebuilt: %w", a.cfg.Name, start, from, rerr)
				break
			}
			if next < 0 {
				return nil // the checkpoint's records are not all committed yet
			}
			a.mu.Lock()
			a.applied, from = next, next
			clear(a.results)
			a.signal()
			a.mu.Unlock()
			continue
		}
		a.recs, err = a.lg.Read(from, a.cfg.ReadBytes, end, a.recs[:0])
		if err == nil && len(a.recs) == 0 {
			err = errors.New("no records below the committed end")
		}
		if err != nil {
			if from < a.lg.StartOffset() {
				err = nil // compacted meanwhile: restore from the checkpoint
				continue
			}
			err = fmt.Errorf("cannot read %s at offset %d: %w; restart the node once the log is repaired", a.cfg.Name, from, err)
			break
		}
		from, err = a.applyBatch(a.recs)
	}
	if err != nil {
		a.Stop(err)
		if a.cfg.Logger != nil {
			a.cfg.Logger.Error("spool: this node stops applying a replicated state machine", "log", a.cfg.Name, "err", err)
		}
		return a.Err()
	}
	return nil
}

// applyBatch decodes recs, applies those that decode, and publishes their
// results. It returns the next offset to apply.
func (a *Applier[C, R]) applyBatch(recs []log.Record) (int64, error) {
	a.entries = a.entries[:0]
	var skips map[int64]error
	for _, r := range recs {
		cmd, err := a.m.Decode(r.Value)
		if err != nil {
			if skips == nil {
				skips = map[int64]error{}
			}
			skips[r.Offset] = fmt.Errorf("%w: %s offset %d: %w", ErrSkipped, a.cfg.Name, r.Offset, err)
			a.skipped.Add(1)
			if a.cfg.Logger != nil {
				a.cfg.Logger.Error("spool: skipped a record of a replicated state machine's log that does not decode or validate (every replica skips it alike)",
					"log", a.cfg.Name, "offset", r.Offset, "bytes", len(r.Value), "err", err)
			}
			continue
		}
		a.entries = append(a.entries, Entry[C]{Offset: r.Offset, Cmd: cmd})
	}
	var res []R
	n := 0
	var err error
	if len(a.entries) > 0 {
		res, n, err = a.m.Apply(a.entries)
	}
	next := recs[len(recs)-1].Offset + 1
	if err != nil { // applied up to the n-th entry only
		next = recs[0].Offset
		if n > 0 {
			next = a.entries[n-1].Offset + 1
		}
	}
	a.mu.Lock()
	for i := range n {
		a.results[a.entries[i].Offset] = outcome[R]{res: res[i]}
	}
	for off, e := range skips {
		if off < next {
			a.results[off] = outcome[R]{err: e}
		}
	}
	for off := range a.results { // keep the recent ones only
		if off < next-int64(a.cfg.MaxResults) {
			delete(a.results, off)
		}
	}
	a.applied = next
	a.signal()
	a.mu.Unlock()
	return next, err
}

// WaitApplied waits until the command at offset off is applied and returns
// its result: an error wrapping ErrSkipped when it was skipped,
// engine.ErrOutcomeUnknown when the result is no longer kept, the applier
// stopped first, or ctx ended first.
func (a *Applier[C, R]) WaitApplied(ctx context.Context, off int64) (R, error) {
	var zero R
	for {
		a.mu.Lock()
		applied, ch, stopped := a.applied, a.changed, a.err
		o, have := a.results[off]
		a.mu.Unlock()
		switch {
		case applied > off && have:
			return o.res, o.err
		case applied > off:
			return zero, fmt.Errorf("%s offset %d: %w", a.cfg.Name, off, ErrResultUnknown)
		case stopped != nil:
			return zero, fmt.Errorf("%w: committed at offset %d of %s, not applied here: %w", engine.ErrOutcomeUnknown, off, a.cfg.Name, stopped)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return zero, fmt.Errorf("%w: committed at offset %d of %s, not applied here in time: %w", engine.ErrOutcomeUnknown, off, a.cfg.Name, ctx.Err())
		}
	}
}

// AwaitApplied waits until every command below end is applied. It returns
// the applier's error if it stopped first, or ctx's.
func (a *Applier[C, R]) AwaitApplied(ctx context.Context, end int64) error {
	for {
		a.mu.Lock()
		applied, ch, stopped := a.applied, a.changed, a.err
		a.mu.Unlock()
		switch {
		case stopped != nil:
			return stopped
		case applied >= end:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s not applied up to offset %d in time: %w", a.cfg.Name, end, ctx.Err())
		}
	}
}
