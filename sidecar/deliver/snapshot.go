package deliver

import (
	"slices"
	"time"

	"github.com/spoolmq/spool/engine"
)

// Progress: lag gauges and admin snapshots. Both need the log's end of
// every partition (and the append time of the oldest unfinished message),
// which on a broker backend or a cluster member is a round trip (two
// ListOffsets on Kafka; a NodeService.Fetch to a peer). The machine only
// says what each partition's position is; the engine is asked off the loop
// (progress.go: the lag prober for the gauges, the admin caller's own
// goroutine for a snapshot), so a slow answer never holds up deliveries
// and acks. A snapshot's positions are the loop's at the time it was
// asked; its ends are read just after.

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

// partProgress is one partition's progress as the loop knows it: what
// lag is measured from, copied so that another goroutine may read it, and
// the driver's metric handles of its topic (the lag prober sets its gauges).
type partProgress struct {
	topic    string
	num      int32
	pos      engine.Position
	inFlight int
	metrics  *subMetrics
}

// progress returns every partition's progress now, appended to dst.
func (m *machine) progress(dst []partProgress) []partProgress {
	for _, s := range m.subs {
		for _, p := range s.parts {
			pos := m.lagPosition(p)
			pos.Done = slices.Clone(pos.Done)
			dst = append(dst, partProgress{topic: s.cfg.Topic, num: p.num, pos: pos, inFlight: p.tr.InFlight(),
				metrics: s.metrics})
		}
	}
	return dst
}

// gaugesDue emits actGauges every lagInterval. It carries the partitions'
// progress for the lag prober unless the prober's last round has not
// answered yet (lagged): rounds never pile up behind a slow engine.
func (m *machine) gaugesDue(now time.Time) {
	if now.Before(m.nextLag) {
		return
	}
	m.nextLag = now.Add(lagInterval)
	a := action{kind: actGauges}
	if !m.lagging {
		m.lagging = true
		a.lag = m.progress(nil)
	}
	m.emit(a)
}

// lagged: the lag prober finished the round it was given.
func (m *machine) lagged() { m.lagging = false }

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
