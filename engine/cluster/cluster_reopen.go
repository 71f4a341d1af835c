package cluster

import (
	"errors"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/raft"
)

// The reasons a replica of this node stops (engine.ReplicaStatus.StopReason).
const (
	StopDiskFull = engine.StopDiskFull
	StopDamaged  = engine.StopDamaged
	StopOther    = engine.StopOther
)

// stopReason classifies the error a replica stopped with: disk_full
// replicas are reopened (reopenStopped), the others stay stopped.
func stopReason(err error) string {
	var ce *log.CorruptionError
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return StopDiskFull
	case errors.As(err, &ce), errors.Is(err, raft.ErrLogCorrupt), errors.Is(err, log.ErrQuarantined):
		return StopDamaged
	default:
		return StopOther
	}
}

// stoppedReplicas decides, for the replicas of this node that stopped on a
// storage error, what is logged and when one is opened again: one episode
// per replica from its stop until it runs again, logged once at its start
// and once at its end, whatever the reopens that failed (or stopped again
// at once, the disk still full) in between. Only disk_full replicas are
// reopened, each at most once per every. No clock, no I/O: times are
// given; the member's chores act on its answers (reopenStopped). Safe for
// concurrent use (the host's workers report stops, the chores act).
type stoppedReplicas struct {
	every time.Duration

	mu sync.Mutex
	m  map[uint64]*stopEpisode
}

// stopEpisode is one replica's time stopped.
type stopEpisode struct {
	reason  string
	err     error     // the last stop's (or failed reopen's) error
	since   time.Time // the first stop
	tried   time.Time // the last reopen (the stop, before any)
	reopens int       // reopens tried
	// detached: a reopen removed the replica from the host and could not
	// add it again; it is tracked here until it is added.
	detached bool
}

func newStoppedReplicas(every time.Duration) *stoppedReplicas {
	return &stoppedReplicas{every: every, m: map[uint64]*stopEpisode{}}
}

// stopped: group's replica stopped with err at now. first: an episode
// starts (log it).
func (s *stoppedReplicas) stopped(group uint64, err error, now time.Time) (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[group]; ok {
		e.err, e.reason = err, stopReason(err)
		return false
	}
	s.m[group] = &stopEpisode{reason: stopReason(err), err: err, since: now, tried: now}
	return true
}

// due lists the groups to reopen at now (disk_full, last tried at least
// every ago), in increasing order, and counts the attempt. A replica that
// runs again is not reopened (reopen looks), and ends its episode first
// (running, called before due).
func (s *stoppedReplicas) due(now time.Time) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint64
	for g, e := range s.m {
		if e.reason == StopDiskFull && now.Sub(e.tried) >= s.every {
			e.tried = now
			e.reopens++
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// reopened records a reopen's outcome: err is why the replica could not
// be added again (it is then detached: tracked here only).
func (s *stoppedReplicas) reopened(group uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[group]; ok {
		e.detached = err != nil
		if err != nil {
			e.err, e.reason = err, stopReason(err)
		}
	}
}

// running: group's replica runs at now (its status has no error). Once it
// has run for a whole interval since the last reopen — a replica reopened
// on a disk still full stops again at its first write, which its leader
// sends within a few ticks — the episode ends, returned for the log line
// (ok).
func (s *stoppedReplicas) running(group uint64, now time.Time) (stopEpisode, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[group]
	if !ok || now.Sub(e.tried) < s.every {
		return stopEpisode{}, false
	}
	delete(s.m, group)
	return *e, true
}

// gone: group's replica is no longer on the host and no reopen removed it
// (a move took it away, its topic was deleted): the episode ends unlogged.
func (s *stoppedReplicas) gone(group uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[group]; ok && !e.detached {
		delete(s.m, group)
	}
}

// has: group has an episode.
func (s *stoppedReplicas) has(group uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[group]
	return ok
}

// forget ends group's episode unlogged, detached or not: the node gave the
// replica up.
func (s *stoppedReplicas) forget(group uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, group)
}

// detached: group's replica was removed by a reopen that could not add it
// again.
func (s *stoppedReplicas) detached(group uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[group]
	return ok && e.detached
}

// episodes lists the groups with an episode, and whether each is detached.
func (s *stoppedReplicas) episodes() map[uint64]stopEpisode {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uint64]stopEpisode, len(s.m))
	for g, e := range s.m {
		out[g] = *e
	}
	return out
}

// replicaStopped: group's replica stopped, or a reopen removed it from the
// host and could not add it again.
func (c *member) replicaStopped(group uint64) bool {
	if st, ok := c.status(group); ok {
		return st.Err != nil
	}
	return c.stops.detached(group)
}

// onStop is the host's OnStop: the stop is logged once per episode, and the
// chores look at it at once.
func (c *member) onStop(group uint64, err error) {
	if c.stops.stopped(group, err, time.Now()) {
		reason := stopReason(err)
		what := "it stays stopped (it neither votes nor leads) until the node restarts"
		switch reason {
		case StopDiskFull:
			what = "it neither votes nor leads, and is opened again every " + c.cfg.ReopenStoppedEvery.String() + " until space returns; then it catches up from the leader"
		case StopDamaged:
			what = "its log is damaged: it is never reopened; a new copy is built from the other replicas (docs/operations.md)"
		}
		c.logger.Warn("spool cluster: a replica on this node stopped; the partition runs on its other replicas: "+what,
			"replica", c.groupName(group), "group", group, "reason", reason, "err", err)
	}
	select {
	case c.choresWake <- struct{}{}:
	default:
	}
}

// reopenStopped is the chore that brings stopped replicas back: it ends the
// episodes of replicas running again (logged once) and reopens those due.
func (c *member) reopenStopped(now time.Time) {
	for g, e := range c.stops.episodes() {
		st, ok := c.host.Status(g)
		switch {
		case ok && st.Err == nil:
			if e, ok := c.stops.running(g, now); ok {
				c.logger.Info("spool cluster: a stopped replica on this node runs again and catches up from the leader",
					"replica", c.groupName(g), "group", g, "reason", e.reason, "stopped_for", now.Sub(e.since).Round(time.Millisecond), "reopens", e.reopens)
			}
		case !ok && !e.detached:
			c.stops.gone(g)
		}
	}
	for _, g := range c.stops.due(now) {
		done, err := c.reopen(g)
		if !done {
			continue
		}
		c.stops.reopened(g, err)
		if err == nil {
			c.replicasReopened.Add(1)
		}
	}
}

// reopen removes group's stopped replica from the host and opens it again
// from disk, as at start (openController, openReplica) — unless the node
// gave it up meanwhile (detach ended its episode). done: a reopen was
// tried; err: why it did not add the replica again.
func (c *member) reopen(group uint64) (done bool, err error) {
	c.reopenMu.Lock()
	defer c.reopenMu.Unlock()
	if !c.stops.has(group) {
		return false, nil
	}
	if st, ok := c.host.Status(group); ok && st.Err == nil {
		return false, nil // it runs: reopened, and not stopped again so far
	}
	var part *partition
	if group != controllerGroup {
		if part = c.partOfGroup(group); part == nil { // its topic is gone
			c.stops.forget(group)
			return false, nil
		}
	}
	if _, ok := c.host.Status(group); ok {
		if err := c.host.Remove(group); err != nil {
			return true, err
		}
	}
	if part == nil {
		return true, c.openController()
	}
	c.mu.Lock()
	delete(c.opened, group)
	c.mu.Unlock()
	return true, c.addReplica(part, false)
}

// detach removes group's replica from the host for good (placement stopped
// or dropped it, its topic was deleted): its episode ends, and no reopen
// under way or to come adds it again (reopenMu).
func (c *member) detach(group uint64) error {
	c.reopenMu.Lock()
	defer c.reopenMu.Unlock()
	c.stops.forget(group)
	return c.host.Remove(group)
}

// partOfGroup is this node's partition value whose replica is group (nil:
// none any more).
func (c *member) partOfGroup(group uint64) *partition {
	c.tab.Mu.RLock()
	defer c.tab.Mu.RUnlock()
	for _, t := range c.tab.Topics {
		for _, p := range t.Parts {
			if p.Log != nil && p.X.raftGroup == group {
				return p
			}
		}
	}
	return nil
}

// groupName names a group in log lines: topic-partition, or the
// controller's.
func (c *member) groupName(group uint64) string {
	if group == controllerGroup {
		return controllerPartition
	}
	if p := c.partOfGroup(group); p != nil {
		return engine.PartitionName(p.Topic.Name, p.Num)
	}
	return "?"
}
