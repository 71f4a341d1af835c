package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

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
	eng    engine.Backend
	groups []*deliver.Group
	ledger ledger.Ledger // nil without one
	m      *metrics.Metrics
	// catalog keeps the topics CreateTopic made (on a single node); its
	// mutex serializes topic changes.
	catalog *topicCatalog
	purgeMu sync.Mutex // serializes PurgeDeadLetters (read, then move the mark)
	// tailPoll is how often Tail looks for the group's progress and, in a
	// cluster, for appends to partitions led elsewhere.
	tailPoll time.Duration
	sched    *scheduledServer // nil on a broker backend
}

func newAdmin(cfg *config.Config, eng engine.Backend, groups []*deliver.Group, l ledger.Ledger, m *metrics.Metrics) *admin {
	return &admin{cfg: cfg, eng: eng, groups: groups, ledger: l, m: m, catalog: &topicCatalog{}, tailPoll: DefaultTailPoll}
}

// withScheduled sets what ListScheduled reads with (nil: refused).
func (a *admin) withScheduled(s *scheduledServer) *admin {
	a.sched = s
	return a
}

// ListScheduled lists a topic's scheduled messages not yet due
// (sidecar/scheduled).
func (a *admin) ListScheduled(ctx context.Context, req *spoolv1.ListScheduledRequest) (*spoolv1.ListScheduledResponse, error) {
	if a.sched == nil {
		return nil, apierr.ToStatus(apierr.New(apierr.BackendUnsupported, "list scheduled: the %s backend offers no scheduled delivery", a.cfg.Storage.Backend))
	}
	resp, err := a.sched.List(ctx, req)
	if err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("list scheduled of topic %q: %w", req.GetTopic(), err))
	}
	return resp, nil
}

func (a *admin) ListTopics(context.Context, *spoolv1.ListTopicsRequest) (*spoolv1.ListTopicsResponse, error) {
	resp := &spoolv1.ListTopicsResponse{}
	cs, clustered := clusterStatus(a.eng)
	for _, t := range a.eng.Topics() {
		ti, err := a.topicInfoIn(t, cs, clustered)
		if err != nil {
			return nil, apierr.ToStatus(fmt.Errorf("list topics: %w", err))
		}
		resp.Topics = append(resp.Topics, ti)
	}
	return resp, nil
}

// topicInfo describes a topic: its settings and each partition's offsets,
// leader and replicas. In a cluster, leader and replicas are the node ids
// raft names, known for the partitions this node holds a replica of
// (empty otherwise).
func (a *admin) topicInfo(t engine.TopicSpec) (*spoolv1.TopicInfo, error) {
	cs, clustered := clusterStatus(a.eng)
	return a.topicInfoIn(t, cs, clustered)
}

// topicInfoIn is topicInfo with the cluster status taken once for many
// topics.
func (a *admin) topicInfoIn(t engine.TopicSpec, cs engine.ClusterStatus, clustered bool) (*spoolv1.TopicInfo, error) {
	ti := &spoolv1.TopicInfo{Name: t.Name, RetentionMs: t.RetentionAge.Milliseconds(), RetentionBytes: t.RetentionBytes}
	for p := range t.Partitions {
		start, end, err := a.eng.Offsets(t.Name, p)
		if err != nil {
			return nil, fmt.Errorf("%s/%d: %w", t.Name, p, err)
		}
		pi := &spoolv1.PartitionInfo{Partition: p, StartOffset: start, EndOffset: end, Leader: a.cfg.Node.ID, Replicas: []string{a.cfg.Node.ID}}
		if clustered {
			pi.Leader, pi.Replicas = "", nil
			for _, r := range cs.Replicas {
				if r.Topic == t.Name && r.Partition == p {
					if r.Leader != 0 {
						pi.Leader = strconv.FormatUint(r.Leader, 10)
					}
					for _, id := range r.Replicas {
						pi.Replicas = append(pi.Replicas, strconv.FormatUint(id, 10))
					}
					for _, id := range r.Target {
						pi.Target = append(pi.Target, strconv.FormatUint(id, 10))
					}
				}
			}
		}
		ti.Partitions = append(ti.Partitions, pi)
	}
	return ti, nil
}

// topicSpec is the engine's spec of a topic this node has.
func (a *admin) topicSpec(name string) (engine.TopicSpec, bool) {
	for _, t := range a.eng.Topics() {
		if t.Name == name {
			return t, true
		}
	}
	return engine.TopicSpec{}, false
}

// CreateTopic creates a topic through the engine (in a cluster, a proposal
// to the controller), and on a single node records it in the catalogue so
// that the next start opens it again. Creating an existing topic with the
// same settings succeeds; with other settings it is TOPIC_EXISTS.
func (a *admin) CreateTopic(ctx context.Context, req *spoolv1.CreateTopicRequest) (*spoolv1.CreateTopicResponse, error) {
	if err := checkTopicSpec(req.GetName(), req.GetPartitions(), req.GetRetentionMs(), req.GetRetentionBytes()); err != nil {
		return nil, apierr.ToStatus(err)
	}
	ct := createdTopic{Name: req.GetName(), Partitions: req.GetPartitions(), RetentionMs: req.GetRetentionMs(), RetentionBytes: req.GetRetentionBytes()}
	spec := ct.spec()
	a.catalog.mu.Lock()
	defer a.catalog.mu.Unlock()
	if cur, ok := a.topicSpec(spec.Name); ok {
		if cur != spec {
			return nil, apierr.ToStatus(apierr.New(apierr.TopicExists, "topic %s exists with other settings (%d partitions, retention %s, %s per partition): change its retention with AlterTopic (spool topic alter); partition counts do not change",
				spec.Name, cur.Partitions, ageOrForever(cur.RetentionAge), bytesOrUnlimited(cur.RetentionBytes)))
		}
	} else if err := a.eng.EnsureTopic(spec); err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("create topic %s: %w", spec.Name, err))
	}
	if !declaredTopic(a.cfg, spec.Name) {
		if err := a.catalog.put(ct); err != nil {
			return nil, apierr.ToStatus(fmt.Errorf("create topic %s: it exists now, but recording it for the next start failed (it will not be reopened then): %w", spec.Name, err))
		}
	}
	ti, err := a.topicInfo(spec)
	if err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("create topic %s: %w", spec.Name, err))
	}
	return &spoolv1.CreateTopicResponse{Topic: ti}, nil
}

// AlterTopic changes the retention of a topic that the config does not
// declare.
func (a *admin) AlterTopic(ctx context.Context, req *spoolv1.AlterTopicRequest) (*spoolv1.AlterTopicResponse, error) {
	a.catalog.mu.Lock()
	defer a.catalog.mu.Unlock()
	cur, ok := a.topicSpec(req.GetName())
	if !ok {
		return nil, apierr.ToStatus(unknownTopic(req.GetName()))
	}
	if declaredTopic(a.cfg, cur.Name) {
		return nil, apierr.ToStatus(apierr.New(apierr.TopicDeclared, "topic %s is declared in spoold's config (or is a subscription's dead-letter topic), which would undo the change at the next start: change it there and restart spoold", cur.Name))
	}
	ct := createdTopic{Name: cur.Name, Partitions: cur.Partitions, RetentionMs: cur.RetentionAge.Milliseconds(), RetentionBytes: cur.RetentionBytes}
	if req.RetentionMs != nil {
		ct.RetentionMs = req.GetRetentionMs()
	}
	if req.RetentionBytes != nil {
		ct.RetentionBytes = req.GetRetentionBytes()
	}
	if err := checkTopicSpec(ct.Name, ct.Partitions, ct.RetentionMs, ct.RetentionBytes); err != nil {
		return nil, apierr.ToStatus(err)
	}
	if err := a.eng.EnsureTopic(ct.spec()); err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("alter topic %s: %w", ct.Name, err))
	}
	if err := a.catalog.put(ct); err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("alter topic %s: changed now, but recording it for the next start failed (the old retention returns then): %w", ct.Name, err))
	}
	ti, err := a.topicInfo(ct.spec())
	if err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("alter topic %s: %w", ct.Name, err))
	}
	return &spoolv1.AlterTopicResponse{Topic: ti}, nil
}

// DeleteTopic deletes a topic created through spool that no subscription
// uses: its partitions' data and every group's positions on it, then its
// catalogue entry (a crash between the two brings the topic back empty at
// the next start; deleting it again finishes). Refused, saying why, when a
// subscription of this sidecar uses it or its config declares it. In a
// cluster the engine deletes it on every node, refused while a member of
// any consumer group subscribes to it (TOPIC_IN_USE); the catalogue is
// the controller's (nothing kept here).
func (a *admin) DeleteTopic(ctx context.Context, req *spoolv1.DeleteTopicRequest) (*spoolv1.DeleteTopicResponse, error) {
	name := req.GetName()
	if _, ok := a.topicSpec(name); !ok {
		return nil, apierr.ToStatus(unknownTopic(name))
	}
	if users := usersOf(a.cfg, name); len(users) > 0 {
		return nil, apierr.ToStatus(apierr.New(apierr.TopicInUse, "topic %s is used by the subscriptions %s: remove them from spoold's config first", name, strings.Join(users, ", ")))
	}
	if declaredTopic(a.cfg, name) {
		return nil, apierr.ToStatus(apierr.New(apierr.TopicDeclared, "topic %s is declared in spoold's config, which would create it again at the next start: remove it there first", name))
	}
	a.catalog.mu.Lock()
	defer a.catalog.mu.Unlock()
	if err := a.eng.DeleteTopic(name); err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("delete topic %s: %w", name, err))
	}
	if err := a.catalog.remove(name); err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("delete topic %s: its data is deleted, but removing it from the topics created through spool failed (it comes back empty at the next start; delete it again then): %w", name, err))
	}
	return &spoolv1.DeleteTopicResponse{}, nil
}

func (a *admin) ListGroups(ctx context.Context, req *spoolv1.ListGroupsRequest) (*spoolv1.ListGroupsResponse, error) {
	resp := &spoolv1.ListGroupsResponse{}
	found := false
	// The parked keys and breaker states come from the delivery loops'
	// gauges, gathered once for every group listed.
	mfs, _ := a.m.Registry.Gather() // what was gathered is used even if some collector failed
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
			gi := &spoolv1.GroupInfo{Group: g.Name(), Topic: t.Topic, Consumers: uint32(t.Consumers)}
			addBreakersAndParked(gi, mfs)
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
	if cs, ok := clusterStatus(a.eng); ok {
		resp := &spoolv1.ClusterStatusResponse{ClusterId: cs.ClusterID, NodeId: strconv.FormatUint(cs.NodeID, 10), Version: Version}
		if cs.NodeID == 0 {
			resp.NodeId = "" // storage off: not a member
		}
		for _, m := range cs.Members {
			resp.Nodes = append(resp.Nodes, &spoolv1.NodeInfo{Id: strconv.FormatUint(m.ID, 10), Address: m.Addr, Alive: m.Connected, Down: m.Down, Leaving: m.Leaving,
				ReleaseVersion: m.Release, ClusterVersionMin: m.ClusterVersionMin, ClusterVersionMax: m.ClusterVersionMax})
		}
		resp.PartitionsMoving, resp.PartitionsUnderReplicated = int32(cs.PartitionsMoving), int32(cs.UnderReplicated)
		resp.ClusterVersion, resp.ClusterVersionAvailable = cs.ClusterVersion, cs.ClusterVersionAvailable
		return resp, nil
	}
	host, _ := os.Hostname()
	id := "single-node"
	if a.cfg.Storage.Broker() {
		id = a.cfg.Storage.Backend // the broker's servers are the broker's to report
	}
	return &spoolv1.ClusterStatusResponse{
		ClusterId: id,
		NodeId:    a.cfg.Node.ID,
		Version:   Version,
		Nodes:     []*spoolv1.NodeInfo{{Id: a.cfg.Node.ID, Address: host, Alive: true}},
	}, nil
}

// FinalizeClusterVersion raises the cluster version to the highest every
// node speaks (docs/upgrading.md).
func (a *admin) FinalizeClusterVersion(ctx context.Context, _ *spoolv1.FinalizeClusterVersionRequest) (*spoolv1.FinalizeClusterVersionResponse, error) {
	cl, err := a.clusterAdmin("finalize the cluster version")
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	ch, err := cl.FinalizeClusterVersion(ctx)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	return &spoolv1.FinalizeClusterVersionResponse{PreviousVersion: ch.Previous, ClusterVersion: ch.Version}, nil
}

// DecommissionNode asks the cluster to take a node out (its replicas move
// away first).
func (a *admin) DecommissionNode(ctx context.Context, req *spoolv1.DecommissionNodeRequest) (*spoolv1.DecommissionNodeResponse, error) {
	id, err := strconv.ParseUint(req.GetNodeId(), 10, 64)
	if err != nil || id == 0 {
		return nil, apierr.ToStatus(apierr.New(apierr.InvalidRequest, "node id %q: want a node id as spool cluster status lists it (1, 2, ...)", req.GetNodeId()))
	}
	cl, err := a.clusterAdmin("decommission node " + req.GetNodeId())
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	if err := cl.DecommissionNode(ctx, id); err != nil {
		return nil, apierr.ToStatus(err)
	}
	return &spoolv1.DecommissionNodeResponse{}, nil
}

// MoveReplicas moves a partition's replicas to the nodes named (an
// operator's move), or with dry_run says what it would do.
func (a *admin) MoveReplicas(ctx context.Context, req *spoolv1.MoveReplicasRequest) (*spoolv1.MoveReplicasResponse, error) {
	ids := make([]uint64, 0, len(req.GetReplicas()))
	for _, r := range req.GetReplicas() {
		id, err := strconv.ParseUint(r, 10, 64)
		if err != nil || id == 0 {
			return nil, apierr.ToStatus(apierr.New(apierr.InvalidReplicas, "node id %q: want node ids as spool cluster status lists them (1, 2, ...)", r))
		}
		ids = append(ids, id)
	}
	cl, err := a.clusterAdmin(fmt.Sprintf("move the replicas of %s/%d", req.GetTopic(), req.GetPartition()))
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	var mv engine.ReplicaMove
	if req.GetDryRun() {
		mv, err = cl.PlanMove(req.GetTopic(), req.GetPartition(), ids)
	} else {
		mv, err = cl.MoveReplicas(ctx, req.GetTopic(), req.GetPartition(), ids)
	}
	if err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("move the replicas of %s/%d: %w", req.GetTopic(), req.GetPartition(), err))
	}
	return &spoolv1.MoveReplicasResponse{From: nodeIDs(mv.From), To: nodeIDs(mv.To), PreviousTarget: nodeIDs(mv.PreviousTarget), Group: mv.Group, DryRun: req.GetDryRun()}, nil
}

func nodeIDs(ids []uint64) []string {
	var out []string
	for _, id := range ids {
		out = append(out, strconv.FormatUint(id, 10))
	}
	return out
}

// PeekDeadLetters reads a page of a subscription's dead-letter topic.
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
	page, err := dlq.Peek(a.eng, dlq.Query{Group: req.GetGroup(), DLQTopic: sc.DLQTopic(), Filter: req.GetFilter(), Cursor: req.GetCursor()}, limit)
	if err != nil {
		return nil, apierr.ToStatus(dlqErr(fmt.Sprintf("peek dead letters of %s/%s in %s", req.GetTopic(), req.GetGroup(), sc.DLQTopic()), err))
	}
	return &spoolv1.PeekDeadLettersResponse{Entries: page.Entries, NextCursor: page.NextCursor, Progress: page.Progress}, nil
}

// SummarizeDeadLetters counts a page of a subscription's dead letters.
func (a *admin) SummarizeDeadLetters(ctx context.Context, req *spoolv1.SummarizeDeadLettersRequest) (*spoolv1.SummarizeDeadLettersResponse, error) {
	sc, ok := a.cfg.Subscription(req.GetTopic(), req.GetGroup())
	if !ok {
		return nil, apierr.ToStatus(unknownSubscription(req.GetTopic(), req.GetGroup()))
	}
	resp, err := dlq.Summarize(a.eng, dlq.Query{Group: req.GetGroup(), DLQTopic: sc.DLQTopic(), Filter: req.GetFilter(), Cursor: req.GetCursor()}, int(req.GetTopKeys()))
	if err != nil {
		return nil, apierr.ToStatus(dlqErr(fmt.Sprintf("summarize dead letters of %s/%s in %s", req.GetTopic(), req.GetGroup(), sc.DLQTopic()), err))
	}
	return resp, nil
}

// PurgeDeadLetters moves a subscription's purge mark (see dlq.Purge).
func (a *admin) PurgeDeadLetters(ctx context.Context, req *spoolv1.PurgeDeadLettersRequest) (*spoolv1.PurgeDeadLettersResponse, error) {
	sc, ok := a.cfg.Subscription(req.GetTopic(), req.GetGroup())
	if !ok {
		return nil, apierr.ToStatus(unknownSubscription(req.GetTopic(), req.GetGroup()))
	}
	var before time.Time
	if req.GetBeforeTimeMs() > 0 {
		before = time.UnixMilli(req.GetBeforeTimeMs())
	}
	a.purgeMu.Lock()
	defer a.purgeMu.Unlock()
	resp, err := dlq.Purge(a.eng, req.GetGroup(), sc.DLQTopic(), before, req.GetDryRun())
	if err != nil {
		return nil, apierr.ToStatus(fmt.Errorf("purge dead letters of %s/%s in %s: %w", req.GetTopic(), req.GetGroup(), sc.DLQTopic(), err))
	}
	return resp, nil
}

// dlqErr names the operation; a bad cursor is the caller's INVALID_CURSOR.
func dlqErr(what string, err error) error {
	if errors.Is(err, dlq.ErrBadCursor) {
		return apierr.Wrap(apierr.InvalidCursor, err, "%s", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Redrive moves dead letters of a subscription back to the group that
// dead-lettered them (see sidecar/dlq): all of them in one call, or, with
// a limit, a page per call going on from the cursor.
func (a *admin) Redrive(ctx context.Context, req *spoolv1.RedriveRequest) (*spoolv1.RedriveResponse, error) {
	sc, ok := a.cfg.Subscription(req.GetTopic(), req.GetGroup())
	if !ok {
		return nil, apierr.ToStatus(unknownSubscription(req.GetTopic(), req.GetGroup()))
	}
	g, t := req.GetGroup(), req.GetTopic()
	res, err := dlq.Redrive(ctx, a.eng, a.ledger, dlq.Request{
		Group: g, Topic: t, DLQTopic: sc.DLQTopic(), Filter: req.GetFilter(), DryRun: req.GetDryRun(), RatePerS: int(req.GetRatePerS()),
		Cursor: req.GetCursor(), Limit: int(req.GetLimit()),
	}, dlq.Counters{
		Redriven: func(n int) { a.m.Redriven.WithLabelValues(g, t).Add(float64(n)) },
		Skipped:  func(reason string, n int) { a.m.RedriveSkipped.WithLabelValues(g, t, reason).Add(float64(n)) },
	})
	resp := &spoolv1.RedriveResponse{Matched: res.Matched, Redriven: res.Redriven, Sample: res.Sample, AlreadyDone: res.AlreadyDone, NextCursor: res.NextCursor, Progress: res.Progress}
	if err != nil {
		// The cause decides the code (Redis down, disk full, caller gone);
		// the message says how far the redrive got. Running it again is
		// safe: redriven messages are skipped as already done.
		return nil, apierr.ToStatus(dlqErr(fmt.Sprintf("redrive %s/%s (redriven so far: %d of %d; running it again continues)", t, g, res.Redriven, res.Matched), err))
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
	case *spoolv1.ResetOffsetsRequest_Offset:
		target = func(int32, int64, int64) (int64, error) { return to.Offset, nil }
	default:
		return nil, apierr.ToStatus(apierr.New(apierr.ResetTargetRequired, "reset offsets: say where to: earliest, latest, time_ms or offset"))
	}
	if len(req.GetPartitions()) > 0 {
		// The other partitions keep their committed offset (the reset
		// rebuilds every partition's tracker at its offset).
		n, err := a.eng.Partitions(req.GetTopic())
		if err != nil {
			return nil, apierr.ToStatus(fmt.Errorf("reset offsets of group %q on topic %q: %w", req.GetGroup(), req.GetTopic(), err))
		}
		only := map[int32]bool{}
		for _, p := range req.GetPartitions() {
			if p < 0 || p >= n {
				return nil, apierr.ToStatus(apierr.New(apierr.BadPartition, "reset offsets of group %q: topic %s has no partition %d (it has 0..%d)", req.GetGroup(), req.GetTopic(), p, n-1))
			}
			only[p] = true
		}
		committed, err := a.committed(ctx, g, req.GetTopic())
		if err != nil {
			return nil, err
		}
		chosen := target
		target = func(p int32, start, end int64) (int64, error) {
			if only[p] {
				return chosen(p, start, end)
			}
			return committed[p], nil
		}
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

// committed are a group's committed offsets on a topic, by partition.
func (a *admin) committed(ctx context.Context, g *deliver.Group, topic string) (map[int32]int64, error) {
	snap, err := g.Snapshot(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, apierr.ToStatus(ctx.Err())
		}
		return nil, apierr.ToStatus(apierr.Wrap(apierr.ShuttingDown, err, "group %q is not running (spoold is shutting down): retry against the restarted sidecar", g.Name()))
	}
	out := map[int32]int64{}
	for _, t := range snap.Topics {
		if t.Topic == topic {
			for _, p := range t.Partitions {
				out[p.Partition] = p.Committed
			}
		}
	}
	return out, nil
}

// addBreakersAndParked fills in the parked keys and breaker states of a
// subscription from the gauges the delivery loop keeps
// (spool_parked_keys, spool_breaker_state).
func addBreakersAndParked(gi *spoolv1.GroupInfo, mfs []*dto.MetricFamily) {
	for _, mf := range mfs {
		name := mf.GetName()
		if name != "spool_parked_keys" && name != "spool_breaker_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["group"] != gi.Group || labels["topic"] != gi.Topic {
				continue
			}
			v := m.GetGauge().GetValue()
			if name == "spool_parked_keys" {
				gi.ParkedKeys = uint32(v)
				continue
			}
			state := "closed"
			switch v {
			case 1:
				state = "half-open"
			case 2:
				state = "open"
			}
			gi.Breakers = append(gi.Breakers, &spoolv1.BreakerInfo{Downstream: labels["downstream"], State: state})
		}
	}
	slices.SortFunc(gi.Breakers, func(x, y *spoolv1.BreakerInfo) int { return strings.Compare(x.Downstream, y.Downstream) })
}

func ageOrForever(d time.Duration) string {
	if d <= 0 {
		return "forever"
	}
	return d.String()
}

func bytesOrUnlimited(n int64) string {
	if n <= 0 {
		return "unlimited bytes"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

func unknownTopic(topic string) error {
	return apierr.New(apierr.UnknownTopic, "no topic %q: `spool topic list` shows the topics; create it with `spool topic create` or declare it under topics in spoold's config", topic)
}

func unknownGroup(group string) error {
	return apierr.New(apierr.UnknownGroup, "no group %q: groups come from the subscriptions in spoold's config; check the name or declare a subscription with this group", group)
}

func unknownSubscription(topic, group string) error {
	return apierr.New(apierr.UnknownSubscription, "no subscription %s/%s: check topic and group against spoold's subscriptions, or declare {topic: %s, group: %s}", topic, group, topic, group)
}
