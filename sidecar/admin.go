package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/deliver"
	"github.com/spoolmq/spool/sidecar/dlq"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// admin implements spoolv1.AdminService for one node. Every error it
// returns goes through apierr.ToStatus: engine errors keep their reasons
// (a topic deleted meanwhile is UNKNOWN_TOPIC, a closing node
// SHUTTING_DOWN), only what nothing explains is INTERNAL.
type admin struct {
	spoolv1.UnimplementedAdminServiceServer
	cfg    *config.Config
	eng    *engine.Node
	groups []*deliver.Group
	ledger ledger.Ledger // nil without one
	m      *metrics.Metrics
}

func newAdmin(cfg *config.Config, eng *engine.Node, groups []*deliver.Group, l ledger.Ledger, m *metrics.Metrics) *admin {
	return &admin{cfg: cfg, eng: eng, groups: groups, ledger: l, m: m}
}

func (a *admin) ListTopics(context.Context, *spoolv1.ListTopicsRequest) (*spoolv1.ListTopicsResponse, error) {
	resp := &spoolv1.ListTopicsResponse{}
	// In a cluster, a partition's leader is the node id raft names (known
	// for the partitions this node holds a replica of; empty otherwise).
	cs, clustered := a.eng.ClusterStatus()
	leaders := map[string]string{}
	for _, r := range cs.Replicas {
		if r.Leader != 0 {
			leaders[r.Topic+"/"+strconv.Itoa(int(r.Partition))] = strconv.FormatUint(r.Leader, 10)
		}
	}
	for _, t := range a.eng.Topics() {
		ti := &spoolv1.TopicInfo{Name: t.Name, RetentionMs: t.RetentionAge.Milliseconds(), RetentionBytes: t.RetentionBytes}
		for p := range t.Partitions {
			start, end, err := a.eng.Offsets(t.Name, p)
			if err != nil {
				return nil, apierr.ToStatus(fmt.Errorf("list topics: %s/%d: %w", t.Name, p, err))
			}
			leader := a.cfg.Node.ID
			if clustered {
				leader = leaders[t.Name+"/"+strconv.Itoa(int(p))]
			}
			ti.Partitions = append(ti.Partitions, &spoolv1.PartitionInfo{Partition: p, StartOffset: start, EndOffset: end, Leader: leader})
		}
		resp.Topics = append(resp.Topics, ti)
	}
	return resp, nil
}

func (a *admin) ListGroups(ctx context.Context, req *spoolv1.ListGroupsRequest) (*spoolv1.ListGroupsResponse, error) {
	resp := &spoolv1.ListGroupsResponse{}
	found := false
	for _, g := range a.groups {
		if req.GetGroup() != "" && g.Name() != req.GetGroup() {
			continue
		}
		found = true
		snap, err := g.Snapshot(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, apierr.ToStatus(ctx.Err())
			}
			return nil, apierr.ToStatus(apierr.Wrap(apierr.ShuttingDown, err, "list groups: group %q is not running (spoold is shutting down): retry against the restarted sidecar", g.Name()))
		}
		for _, t := range snap.Topics {
			gi := &spoolv1.GroupInfo{Group: g.Name(), Topic: t.Topic, Consumers: uint32(snap.Consumers)}
			for _, p := range t.Partitions {
				gi.Partitions = append(gi.Partitions, &spoolv1.PartitionLag{
					Partition: p.Partition, CommittedOffset: p.Committed, EndOffset: p.End,
					LagMessages: p.LagMessages, LagMs: p.LagMs, InFlight: uint32(p.InFlight),
				})
			}
			resp.Groups = append(resp.Groups, gi)
		}
	}
	if !found && req.GetGroup() != "" {
		return nil, apierr.ToStatus(unknownGroup(req.GetGroup()))
	}
	return resp, nil
}

func (a *admin) ClusterStatus(context.Context, *spoolv1.ClusterStatusRequest) (*spoolv1.ClusterStatusResponse, error) {
	if cs, ok := a.eng.ClusterStatus(); ok {
		resp := &spoolv1.ClusterStatusResponse{ClusterId: cs.ClusterID, NodeId: strconv.FormatUint(cs.NodeID, 10), Version: Version}
		if cs.NodeID == 0 {
			resp.NodeId = "" // storage off: not a member
		}
		for _, m := range cs.Members {
			resp.Nodes = append(resp.Nodes, &spoolv1.NodeInfo{Id: strconv.FormatUint(m.ID, 10), Address: m.Addr, Alive: m.Connected})
		}
		return resp, nil
	}
	host, _ := os.Hostname()
	return &spoolv1.ClusterStatusResponse{
		ClusterId: "single-node",
		NodeId:    a.cfg.Node.ID,
		Version:   Version,
		Nodes:     []*spoolv1.NodeInfo{{Id: a.cfg.Node.ID, Address: host, Alive: true}},
	}, nil
}

// PeekDeadLetters reads a subscription's dead-letter topic.
func (a *admin) PeekDeadLetters(ctx context.Context, req *spoolv1.PeekDeadLettersRequest) (*spoolv1.PeekDeadLettersResponse, error) {
	sc, ok := a.cfg.Subscription(req.GetTopic(), req.GetGroup())
	if !ok {
		return nil, apierr.ToStatus(unknownSubscription(req.GetTopic(), req.GetGroup()))
	}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	entries, err := dlq.Peek(a.eng, req.GetGroup(), sc.DLQTopic(), req.GetFilter(), limit)
	if err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("peek dead letters of %s/%s in %s: %w", req.GetTopic(), req.GetGroup(), sc.DLQTopic(), err))
	}
	return &spoolv1.PeekDeadLettersResponse{Entries: entries}, nil
}

// Redrive moves dead letters of a subscription back to the group that
// dead-lettered them (see sidecar/dlq).
func (a *admin) Redrive(ctx context.Context, req *spoolv1.RedriveRequest) (*spoolv1.RedriveResponse, error) {
	sc, ok := a.cfg.Subscription(req.GetTopic(), req.GetGroup())
	if !ok {
		return nil, apierr.ToStatus(unknownSubscription(req.GetTopic(), req.GetGroup()))
	}
	g, t := req.GetGroup(), req.GetTopic()
	res, err := dlq.Redrive(ctx, a.eng, a.ledger, dlq.Request{
		Group: g, Topic: t, DLQTopic: sc.DLQTopic(), Filter: req.GetFilter(), DryRun: req.GetDryRun(), RatePerS: int(req.GetRatePerS()),
	}, dlq.Counters{
		Redriven: func(n int) { a.m.Redriven.WithLabelValues(g, t).Add(float64(n)) },
		Skipped:  func(reason string, n int) { a.m.RedriveSkipped.WithLabelValues(g, t, reason).Add(float64(n)) },
	})
	resp := &spoolv1.RedriveResponse{Matched: res.Matched, Redriven: res.Redriven, Sample: res.Sample, AlreadyDone: res.AlreadyDone}
	if err != nil {
		// The cause decides the code (Redis down, disk full, caller gone);
		// the message says how far the redrive got. Running it again is
		// safe: redriven messages are skipped as already done.
		return nil, apierr.ToStatus(fmt.Errorf("redrive %s/%s (redriven so far: %d of %d; running it again continues): %w", t, g, res.Redriven, res.Matched, err))
	}
	return resp, nil
}

// ResetOffsets moves a group's committed offsets on a topic: to the log
// start (replay what is retained), the log end (skip the backlog) or the
// first offset at or after a time.
func (a *admin) ResetOffsets(ctx context.Context, req *spoolv1.ResetOffsetsRequest) (*spoolv1.ResetOffsetsResponse, error) {
	var g *deliver.Group
	for _, x := range a.groups {
		if x.Name() == req.GetGroup() {
			g = x
		}
	}
	if g == nil {
		return nil, apierr.ToStatus(unknownGroup(req.GetGroup()))
	}
	if _, ok := a.cfg.Subscription(req.GetTopic(), req.GetGroup()); !ok {
		return nil, apierr.ToStatus(unknownSubscription(req.GetTopic(), req.GetGroup()))
	}
	var target func(p int32, start, end int64) (int64, error)
	switch to := req.GetTo().(type) {
	case *spoolv1.ResetOffsetsRequest_Earliest:
		target = func(_ int32, start, _ int64) (int64, error) { return start, nil }
	case *spoolv1.ResetOffsetsRequest_Latest:
		target = func(_ int32, _, end int64) (int64, error) { return end, nil }
	case *spoolv1.ResetOffsetsRequest_TimeMs:
		ts := time.UnixMilli(to.TimeMs)
		target = func(p int32, _, _ int64) (int64, error) { return a.eng.OffsetForTime(req.GetTopic(), p, ts) }
	default:
		return nil, apierr.ToStatus(apierr.New(apierr.ResetTargetRequired, "reset offsets: say where to: earliest, latest or time_ms"))
	}
	parts, err := g.ResetOffsets(ctx, req.GetTopic(), target, req.GetDryRun())
	switch {
	case errors.Is(err, deliver.ErrConsumersConnected):
		return nil, apierr.ToStatus(apierr.Wrap(apierr.ConsumersConnected, err, "reset offsets of group %q", req.GetGroup()))
	case err != nil:
		return nil, apierr.ToStatus(fmt.Errorf("reset offsets of group %q on topic %q: %w", req.GetGroup(), req.GetTopic(), err))
	}
	resp := &spoolv1.ResetOffsetsResponse{}
	for _, p := range parts {
		resp.Partitions = append(resp.Partitions, &spoolv1.PartitionLag{Partition: p.Partition, CommittedOffset: p.Committed, EndOffset: p.End, LagMessages: p.LagMessages})
	}
	return resp, nil
}

func unknownGroup(group string) error {
	return apierr.New(apierr.UnknownGroup, "no group %q: groups come from the subscriptions in spoold's config; check the name or declare a subscription with this group", group)
}

func unknownSubscription(topic, group string) error {
	return apierr.New(apierr.UnknownSubscription, "no subscription %s/%s: check topic and group against spoold's subscriptions, or declare {topic: %s, group: %s}", topic, group, topic, group)
}
