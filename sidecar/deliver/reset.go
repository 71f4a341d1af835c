package deliver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spoolmq/spool/engine"
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
	s := g.mc.byTop[topic] // fixed after NewGroup
	if s == nil {
		return nil, fmt.Errorf("group %q does not subscribe to topic %q", g.cfg.Name, topic)
	}
	// The targets are read here, off the loop: the log's range of each
	// partition may be a round trip to a broker or a peer.
	out, next, err := g.resetTargets(topic, int32(len(s.parts)), target)
	if err != nil {
		return nil, err
	}
	j := &resetJob{s: s, next: next, dryRun: dryRun, done: make(chan error, 1)}
	if err := g.post(ctx, resetEvent{j}); err != nil {
		return nil, err
	}
	select {
	case err = <-j.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-g.stopped:
		return nil, errStopped
	}
	if err != nil {
		return nil, err
	}
	if !dryRun {
		g.log.Info("offsets reset", "topic", topic, "positions", out)
	}
	return out, nil
}

// resetTargets reads each partition's stored range and asks target where
// the partition resumes (clamped to the range).
func (g *Group) resetTargets(topic string, parts int32, target func(p int32, start, end int64) (int64, error)) ([]PartitionSnapshot, []int64, error) {
	out := make([]PartitionSnapshot, 0, parts)
	next := make([]int64, parts)
	for p := range parts {
		start, end, err := g.eng.Offsets(topic, p)
		if err != nil {
			return nil, nil, err
		}
		off, err := target(p, start, end)
		if err != nil {
			return nil, nil, err
		}
		next[p] = min(max(off, start), end)
		out = append(out, PartitionSnapshot{Partition: p, Committed: next[p], End: end, LagMessages: end - next[p]})
	}
	return out, next, nil
}

// resetJob is an offset reset handed to the loop (resetEvent): the
// machine refuses it (consumers connected) or applies it and commits the
// new positions (an actCommit carrying the job); done gets the answer.
type resetJob struct {
	s      *sub
	next   []int64 // per partition
	dryRun bool
	done   chan error // buffered: the loop never waits on it
}

type resetEvent struct{ j *resetJob }

func (e resetEvent) apply(g *Group, _ time.Time) {
	if err := g.mc.reset(e.j); err != nil || e.j.dryRun {
		e.j.done <- err
	} // else answered when its commit is written
}

// resetCluster resets the group's positions on topic through the
// cluster's coordinator (docs/groups.md, "Offset reset"): the targets are
// taken from every partition's stored range, then set in one ResetPositions
// command. The coordinator refuses it while a member owns a partition of
// the topic; the members that start the partitions afterwards start from
// the new positions.
func (g *Group) resetCluster(ctx context.Context, topic string, target func(p int32, start, end int64) (int64, error), dryRun bool) ([]PartitionSnapshot, error) {
	s := g.mc.byTop[topic] // fixed after NewGroup
	if s == nil {
		return nil, fmt.Errorf("group %q does not subscribe to topic %q", g.cfg.Name, topic)
	}
	out, next, err := g.resetTargets(topic, int32(len(s.parts)), target)
	if err != nil {
		return nil, err
	}
	if dryRun {
		return out, nil
	}
	cmd := &engine.GroupReset{Topic: topic}
	for p, n := range next {
		cmd.Next = append(cmd.Next, engine.GroupPartitionNext{Partition: int32(p), Next: n})
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
