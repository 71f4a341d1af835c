package deliver

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/tracker"
)

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
	// A restored finished offset the tracker has reached (it is the
	// tracker's next until fetched again and skipped) is finished: the
	// lowest unfinished offset is past it. Finished offsets are strictly
	// above Next, as the coordinator requires of a commit.
	for len(done) > 0 && done[0] == next {
		done, next = done[1:], next+1
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

func (m *machine) dirty() bool {
	for _, s := range m.subs {
		if s.committing {
			continue
		}
		for _, p := range s.parts {
			if !m.committable(p) {
				continue
			}
			next, _ := p.tr.Committed(nil)
			if next != p.committed.Next || p.tr.InFlight() > 0 {
				return true
			}
		}
	}
	return false
}

// maybeCommit emits the changed positions of each topic every
// CommitInterval, one commit per topic at a time.
func (m *machine) maybeCommit(now time.Time) {
	if now.Before(m.nextCommit) {
		return
	}
	m.nextCommit = now.Add(m.commitInterval())
	for _, s := range m.subs {
		if s.committing {
			continue
		}
		pos, changed := m.positions(s)
		if !changed {
			continue
		}
		s.committing = true
		a := action{kind: actCommit, s: s, pos: pos}
		if m.cluster {
			// Only the changed ones: each is one record of the groups topic.
			a.gens = map[int32]uint64{}
			for num, x := range pos {
				if x.Equal(s.parts[num].committed) {
					delete(pos, num)
				} else {
					a.gens[num] = s.parts[num].gen
				}
			}
		}
		m.emit(a)
	}
}

func (m *machine) commitInterval() time.Duration {
	if m.cluster {
		return m.cfg.Membership.CommitInterval
	}
	return m.cfg.CommitInterval
}

// committable: the member owns the partition and is not handing it over
// (every partition on a single node).
func (m *machine) committable(p *part) bool { return !m.cluster || (p.own != ownNone && !p.handing) }

// positions returns the positions of the partitions the member commits,
// and whether one changed.
func (m *machine) positions(s *sub) (map[int32]engine.Position, bool) {
	pos := make(map[int32]engine.Position, len(s.parts))
	changed := false
	for _, p := range s.parts {
		if !m.committable(p) {
			continue
		}
		cur := p.position()
		pos[p.num] = cur
		if !cur.Equal(p.committed) {
			changed = true
		}
	}
	return pos, changed
}

// committedPositions applies the answer to an actCommit.
func (m *machine) committedPositions(j *commitJob) {
	j.s.committing = false
	if j.err != nil {
		m.count(metricKey{id: metCommitErrors, l1: j.s.cfg.Topic}, 1)
		m.note(slog.LevelError, "committing offsets failed; retrying at the next interval", "topic", j.s.cfg.Topic, "err", j.err)
		return
	}
	for _, p := range j.s.parts {
		p.committed = j.pos[p.num]
	}
}

// reset moves the positions of j's topic to j.next (one per partition),
// as an offset reset asks. It is refused while a consumer is connected
// (their deliveries would refer to the old positions). Unless it is a dry
// run, the partitions get new trackers at once and the new positions are
// committed: an actCommit carrying j, answered when it is written.
func (m *machine) reset(j *resetJob) error {
	if n := len(m.consumers); n > 0 {
		return fmt.Errorf("%w (%d; callback subscriptions count as one): stop them, reset, start them again", ErrConsumersConnected, n)
	}
	if j.dryRun {
		return nil
	}
	s := j.s
	pos := make(map[int32]engine.Position, len(s.parts))
	for i, p := range s.parts {
		tr, err := tracker.New[engine.Record](s.cfg.Tracker, j.next[i])
		if err != nil {
			return err
		}
		p.tr, p.fetchAt, p.skip, p.skipAt = tr, j.next[i], nil, 0
		p.dropAhead()
		p.wire, p.history = nil, nil
		pos[p.num] = engine.Position{Next: j.next[i]}
	}
	// Dead letters of the old trackers waiting their turn are forgotten
	// with them (the reset decides where the group resumes).
	kept := m.dlWait[:0]
	for _, w := range m.dlWait {
		if w.s != s {
			kept = append(kept, w)
		}
	}
	clear(m.dlWait[len(kept):])
	m.dlWait = kept
	// Written by the committer after any commit of the old positions it
	// has (one at a time, in order), so none lands after it.
	s.committing = true
	m.emit(action{kind: actCommit, s: s, pos: pos, reset: j})
	return nil
}
