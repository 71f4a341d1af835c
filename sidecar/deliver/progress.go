package deliver

import (
	"context"
	"time"
)

// The driver's side of progress (snapshot.go): the engine calls behind
// the lag gauges and admin snapshots, made off the loop.

// Snapshot returns the group's progress. The loop only copies its
// positions (snapshotEvent); the log's ends, which may take a round trip
// to a broker or a peer, are read here, on the caller's goroutine.
func (g *Group) Snapshot(ctx context.Context) (Snapshot, error) {
	reply := make(chan snapshotState, 1)
	if err := g.post(ctx, snapshotEvent{reply}); err != nil {
		return Snapshot{}, err
	}
	var st snapshotState
	select {
	case st = <-reply:
	case <-ctx.Done():
		return Snapshot{}, ctx.Err()
	}
	s := Snapshot{Consumers: st.consumers}
	for _, pp := range st.parts {
		if n := len(s.Topics); n == 0 || s.Topics[n-1].Topic != pp.topic {
			s.Topics = append(s.Topics, TopicSnapshot{Topic: pp.topic, Consumers: st.topicConsumers[pp.topic]})
		}
		ts := &s.Topics[len(s.Topics)-1]
		end, lag, lagMs, _ := g.partLag(pp)
		ts.Partitions = append(ts.Partitions, PartitionSnapshot{Partition: pp.num, Committed: pp.pos.Next, End: end,
			LagMessages: lag, LagMs: max(lagMs, 0), InFlight: pp.inFlight})
	}
	return s, nil
}

// snapshotState is what the loop hands a snapshot: its consumers and
// every partition's position.
type snapshotState struct {
	consumers int
	// topicConsumers are the apps taking each topic: this sidecar's, or
	// on a cluster the group's on every sidecar (as its coordinator
	// last reported them).
	topicConsumers map[string]int
	parts          []partProgress
}

type snapshotEvent struct{ reply chan<- snapshotState }

func (e snapshotEvent) apply(g *Group, _ time.Time) {
	tc := make(map[string]int, len(g.mc.subs))
	for _, sb := range g.mc.subs {
		tc[sb.cfg.Topic] = g.mc.consumersOf(sb)
		if g.mc.cluster {
			tc[sb.cfg.Topic] = sb.groupConsumers
		}
	}
	e.reply <- snapshotState{consumers: len(g.mc.consumers), topicConsumers: tc, parts: g.mc.progress(nil)}
}

// partLag reads the partition's end and measures its lag from pp's
// position: in messages (appended, not finished) and in milliseconds (age
// of the oldest unfinished message, from its append time alone). ok is
// false when the end could not be read (end and lag are then 0).
func (g *Group) partLag(pp partProgress) (end, lag, lagMs int64, ok bool) {
	_, end, err := g.eng.Offsets(pp.topic, pp.num)
	if err != nil {
		return 0, 0, 0, false
	}
	lag = lagMessages(pp.pos, end)
	if lag > 0 {
		if ts, err := g.eng.RecordTime(pp.topic, pp.num, pp.pos.Next); err == nil {
			lagMs = max(time.Now().UnixMilli()-ts, 0)
		} else {
			lagMs = -1 // unknown: the gauge keeps its value
		}
	}
	return end, lag, lagMs, true
}

// runLagProber sets the lag gauges off the loop: for each round the
// machine hands it (actGauges), it reads every partition's end and tells
// the loop it is done (machine.lagged). It returns when stop is closed
// (after the round under way).
func (g *Group) runLagProber(rounds *mailbox[[]partProgress], stop <-chan struct{}) {
	var batch [][]partProgress
	for {
		select {
		case <-rounds.signal:
		case <-stop:
			return
		}
		batch = rounds.take(batch[:0])
		for _, round := range batch {
			for _, pp := range round {
				_, lag, lagMs, ok := g.partLag(pp)
				if !ok {
					continue
				}
				pm := pp.metrics
				pm.lagMsgs[pp.num].Set(float64(lag))
				if lagMs >= 0 {
					pm.lagSecs[pp.num].Set(float64(lagMs) / 1000)
				}
			}
		}
		clear(batch)
		g.results.put(result{lagged: true})
	}
}

// refreshGauges sets the gauges of the group's in-memory state: in-flight,
// parked and window per topic, and the consumers (actGauges, on the loop).
func (g *Group) refreshGauges() {
	for _, s := range g.mc.subs {
		inflight, parked, window, scheduled := 0, 0, 0, 0
		for _, p := range s.parts {
			inflight += p.tr.InFlight()
			parked += p.tr.Parked()
			window += p.tr.Pending() + p.tr.InFlight()
			scheduled += p.tr.Scheduled()
		}
		s.metrics.inFlight.Set(float64(inflight))
		s.metrics.parked.Set(float64(parked))
		s.metrics.window.Set(float64(window))
		s.metrics.scheduled.Set(float64(scheduled))
	}
	g.met.Consumers.WithLabelValues(g.cfg.Name).Set(float64(len(g.mc.consumers)))
}
