package deliver

import (
	"context"
	"time"

	"github.com/spoolmq/spool/engine"
)

// Snapshot is a group's progress, taken by its loop.
type Snapshot struct {
	// Consumers are this sidecar's apps connected to the group (readiness
	// asks for at least one).
	Consumers int
	Topics    []TopicSnapshot
}

// TopicSnapshot is a group's progress on one topic.
type TopicSnapshot struct {
	Topic string
	// Consumers are the group's apps that take the topic: in a cluster,
	// on every sidecar of the group, as the coordinator's last view sums
	// its members' counts (each member's as of its last heartbeat, which
	// a change of the count sends at once; the view is read every poll
	// interval); otherwise this sidecar's.
	Consumers  int
	Partitions []PartitionSnapshot
}

// PartitionSnapshot is a group's progress on one partition.
type PartitionSnapshot struct {
	Partition      int32
	Committed, End int64
	LagMessages    int64
	LagMs          int64
	InFlight       int
}

// Snapshot asks the loop for the group's progress.
func (g *Group) Snapshot(ctx context.Context) (Snapshot, error) {
	reply := make(chan Snapshot, 1)
	err := g.post(ctx, queryEvent{func(g *Group, now time.Time) {
		var s Snapshot
		s.Consumers = len(g.mc.consumers)
		for _, sb := range g.mc.subs {
			ts := TopicSnapshot{Topic: sb.cfg.Topic, Consumers: g.mc.consumersOf(sb)}
			if g.mc.cluster {
				ts.Consumers = sb.groupConsumers
			}
			for _, p := range sb.parts {
				pos := g.mc.lagPosition(p)
				_, end, _ := g.eng.Offsets(sb.cfg.Topic, p.num)
				lag := lagMessages(pos, end)
				ps := PartitionSnapshot{Partition: p.num, Committed: pos.Next, End: end, LagMessages: lag, InFlight: p.tr.InFlight()}
				if lag > 0 {
					if ts, err := g.eng.RecordTime(sb.cfg.Topic, p.num, pos.Next); err == nil {
						ps.LagMs = max(now.UnixMilli()-ts, 0)
					}
				}
				ts.Partitions = append(ts.Partitions, ps)
			}
			s.Topics = append(s.Topics, ts)
		}
		reply <- s
	}})
	if err != nil {
		return Snapshot{}, err
	}
	select {
	case s := <-reply:
		return s, nil
	case <-ctx.Done():
		return Snapshot{}, ctx.Err()
	}
}

// lagPosition is the position lag is measured from: the group's committed
// position as its coordinator holds it in a cluster (every member reports
// the same, whichever owns the partition), this sidecar's own otherwise.
func (m *machine) lagPosition(p *part) engine.Position {
	if m.cluster {
		return p.coordPos
	}
	return p.position()
}

// lagMessages counts the messages below end not finished at pos.
func lagMessages(pos engine.Position, end int64) int64 {
	done := 0
	for _, o := range pos.Done {
		if o < end {
			done++
		}
	}
	return max(end-pos.Next-int64(done), 0)
}
