package deliver

import (
	"context"
	"time"

	"github.com/spoolmq/spool/engine"
)

// commitJob is one topic's positions to write.
type commitJob struct {
	s   *sub
	pos map[int32]engine.Position
	err error
}

// position is the partition's committed position now: the tracker's lowest
// unfinished offset and finished offsets above it, plus offsets restored as
// finished that were never fetched again.
func (p *part) position() engine.Position {
	next, done := p.tr.Committed(nil)
	i := 0
	for i < len(p.skip) && p.skip[i] < next {
		i++
	}
	p.skip = p.skip[i:]
	p.skipAt = max(p.skipAt-i, 0)
	if len(p.skip) > 0 {
		done = mergeSorted(done, p.skip)
	}
	return engine.Position{Next: next, Done: done}
}

func mergeSorted(a, b []int64) []int64 {
	out := make([]int64, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0] < b[0]:
			out, a = append(out, a[0]), a[1:]
		case b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	return append(append(out, a...), b...)
}

func (g *Group) dirty() bool {
	for _, s := range g.subs {
		if s.committing {
			continue
		}
		for _, p := range s.parts {
			next, _ := p.tr.Committed(nil)
			if next != p.committed.Next || p.tr.InFlight() > 0 {
				return true
			}
		}
	}
	return false
}

// maybeCommit hands changed positions to the committer every CommitInterval.
func (g *Group) maybeCommit(now time.Time, force bool) {
	if !force && now.Before(g.nextCommit) {
		return
	}
	g.nextCommit = now.Add(g.cfg.CommitInterval)
	for _, s := range g.subs {
		if s.committing {
			continue
		}
		pos, changed := s.positions()
		if !changed {
			continue
		}
		s.committing = true
		g.commits <- commitJob{s: s, pos: pos} // capacity len(subs): never blocks
	}
}

func (s *sub) positions() (map[int32]engine.Position, bool) {
	pos := make(map[int32]engine.Position, len(s.parts))
	changed := false
	for _, p := range s.parts {
		cur := p.position()
		pos[p.num] = cur
		if !cur.Equal(p.committed) {
			changed = true
		}
	}
	return pos, changed
}

// runCommitter writes positions off the loop (an fsync per topic), and
// reports each result on g.commitDone.
func (g *Group) runCommitter(ctx context.Context) {
	for {
		select {
		case j := <-g.commits:
			j.err = g.eng.CommitPositions(g.cfg.Name, j.s.cfg.Topic, j.pos)
			g.commitDone <- j
		case <-ctx.Done():
			return
		}
	}
}

func (g *Group) applyCommit(j commitJob) {
	j.s.committing = false
	if j.err != nil {
		g.m.CommitErrors.WithLabelValues(g.cfg.Name, j.s.cfg.Topic).Inc()
		g.log.Error("committing offsets failed; retrying at the next interval", "topic", j.s.cfg.Topic, "err", j.err)
		return
	}
	for _, p := range j.s.parts {
		p.committed = j.pos[p.num]
	}
}

// finalCommit writes every topic's positions synchronously (the committer
// has stopped).
func (g *Group) finalCommit() error {
	var first error
	for _, s := range g.subs {
		pos, changed := s.positions()
		if !changed {
			continue
		}
		if err := g.eng.CommitPositions(g.cfg.Name, s.cfg.Topic, pos); err != nil {
			g.m.CommitErrors.WithLabelValues(g.cfg.Name, s.cfg.Topic).Inc()
			if first == nil {
				first = err
			}
			continue
		}
		for _, p := range s.parts {
			p.committed = pos[p.num]
		}
	}
	return first
}
