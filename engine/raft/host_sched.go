package raft

import "sync"

// scheduler is the queue of groups with work, after cockroachdb's raft
// scheduler (pkg/kv/kvserver/scheduler.go): a FIFO of groups and, per
// group, two flags kept under the scheduler's lock — queued (it has work
// no worker has started on) and processing (a worker holds it). A group is
// in the FIFO at most once and held by at most one worker; a group
// enqueued while processing is put back in the FIFO when its worker
// finishes, so work that arrives meanwhile is never lost and never runs
// concurrently with the work before it.
type scheduler struct {
	mu     sync.Mutex
	work   *sync.Cond // signalled when the FIFO grows or the scheduler closes
	idle   *sync.Cond // broadcast when a group stops processing
	fifo   []*hostGroup
	head   int
	busy   int // groups processing
	closed bool
}

func newScheduler() *scheduler {
	s := &scheduler{}
	s.work = sync.NewCond(&s.mu)
	s.idle = sync.NewCond(&s.mu)
	return s
}

// enqueue marks g as having work.
func (s *scheduler) enqueue(g *hostGroup) {
	s.mu.Lock()
	if !g.queued && !g.dead {
		g.queued = true
		if !g.processing {
			s.fifo = append(s.fifo, g)
			s.work.Signal()
		}
	}
	s.mu.Unlock()
}

// next blocks until a group has work and returns it, marked processing;
// nil once the scheduler is closed.
func (s *scheduler) next() *hostGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return nil
		}
		if s.head < len(s.fifo) {
			g := s.fifo[s.head]
			s.fifo[s.head] = nil
			s.head++
			if s.head == len(s.fifo) {
				s.fifo, s.head = s.fifo[:0], 0
			}
			g.queued = false
			if g.dead {
				continue
			}
			g.processing = true
			s.busy++
			return g
		}
		s.work.Wait()
	}
}

// finish releases g; if it was enqueued meanwhile it goes back in the FIFO.
func (s *scheduler) finish(g *hostGroup) {
	s.mu.Lock()
	g.processing = false
	s.busy--
	if g.queued && !g.dead && !s.closed {
		s.fifo = append(s.fifo, g)
		s.work.Signal()
	}
	s.idle.Broadcast()
	s.mu.Unlock()
}

// kill marks g dead (never handed out again) and waits until no worker
// holds it.
func (s *scheduler) kill(g *hostGroup) {
	s.mu.Lock()
	g.dead = true
	for g.processing {
		s.idle.Wait()
	}
	s.mu.Unlock()
}

// close wakes every worker to return; groups in the FIFO stay unprocessed.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.work.Broadcast()
	s.idle.Broadcast()
	s.mu.Unlock()
}

// waitIdle blocks until no group is queued or processing, or the
// scheduler is closed (tests drive the network between visits with it).
func (s *scheduler) waitIdle() {
	s.mu.Lock()
	for !s.closed && (s.busy > 0 || s.head < len(s.fifo)) {
		s.idle.Wait()
	}
	s.mu.Unlock()
}
