package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/deliver"
	"github.com/spoolmq/spool/sidecar/dlq"
)

// DefaultTailPoll is how often Tail looks at the group's progress, and
// reads the partitions again even without a change notification (in a
// cluster, appends to partitions led by other nodes are not notified here).
const DefaultTailPoll = 200 * time.Millisecond

// tailFetchBytes bounds one read of one partition by Tail: what a tail
// holds at a time, whatever the backlog (gRPC flow control paces the rest).
const tailFetchBytes = 256 << 10

// Tail streams the records appended to a topic from a starting point on,
// until the caller goes away. With a group, it also streams the group's
// progress on each partition followed (committed offset, end, lag, in
// flight) whenever it changes, the group's dead letters of the topic as
// they are written, and each step of this sidecar's deliveries of the
// topic to its app (handed to a consumer, acked, retried, dead-lettered,
// released) as it happens — a stream that falls MaxTraceBacklog steps
// behind loses steps, never slows the delivery loop.
func (a *admin) Tail(req *spoolv1.TailRequest, stream spoolv1.AdminService_TailServer) error {
	ctx := stream.Context()
	topic := req.GetTopic()
	parts, pos, err := a.tailStarts(req)
	if err != nil {
		return err
	}
	watched := []string{topic}
	var g *deliver.Group
	var dlqTopic string
	dlqPos := map[int32]int64{}
	if group := req.GetGroup(); group != "" {
		sc, ok := a.cfg.Subscription(topic, group)
		if !ok {
			return apierr.ToStatus(unknownSubscription(topic, group))
		}
		for _, x := range a.groups {
			if x.Name() == group {
				g = x
			}
		}
		dlqTopic = sc.DLQTopic()
		dn, err := a.eng.Partitions(dlqTopic)
		if err != nil {
			return apierr.ToStatus(fmt.Errorf("tail %s: dead letters of %s: %w", topic, group, err))
		}
		for p := range dn {
			if _, dlqPos[p], err = a.eng.Offsets(dlqTopic, p); err != nil {
				return apierr.ToStatus(fmt.Errorf("tail %s: dead letters of %s: %w", topic, group, err))
			}
		}
		watched = append(watched, dlqTopic)
	}
	var steps <-chan *spoolv1.TailDelivery
	if g != nil {
		tr, err := g.TraceDeliveries(ctx, topic)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return apierr.ToStatus(apierr.Wrap(apierr.ShuttingDown, err, "tail %s: group %q is not running (spoold is shutting down): retry against the restarted sidecar", topic, g.Name()))
		}
		defer tr.Stop()
		steps = tr.C
	}
	changed := make(chan struct{}, 1)
	unwatch, err := a.eng.Watch(watched, changed)
	if err != nil {
		return apierr.ToStatus(fmt.Errorf("tail %s: %w", topic, err))
	}
	defer unwatch()
	tick := time.NewTicker(a.tailPoll)
	defer tick.Stop()
	followed := map[int32]bool{}
	for _, p := range parts {
		followed[p] = true
	}
	last := map[int32]*spoolv1.PartitionLag{}
	for {
		for _, p := range parts {
			if err := a.tailPartition(topic, p, pos, func(r *engine.Record) error {
				return stream.Send(&spoolv1.TailResponse{Event: &spoolv1.TailResponse_Record{Record: tailRecord(p, r)}})
			}); err != nil {
				return err
			}
		}
		for p := range dlqPos {
			if err := a.tailPartition(dlqTopic, p, dlqPos, func(r *engine.Record) error {
				dl := dlq.Decode(r, p)
				m := dl.GetMessage()
				if m.GetGroup() != req.GetGroup() || m.GetTopic() != topic || !followed[m.GetPartition()] {
					return nil
				}
				return stream.Send(&spoolv1.TailResponse{Event: &spoolv1.TailResponse_DeadLetter{DeadLetter: dl}})
			}); err != nil {
				return err
			}
		}
		if g != nil {
			if done, err := tailProgress(ctx, stream, g, topic, followed, last); done || err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		case st := <-steps:
			// This sidecar's deliveries of the group, as they happen.
			for st != nil {
				if followed[st.GetPartition()] {
					if err := stream.Send(&spoolv1.TailResponse{Event: &spoolv1.TailResponse_Delivery{Delivery: st}}); err != nil {
						return err
					}
				}
				select {
				case st = <-steps:
				default:
					st = nil
				}
			}
		}
	}
}

// tailStarts resolves the partitions a Tail follows (all when it names
// none) and the offset each starts from; errors are gRPC statuses.
func (a *admin) tailStarts(req *spoolv1.TailRequest) ([]int32, map[int32]int64, error) {
	topic := req.GetTopic()
	n, err := a.eng.Partitions(topic)
	if err != nil {
		return nil, nil, apierr.ToStatus(fmt.Errorf("tail %s: %w", topic, err))
	}
	parts := req.GetPartitions()
	if len(parts) == 0 {
		for p := range n {
			parts = append(parts, p)
		}
	}
	pos := map[int32]int64{}
	for _, p := range parts {
		if p < 0 || p >= n {
			return nil, nil, apierr.ToStatus(apierr.New(apierr.BadPartition, "tail %s: no partition %d (it has 0..%d)", topic, p, n-1))
		}
		start, end, err := a.eng.Offsets(topic, p)
		if err != nil {
			return nil, nil, apierr.ToStatus(fmt.Errorf("tail %s: %w", topic, err))
		}
		switch from := req.GetFrom().(type) {
		case *spoolv1.TailRequest_Earliest:
			pos[p] = start
		case *spoolv1.TailRequest_Offset:
			pos[p] = min(max(from.Offset, start), end)
		case *spoolv1.TailRequest_TimeMs:
			if pos[p], err = a.eng.OffsetForTime(topic, p, time.UnixMilli(from.TimeMs)); err != nil {
				return nil, nil, apierr.ToStatus(fmt.Errorf("tail %s: partition %d by time: %w", topic, p, err))
			}
		default:
			pos[p] = end
		}
	}
	return parts, pos, nil
}

// tailProgress sends the group's progress on each followed partition of
// topic that changed since last (and records it there). done: the tail
// ends (the stream's context ended, or the group stopped: err says so).
func tailProgress(ctx context.Context, stream spoolv1.AdminService_TailServer, g *deliver.Group, topic string, followed map[int32]bool, last map[int32]*spoolv1.PartitionLag) (done bool, err error) {
	snap, err := g.Snapshot(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return true, nil
		}
		return true, apierr.ToStatus(apierr.Wrap(apierr.ShuttingDown, err, "tail %s: group %q is not running (spoold is shutting down): retry against the restarted sidecar", topic, g.Name()))
	}
	for _, t := range snap.Topics {
		if t.Topic != topic {
			continue
		}
		for _, ps := range t.Partitions {
			if !followed[ps.Partition] {
				continue
			}
			pl := &spoolv1.PartitionLag{Partition: ps.Partition, CommittedOffset: ps.Committed, EndOffset: ps.End, LagMessages: ps.LagMessages, InFlight: uint32(ps.InFlight)}
			if old := last[ps.Partition]; old != nil && old.CommittedOffset == pl.CommittedOffset && old.EndOffset == pl.EndOffset && old.InFlight == pl.InFlight {
				continue
			}
			last[ps.Partition] = pl
			if err := stream.Send(&spoolv1.TailResponse{Event: &spoolv1.TailResponse_Progress{Progress: pl}}); err != nil {
				return true, err
			}
		}
	}
	return false, nil
}

// tailPartition sends the records of one partition from pos[p] to its
// committed end, and moves pos[p] past them.
func (a *admin) tailPartition(topic string, p int32, pos map[int32]int64, send func(*engine.Record) error) error {
	var buf []engine.Record
	for {
		recs, err := a.eng.Fetch(topic, p, pos[p], tailFetchBytes, buf[:0])
		var gone *engine.OffsetOutOfRangeError
		if errors.As(err, &gone) && pos[p] < gone.Start {
			pos[p] = gone.Start // retention removed them: go on from the new start
			continue
		}
		if err != nil {
			return apierr.ToStatus(fmt.Errorf("tail %s partition %d at offset %d: %w", topic, p, pos[p], err))
		}
		if len(recs) == 0 {
			return nil
		}
		for i := range recs {
			if err := send(&recs[i]); err != nil {
				return err
			}
			pos[p] = recs[i].Offset + 1
		}
		buf = recs
	}
}

func tailRecord(p int32, r *engine.Record) *spoolv1.TailRecord {
	return &spoolv1.TailRecord{Partition: p, Offset: r.Offset, Id: deliver.WireID(r.ID), Key: r.Key, Payload: r.Value,
		Headers: deliver.WireHeaders(r.Headers, nil), TimeMs: r.Timestamp}
}
