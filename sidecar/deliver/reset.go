package deliver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// ErrConsumersConnected: offsets of a group can only be moved while no
// consumer of it is connected (their deliveries would refer to the old
// positions).
var ErrConsumersConnected = errors.New("the group has connected consumers")

// ResetOffsets moves the group's position on topic to the offset target
// gives for each partition (clamped to the partition's stored range), and
// commits it at once. Nothing in flight may exist: it fails with
// ErrConsumersConnected while a consumer is connected. With dryRun it only
// reports the new positions.
//
// In a cluster the positions are the coordinator's: the reset is one
// command to it (resetCluster), refused while a member on any sidecar owns
// a partition of the topic — every sidecar whose app is connected does.
func (g *Group) ResetOffsets(ctx context.Context, topic string, target func(p int32, start, end int64) (int64, error), dryRun bool) ([]PartitionSnapshot, error) {
	if g.cfg.Coordinator != nil {
		return g.resetCluster(ctx, topic, target, dryRun)
	}
	type reply struct {
		out []PartitionSnapshot
		err error
	}
	ch := make(chan reply, 1)
	err := g.post(ctx, queryEvent{func(g *Group, now time.Time) {
		out, err := g.resetOffsets(now, topic, target, dryRun)
		ch <- reply{out, err}
	}})
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.out, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *Group) resetOffsets(now time.Time, topic string, target func(p int32, start, end int64) (int64, error), dryRun bool) ([]PartitionSnapshot, error) {
	s := g.mc.byTop[topic]
	if s == nil {
		return nil, fmt.Errorf("group %q does not subscribe to topic %q", g.cfg.Name, topic)
	}
	if n := len(g.mc.consumers); n > 0 {
		return nil, fmt.Errorf("%w (%d; callback subscriptions count as one): stop them, reset, start them again", ErrConsumersConnected, n)
	}
	out := make([]PartitionSnapshot, 0, len(s.parts))
	next := make([]int64, len(s.parts))
	for i, p := range s.parts {
		start, end, err := g.eng.Offsets(topic, p.num)
		if err != nil {
			return nil, err
		}
		off, err := target(p.num, start, end)
		if err != nil {
			return nil, err
		}
		next[i] = min(max(off, start), end)
		out = append(out, PartitionSnapshot{Partition: p.num, Committed: next[i], End: end, LagMessages: end - next[i]})
	}
	if dryRun {
		return out, nil
	}
	pos := make(map[int32]engine.Position, len(s.parts))
	for i, p := range s.parts {
		tr, err := tracker.New[engine.Record](s.cfg.Tracker, next[i])
		if err != nil {
			return nil, err
		}
		p.tr, p.fetchAt, p.skip, p.skipAt = tr, next[i], nil, 0
		p.dropAhead()
		p.wire, p.history = nil, nil
		pos[p.num] = engine.Position{Next: next[i]}
	}
	// Dead letters of the old trackers waiting their turn are forgotten
	// with them (the reset decides where the group resumes).
	kept := g.mc.dlWait[:0]
	for _, w := range g.mc.dlWait {
		if w.s != s {
			kept = append(kept, w)
		}
	}
	clear(g.mc.dlWait[len(kept):])
	g.mc.dlWait = kept
	if err := g.eng.CommitPositions(g.cfg.Name, topic, pos); err != nil {
		return nil, err
	}
	for _, p := range s.parts {
		p.committed = pos[p.num]
	}
	g.log.Info("offsets reset", "topic", topic, "positions", out)
	return out, nil
}

// resetCluster resets the group's positions on topic through the
// cluster's coordinator (docs/groups.md, "Offset reset"): the targets are
// taken from every partition's stored range, then set in one ResetPositions
// command. The coordinator refuses it while a member owns a partition of
// the topic; the members that start the partitions afterwards start from
// the new positions.
func (g *Group) resetCluster(ctx context.Context, topic string, target func(p int32, start, end int64) (int64, error), dryRun bool) ([]PartitionSnapshot, error) {
	type reply struct {
		parts int32
		err   error
	}
	ch := make(chan reply, 1)
	err := g.post(ctx, queryEvent{func(g *Group, _ time.Time) {
		s := g.mc.byTop[topic]
		if s == nil {
			ch <- reply{err: fmt.Errorf("group %q does not subscribe to topic %q", g.cfg.Name, topic)}
			return
		}
		ch <- reply{parts: int32(len(s.parts))}
	}})
	if err != nil {
		return nil, err
	}
	var r reply
	select {
	case r = <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, r.err
	}
	out := make([]PartitionSnapshot, 0, r.parts)
	cmd := &engine.GroupReset{Topic: topic}
	for p := range r.parts {
		start, end, err := g.eng.Offsets(topic, p)
		if err != nil {
			return nil, err
		}
		off, err := target(p, start, end)
		if err != nil {
			return nil, err
		}
		next := min(max(off, start), end)
		out = append(out, PartitionSnapshot{Partition: p, Committed: next, End: end, LagMessages: end - next})
		cmd.Next = append(cmd.Next, engine.GroupPartitionNext{Partition: p, Next: next})
	}
	if dryRun {
		return out, nil
	}
	c, cancel := context.WithTimeout(ctx, coordCallTimeout)
	defer cancel()
	_, err = g.cfg.Coordinator.Coordinate(c, engine.GroupCommand{Group: g.cfg.Name, Reset: cmd})
	switch {
	case errors.Is(err, engine.ErrGroupActive):
		return nil, fmt.Errorf("%w on some sidecar of the cluster: %w", ErrConsumersConnected, err)
	case err != nil:
		return nil, fmt.Errorf("the group's coordinator: %w", err)
	}
	g.log.Info("offsets reset through the group's coordinator", "topic", topic, "positions", out)
	return out, nil
}
