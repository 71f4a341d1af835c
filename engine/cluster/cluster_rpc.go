package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/cluster/route"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	"github.com/spoolmq/spool/engine/transport"
	"github.com/spoolmq/spool/internal/backoff"
	"github.com/spoolmq/spool/proto/grpcbuf"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// produce appends recs to a partition of the cluster: proposed here when
// this node leads it, forwarded to its leader otherwise. done runs on
// another goroutine once the records are committed (a quorum has them on
// disk) — with AcksLeader, once they are on the leader's disk — or with
// why not.
//
// Order: a proposal made here is taken in call order, and only once
// nothing this node forwarded to the partition is still on its way (its
// forwarder is idle); forwarded calls are sent in call order
// (cluster_forward.go).
//
// Every batch carries this node's producer id for the partition and a
// sequence drawn in call order (the forwarder's): a leader never stores a
// batch below its producer's latest one (producerBook), so a late copy of
// a batch cannot land after the batches published after it.
func (c *cluster) produce(part *partition, recs []log.Record, opts engine.ProduceOptions, done func(int64, error)) {
	if part.X.raftGroup == 0 {
		go done(0, fmt.Errorf("%w: topic %q waits for %d nodes to place its replicas (the cluster has %d): start more spoold with --join, or lower cluster.replication_factor",
			engine.ErrNotPlaced, part.Topic.Name, c.topicRF(part.Topic.Name), c.nodeCount()))
		return
	}
	if ctx := opts.Context; ctx != nil && ctx.Err() != nil {
		part.Compl.Add(done, 0, callerGone(part, ctx))
		return
	}
	if st, ok := c.status(part.X.raftGroup); !ok || !st.IsLeader {
		c.forward(part, recs, opts, done)
		return
	}
	part.X.fwdMu.Lock()
	f := &part.X.fwd
	if f.running || len(f.queue) > 0 {
		part.X.fwdMu.Unlock()
		c.forward(part, recs, opts, done) // after what waits, in call order
		return
	}
	pid, seq := f.next()
	part.X.fwdMu.Unlock()
	// The fast path: proposed on the caller's goroutine, in call order.
	// Results go through the partition's completer: done never runs on a
	// raft worker (a slow done would stall every group of the node), and
	// results of one partition reach their callers in order.
	part.X.producers.proposedHere(pid, seq)
	data := log.EncodeRecords(nil, log.BatchHeader{ProducerID: pid, BaseSequence: seq}, recs, time.Now().UnixMilli())
	c.role.proposeWith(part.X.raftGroup, data, proposeOptions(opts.Acks), func(res raft.Proposed, err error) {
		if err == nil || !route.NothingDone(err) {
			part.Compl.Add(done, res.Base, c.produceError(part, err))
			return
		}
		c.forward(part, recs, opts, done) // not stored: look for the new leader (a new sequence)
	})
}

// callerGone is the answer to records not sent because their caller's
// context ended first: nothing was stored.
func callerGone(part *partition, ctx context.Context) error {
	return fmt.Errorf("engine: %s/%d: not sent: the caller stopped waiting first: %w", part.Topic.Name, part.Num, context.Cause(ctx))
}

// proposeOptions: AcksLeader completes at the leader's fsync.
func proposeOptions(acks engine.Acks) raft.ProposeOptions {
	return raft.ProposeOptions{AtLeaderDurable: acks == engine.AcksLeader}
}

// acksOf is the acks a forwarded request asks for; a request from a node
// that does not know the field asks for nothing, which is AcksAll.
func acksOf(a spoolv1.Acks) engine.Acks {
	if a == spoolv1.Acks_ACKS_LEADER {
		return engine.AcksLeader
	}
	return engine.AcksAll
}

// acksProto is acks on the wire.
func acksProto(acks engine.Acks) spoolv1.Acks {
	if acks == engine.AcksLeader {
		return spoolv1.Acks_ACKS_LEADER
	}
	return spoolv1.Acks_ACKS_ALL
}

// produceError names the partition in an error and maps the raft host's
// errors to the engine's.
func (c *cluster) produceError(part *partition, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrOutcomeUnknown):
		return fmt.Errorf("%w: %s/%d: %w", engine.ErrOutcomeUnknown, part.Topic.Name, part.Num, err)
	}
	return fmt.Errorf("%s/%d: %w", part.Topic.Name, part.Num, err)
}

// produceAtLeader proposes data to a raft group's leader, here or at a
// peer (the router), retrying while that is safe (nothing was stored)
// until ctx ends, and answers as acks asks (AcksLeader: once the leader
// has the entry on disk). A batch with a producer id may be sent again
// when its outcome is unknown: the leader recognises it (cluster_dedupe.go).
func (c *cluster) produceAtLeader(ctx context.Context, group uint64, topic string, num int32, replicas []uint64, data []byte, acks engine.Acks) (int64, error) {
	if group == controllerGroup {
		acks = engine.AcksAll // the controller's commands are never acknowledged early
	}
	id, _, _, _ := log.RecordsProducer(data)
	var base int64
	err := c.router.Do(ctx, route.Call{
		Group:      group,
		Holders:    replicas,
		Idempotent: id != 0,
		Local: func(ctx context.Context) error {
			var err error
			base, err = c.proposeHere(ctx, group, topic, num, id, data, acks)
			return err
		},
		Remote: func(ctx context.Context, node uint64) error {
			var err error
			base, err = c.forwardTo(ctx, node, group, topic, num, data, acks)
			return err
		},
	})
	return base, err
}

// proposeHere proposes data on this node, which leads group; a batch with a
// producer id goes through the partition's producer table (proposeOnce).
func (c *cluster) proposeHere(ctx context.Context, group uint64, topic string, num int32, id int64, data []byte, acks engine.Acks) (int64, error) {
	part, err := c.partition(topic, num)
	if id == 0 || err != nil || group == controllerGroup {
		res, err := c.propose(ctx, group, data, acks)
		return res.Base, err
	}
	if st, ok := c.status(group); !ok || !leaderCaughtUp(part, st) {
		return 0, fmt.Errorf("%w: node %d just became the leader and is applying its predecessors' entries", route.ErrNotReady, c.id.NodeID)
	}
	return c.proposeOnce(ctx, part, id, seqOf(data), data, acks)
}

// seqOf is a record payload's base sequence.
func seqOf(data []byte) int32 {
	_, _, seq, _ := log.RecordsProducer(data)
	return seq
}

// propose proposes data in a raft group this node leads and waits for the outcome acks
// asks for.
func (c *cluster) propose(ctx context.Context, group uint64, data []byte, acks engine.Acks) (raft.Proposed, error) {
	type outcome struct {
		res raft.Proposed
		err error
	}
	ch := make(chan outcome, 1)
	c.role.proposeWith(group, data, proposeOptions(acks), func(res raft.Proposed, err error) { ch <- outcome{res, err} })
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		return raft.Proposed{}, fmt.Errorf("%w: no answer from raft in time: %w", raft.ErrOutcomeUnknown, ctx.Err())
	}
}

// forwardTo asks node to propose data in group.
func (c *cluster) forwardTo(ctx context.Context, node, group uint64, topic string, num int32, data []byte, acks engine.Acks) (int64, error) {
	cl, err := c.peers.client(node)
	if err != nil {
		return 0, fmt.Errorf("%w: node %d: %w", route.ErrUnreachable, node, err)
	}
	sentOpt, sent := route.NeverSent()
	resp, err := cl.Produce(ctx, &clusterv1.ProduceRequest{ClusterId: c.id.ClusterID, Topic: topic, Partition: num, Group: group, Records: data, Acks: acksProto(acks)}, sentOpt)
	if err != nil {
		// A peer's gRPC status is text here (%v), never wrapped: the
		// sidecar's error mapping must see the engine's error, not a status
		// of another node's making. A request that left may have reached the
		// leader, and been replicated before the connection broke: sending
		// it again could store it twice (the outcome is unknown).
		return 0, route.Unsent(node, sent, err)
	}
	switch resp.GetError() {
	case clusterv1.ProduceError_PRODUCE_ERROR_UNSPECIFIED:
		return resp.GetBaseOffset(), nil
	case clusterv1.ProduceError_PRODUCE_ERROR_NOT_LEADER:
		return 0, &raft.NotLeaderError{Group: group, Leader: resp.GetLeader()}
	case clusterv1.ProduceError_PRODUCE_ERROR_LOST:
		return 0, fmt.Errorf("%w: at node %d: %s", raft.ErrProposalLost, node, resp.GetMessage())
	case clusterv1.ProduceError_PRODUCE_ERROR_OUTCOME_UNKNOWN:
		return 0, fmt.Errorf("%w: at node %d: %s", raft.ErrOutcomeUnknown, node, resp.GetMessage())
	case clusterv1.ProduceError_PRODUCE_ERROR_UNAVAILABLE:
		return 0, fmt.Errorf("%w: node %d: %s", route.ErrUnreachable, node, resp.GetMessage())
	default:
		return 0, fmt.Errorf("engine: node %d refused the records: %s", node, resp.GetMessage())
	}
}

// fetchRemote reads a partition this node holds no replica of from one
// that does (the leader when known).
func (c *cluster) fetchRemote(part *partition, offset int64, maxBytes int, dst []log.Record) ([]log.Record, error) {
	resp, err := c.askReplica(part, func(ctx context.Context, cl clusterv1.NodeServiceClient) (*clusterv1.FetchResponse, error) {
		return cl.Fetch(ctx, &clusterv1.FetchRequest{ClusterId: c.id.ClusterID, Topic: part.Topic.Name, Partition: part.Num, Offset: offset, MaxBytes: int32(min(maxBytes, 1<<30))})
	})
	if err != nil {
		return dst, err
	}
	noteRemoteEnd(part, resp.GetEnd())
	if len(resp.GetBatch()) == 0 {
		if offset < resp.GetStart() {
			return dst, &log.OffsetOutOfRangeError{Offset: offset, Start: resp.GetStart(), End: resp.GetEnd()}
		}
		return dst, nil
	}
	_, recs, _, err := log.DecodeBatch(resp.GetBatch())
	if err != nil {
		return dst, fmt.Errorf("engine: %s/%d: a peer sent a damaged batch: %w", part.Topic.Name, part.Num, err)
	}
	return append(dst, recs...), nil
}

// offsetsRemote asks a replica for a partition's log start and committed end.
func (c *cluster) offsetsRemote(part *partition) (int64, int64, error) {
	resp, err := c.askReplica(part, func(ctx context.Context, cl clusterv1.NodeServiceClient) (*clusterv1.FetchResponse, error) {
		return cl.Fetch(ctx, &clusterv1.FetchRequest{ClusterId: c.id.ClusterID, Topic: part.Topic.Name, Partition: part.Num, Offset: -1})
	})
	if err != nil {
		return 0, 0, err
	}
	noteRemoteEnd(part, resp.GetEnd())
	return resp.GetStart(), resp.GetEnd(), nil
}

// askReplica calls the other replicas of a partition in turn until one
// answers, each call bounded by ProduceTimeout.
func (c *cluster) askReplica(part *partition, call func(context.Context, clusterv1.NodeServiceClient) (*clusterv1.FetchResponse, error)) (*clusterv1.FetchResponse, error) {
	return c.askReplicaWithin(context.Background(), part, c.cfg.ProduceTimeout, call)
}

// askReplicaWithin is askReplica with each call bounded by timeout and by
// ctx.
func (c *cluster) askReplicaWithin(ctx context.Context, part *partition, timeout time.Duration, call func(context.Context, clusterv1.NodeServiceClient) (*clusterv1.FetchResponse, error)) (*clusterv1.FetchResponse, error) {
	if part.X.raftGroup == 0 {
		if !c.role.placementKnown() {
			return nil, fmt.Errorf("%w: %s/%d: this node has not read the partition's placement since it started (its controller state is behind the leader's)", engine.ErrOffsetsUnknown, part.Topic.Name, part.Num)
		}
		return &clusterv1.FetchResponse{}, nil // not placed: nothing to read yet
	}
	var errs []error
	for _, node := range part.X.holders() {
		if node == c.id.NodeID {
			continue // a member reads remotely only when its own replica cannot serve
		}
		cl, err := c.peers.client(node)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := call(cctx, cl)
		cancel()
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("node %d: %v", node, err))
	}
	return nil, fmt.Errorf("engine: %s/%d: no replica answered (replicas %v): %w", part.Topic.Name, part.Num, part.X.holders(), errors.Join(errs...))
}

func (c *cluster) topicRF(name string) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, _ := c.state.Topic(name)
	return t.Spec.ReplicationFactor
}

func (c *cluster) nodeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.state.Nodes())
}

// nodeService answers peers: joins, forwarded publishes, remote reads.
type nodeService struct {
	clusterv1.UnimplementedNodeServiceServer
	c *member
}

// Produce proposes a forwarded payload if this node leads the group; it
// never forwards again (the caller retries at the leader it names). It
// answers at commit, or once the entry is on this leader's disk when the
// request asks for ACKS_LEADER.
func (s *nodeService) Produce(ctx context.Context, req *clusterv1.ProduceRequest) (*clusterv1.ProduceResponse, error) {
	c := s.c
	refuse := func(code clusterv1.ProduceError, format string, args ...any) (*clusterv1.ProduceResponse, error) {
		return &clusterv1.ProduceResponse{Error: code, Message: fmt.Sprintf(format, args...)}, nil
	}
	group := req.GetGroup()
	if err := c.checkPeerProduce(ctx, group, req); err != nil {
		c.refusedProduce.Add(1)
		c.logger.Warn("spool cluster: refused a peer's produce", "group", group, "topic", req.GetTopic(), "err", err)
		return refuse(clusterv1.ProduceError_PRODUCE_ERROR_INVALID, "%v", err)
	}
	if group != controllerGroup {
		part, err := c.partition(req.GetTopic(), req.GetPartition())
		if err != nil {
			return refuse(clusterv1.ProduceError_PRODUCE_ERROR_UNAVAILABLE, "%v", err)
		}
		if part.X.raftGroup != group {
			return refuse(clusterv1.ProduceError_PRODUCE_ERROR_UNAVAILABLE, "%s/%d is group %d here, not %d: the nodes' views of the cluster differ for now", req.GetTopic(), req.GetPartition(), part.X.raftGroup, group)
		}
	}
	if err := log.CheckRecords(req.GetRecords(), c.conf.Log.MaxBatchBytes); err != nil {
		return refuse(clusterv1.ProduceError_PRODUCE_ERROR_INVALID, "%v", err)
	}
	st, ok := c.host.Status(group)
	if !ok {
		return refuse(clusterv1.ProduceError_PRODUCE_ERROR_UNAVAILABLE, "node %d holds no replica of group %d", c.id.NodeID, group)
	}
	if !st.IsLeader {
		return &clusterv1.ProduceResponse{Error: clusterv1.ProduceError_PRODUCE_ERROR_NOT_LEADER, Leader: st.Leader,
			Message: fmt.Sprintf("node %d does not lead group %d", c.id.NodeID, group)}, nil
	}
	acks := acksOf(req.GetAcks())
	if group == controllerGroup {
		acks = engine.AcksAll
	}
	var base int64
	var err error
	if id, _, seq, _ := log.RecordsProducer(req.GetRecords()); id != 0 && group != controllerGroup {
		part, _ := c.partition(req.GetTopic(), req.GetPartition()) // checked above
		if !leaderCaughtUp(part, st) {
			// Entries of earlier leaders may still hold this batch: answer
			// once they are applied (the caller tries again shortly).
			return &clusterv1.ProduceResponse{Error: clusterv1.ProduceError_PRODUCE_ERROR_UNAVAILABLE,
				Message: fmt.Sprintf("node %d just became the leader of group %d and is applying its predecessors' entries", c.id.NodeID, group)}, nil
		}
		base, err = c.proposeOnce(ctx, part, id, seq, req.GetRecords(), acks)
	} else {
		var res raft.Proposed
		res, err = c.propose(ctx, group, req.GetRecords(), acks)
		base = res.Base
	}
	var nl *raft.NotLeaderError
	switch {
	case err == nil:
		return &clusterv1.ProduceResponse{BaseOffset: base}, nil
	case errors.As(err, &nl):
		return &clusterv1.ProduceResponse{Error: clusterv1.ProduceError_PRODUCE_ERROR_NOT_LEADER, Leader: nl.Leader, Message: err.Error()}, nil
	case errors.Is(err, raft.ErrProposalLost):
		return refuse(clusterv1.ProduceError_PRODUCE_ERROR_LOST, "%v", err)
	case errors.Is(err, raft.ErrOutcomeUnknown):
		return refuse(clusterv1.ProduceError_PRODUCE_ERROR_OUTCOME_UNKNOWN, "%v", err)
	default:
		return refuse(clusterv1.ProduceError_PRODUCE_ERROR_INVALID, "%v", err)
	}
}

// Fetch reads committed records of a partition this node holds. Offset -1
// asks for the offsets only.
func (s *nodeService) Fetch(ctx context.Context, req *clusterv1.FetchRequest) (*clusterv1.FetchResponse, error) {
	c := s.c
	part, err := c.partition(req.GetTopic(), req.GetPartition())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	if part.Log == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %d holds no replica of %s/%d", c.id.NodeID, req.GetTopic(), req.GetPartition())
	}
	if req.GetOffset() < 0 {
		c.endReadsServed.Add(1)
		if w := req.GetMaxWaitMs(); w > 0 {
			c.awaitEndPast(ctx, part, req.GetWaitPast(), time.Duration(min(w, maxRemoteWaitMs))*time.Millisecond)
		}
	}
	if c.readsRemote(part) { // its end may be behind: the asker goes to the next replica
		return nil, status.Errorf(codes.Unavailable, "node %d's replica of %s/%d is stopped or catching up after a stop", c.id.NodeID, req.GetTopic(), req.GetPartition())
	}
	resp := &clusterv1.FetchResponse{Start: part.Log.StartOffset(), End: part.Committed.Load()}
	if req.GetOffset() < 0 {
		return resp, nil
	}
	maxBytes := int(min(max(req.GetMaxBytes(), 1), maxRemoteFetchBytes))
	recs, err := c.tab.Read(part, req.GetOffset(), maxBytes, nil)
	if err != nil {
		var oor *log.OffsetOutOfRangeError
		if errors.As(err, &oor) {
			return resp, nil // the caller sees the log start past its offset
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if len(recs) > 0 {
		resp.Batch = log.EncodeBatch(nil, log.BatchHeader{BaseOffset: recs[0].Offset}, recs)
	}
	return resp, nil
}

// maxRemoteFetchBytes bounds one remote read's answer.
const maxRemoteFetchBytes = 4 << 20

// maxRemoteWaitMs bounds how long a replica holds a read of a partition's
// end (FetchRequest.max_wait_ms) before it answers anyway.
const maxRemoteWaitMs = 10_000

// awaitEndPast returns once part's committed end here passes past, its
// replica here stops serving reads (the asker goes to another), d has
// passed, or ctx ends (the asker gave up, or this node stops).
func (c *member) awaitEndPast(ctx context.Context, part *partition, past int64, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		changed, err := c.tab.Changed(part.Topic.Name)
		if err != nil || part.Committed.Load() > past || c.readsRemote(part) {
			return
		}
		select {
		case <-changed:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Join admits a new node: at the controller's leader, AddNode; elsewhere,
// the request is passed to the leader.
func (s *nodeService) Join(ctx context.Context, req *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error) {
	c := s.c
	if err := c.checkJoinSecret(ctx); err != nil {
		c.refusedJoin.Add(1)
		c.logger.Warn("spool cluster: refused a join", "addr", req.GetAddr(), "err", err)
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	md, _ := metadata.FromIncomingContext(ctx)
	forwarded := len(md.Get(forwardedKey)) > 0
	who, err := c.joinerIdentity(ctx, forwarded)
	if err != nil {
		c.refusedJoin.Add(1)
		c.logger.Warn("spool cluster: refused a join", "addr", req.GetAddr(), "err", err)
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	if req.GetProtocolVersion() != transport.ProtocolVersion {
		return nil, status.Errorf(codes.FailedPrecondition, "this node speaks cluster protocol %d, the joining node %d: run the same Spool release", transport.ProtocolVersion, req.GetProtocolVersion())
	}
	if err := c.awaitReady(time.Second); err != nil {
		return nil, status.Errorf(codes.Unavailable, "node %d cannot admit nodes yet: %v", c.id.NodeID, err)
	}
	st, ok := c.host.Status(controllerGroup)
	if ok && !st.IsLeader {
		// Passed on once: a node that is asked by a peer answers itself.
		if st.Leader != 0 && !forwarded {
			cl, err := c.peers.client(st.Leader)
			if err != nil {
				return nil, status.Errorf(codes.Unavailable, "the controller's leader, node %d, is unreachable: %v", st.Leader, err)
			}
			out := metadata.AppendToOutgoingContext(ctx, forwardedKey, "1", joinSecretKey, string(c.cfg.JoinSecret), joinIdentityKey, who)
			return cl.Join(out, req)
		}
	}
	if err := c.admitsVersions(req); err != nil {
		c.refusedJoin.Add(1)
		c.logger.Warn("spool cluster: refused a join", "addr", req.GetAddr(), "err", err)
		return nil, status.Errorf(codes.FailedPrecondition, "admitting %s: %v", req.GetAddr(), err)
	}
	res, err := c.proposeMeta(ctx, meta.Command{AddNode: &meta.AddNode{Addr: req.GetAddr(), Token: req.GetToken(), Identity: who}})
	if errors.Is(err, meta.ErrInvalid) {
		c.refusedJoin.Add(1)
		c.logger.Warn("spool cluster: refused a join", "addr", req.GetAddr(), "err", err)
		return nil, status.Errorf(codes.PermissionDenied, "admitting %s: %v", req.GetAddr(), err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "admitting %s: %v", req.GetAddr(), err)
	}
	resp := &clusterv1.JoinResponse{ClusterId: c.id.ClusterID, NodeId: res.NodeID}
	c.mu.Lock()
	resp.ClusterVersion = c.state.ClusterVersion()
	for _, nd := range c.state.Nodes() {
		resp.Nodes = append(resp.Nodes, &clusterv1.NodeAddr{Id: nd.ID, Addr: nd.Addr})
	}
	c.mu.Unlock()
	c.logger.Info("spool cluster: admitted a node", "node", res.NodeID, "addr", req.GetAddr())
	return resp, nil
}

// forwardedKey marks a Join passed on by a peer (gRPC metadata).
const forwardedKey = "spool-forwarded"

// joinBackoff spaces a joining node's rounds of asking the peers in Join:
// from 250 ms, doubling up to 2 s, each wait at least half its cap.
var joinBackoff = backoff.Config{Base: 250 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: 0.5}

// A joining node's call to a candidate (every candidate is asked at once,
// askToJoin) waits joinCallFirst in its first round, twice that in each
// next one, up to joinCallMax: a member passing a join on to a
// controller's leader that stands still holds the call, and the next
// round asks again once the members have elected another; an admission
// that is merely slow still gets its time in later rounds (a retried join
// carries the same token: it is admitted once).
const (
	joinCallFirst = 2 * time.Second
	joinCallMax   = 10 * time.Second
)

// errCreateCluster: join found no cluster among the candidates, and this
// node is the one to create it (ClusterConfig.BootstrapExpect).
var errCreateCluster = errors.New("create the cluster")

// join asks the candidates of cfg.Join (joinCandidates) to admit this
// node, saves the identity it is given and returns the members it learned
// of; or errCreateCluster when BootstrapExpect makes this node the first.
func (c *member) join(ctx context.Context) ([]*clusterv1.NodeAddr, error) {
	token := randomID(16)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.JoinTimeout)
	defer cancel()
	req := &clusterv1.JoinRequest{Addr: c.cfg.Advertise, Token: token, ProtocolVersion: transport.ProtocolVersion,
		ClusterVersionMin: c.cfg.ClusterVersions.Min, ClusterVersionMax: c.cfg.ClusterVersions.Max}
	var errs []error
	for attempt := 0; ; attempt++ {
		callTimeout := min(joinCallFirst<<min(attempt, 8), joinCallMax)
		if c.cfg.BootstrapExpect > 0 {
			// Nodes still forming the cluster do not serve yet: a call to one
			// waits for its deadline.
			callTimeout = joinCallFirst
		}
		cands, self, rerrs := c.joinCandidates(ctx)
		errs = append(errs[:0], rerrs...)
		addr, resp, forming, aerrs, err := c.askToJoin(ctx, cands, req, callTimeout)
		if err != nil {
			return nil, err
		}
		errs = append(errs, aerrs...)
		if resp != nil {
			if resp.GetNodeId() == 0 || resp.GetClusterId() == "" {
				return nil, fmt.Errorf("engine: --join %s answered without a node id or cluster id", addr)
			}
			if err := meta.CheckSpeaks(max(resp.GetClusterVersion(), 1), c.cfg.ClusterVersions); err != nil {
				return nil, fmt.Errorf("engine: --join %s admitted this node, but (%w): %s", addr, engine.ErrClusterVersion, versionText(err))
			}
			c.mu.Lock() // awaitReady may be reading it
			c.id = identity{ClusterID: resp.GetClusterId(), NodeID: resp.GetNodeId(), Token: token}
			c.mu.Unlock()
			if err := saveIdentity(c.fs, c.dir, c.id); err != nil {
				return nil, err
			}
			c.logger.Info("spool cluster: joined", "cluster", c.id.ClusterID, "node", c.id.NodeID, "via", addr)
			return resp.GetNodes(), nil
		}
		// Only a positive answer counts: a candidate that cannot be reached
		// may be a member (a network partition), and creating a cluster
		// beside it would split the nodes for good.
		if n := c.cfg.BootstrapExpect; n > 0 && self != "" && ctx.Err() == nil && forming == len(cands) && len(cands)+1 >= n && lowestAddr(self, cands) {
			c.logger.Info("spool cluster: no cluster among the join candidates, and this node's address is the lowest of them: creating the cluster (cluster.bootstrap_expect)",
				"candidates", len(cands)+1, "bootstrap_expect", n, "advertise", c.cfg.Advertise)
			return nil, errCreateCluster
		}
		t := time.NewTimer(joinBackoff.Delay(attempt+1, rand.Float64()))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("engine: could not join the cluster through %v within %v (start the peers, or check cluster.join): %w", c.cfg.Join, c.cfg.JoinTimeout, errors.Join(errs...))
		case <-t.C:
		}
	}
}

// askToJoin asks every candidate at once to admit this node and returns
// the first admission (with the address that gave it), or, when none
// admits it, how many answered that they are forming a cluster too and
// each candidate's error. A candidate that does not answer (a stopped or
// cut-off node: its call waits for callTimeout) does not hold back the
// others. Asking several is safe: the controller admits a join token once
// (meta.AddNode), whoever passes it on. A refusal (the join secret, the
// identity, the release) ends the join: err.
func (c *member) askToJoin(ctx context.Context, cands []string, req *clusterv1.JoinRequest, callTimeout time.Duration) (addr string, resp *clusterv1.JoinResponse, forming int, errs []error, err error) {
	type answer struct {
		addr    string
		resp    *clusterv1.JoinResponse
		forming bool
		err     error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the calls still waiting once one admitted this node
	answers := make(chan answer, len(cands))
	for _, a := range cands {
		go func() {
			conn, err := grpc.NewClient(a, c.dialCreds())
			if err != nil {
				answers <- answer{addr: a, err: err}
				return
			}
			defer conn.Close()
			cctx, ccancel := context.WithTimeout(ctx, callTimeout)
			defer ccancel()
			var trailer metadata.MD
			cctx = metadata.AppendToOutgoingContext(cctx, joinSecretKey, string(c.cfg.JoinSecret))
			resp, err := clusterv1.NewNodeServiceClient(conn).Join(cctx, req, grpc.Trailer(&trailer))
			answers <- answer{addr: a, resp: resp, forming: len(trailer.Get(formingKey)) > 0, err: err}
		}()
	}
	for range cands {
		an := <-answers
		switch {
		case an.err == nil:
			return an.addr, an.resp, 0, nil, nil
		case status.Code(an.err) == codes.FailedPrecondition || status.Code(an.err) == codes.PermissionDenied:
			return "", nil, 0, nil, fmt.Errorf("engine: --join %s refused this node: %s", an.addr, status.Convert(an.err).Message())
		case an.forming:
			forming++
		}
		errs = append(errs, fmt.Errorf("%s: %v", an.addr, an.err))
	}
	return "", nil, forming, errs, nil
}

// formingKey is the trailer of a joining node's answer to a Join: it is
// not a member of any cluster yet (serveForming).
const formingKey = "spool-forming"

// formingService answers Join, while this node joins, that it is joining
// too; nothing else is served until it is a member.
type formingService struct {
	clusterv1.UnimplementedNodeServiceServer
	addr string
}

func (f formingService) Join(ctx context.Context, _ *clusterv1.JoinRequest) (*clusterv1.JoinResponse, error) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(formingKey, f.addr))
	return nil, status.Errorf(codes.Unavailable, "node at %s is joining a cluster itself: it cannot admit nodes", f.addr)
}

// serveForming serves formingService on l until the returned function is
// called, which closes l.
func serveForming(l net.Listener, opts []grpc.ServerOption, addr string) (stop func()) {
	srv := grpc.NewServer(opts...)
	clusterv1.RegisterNodeServiceServer(srv, formingService{addr: addr})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }() // owned: ended by stop
	return func() {
		srv.Stop()
		<-done
	}
}

// joinCandidates resolves cfg.Join: an entry whose host is a DNS name
// stands for every address it resolves to (a headless Service names every
// pod), each tried in turn. This node's own addresses (its advertised
// address, resolved the same way) are left out; self is the first of them
// ("" when it cannot be resolved), for BootstrapExpect's ordering.
func (c *member) joinCandidates(ctx context.Context) (cands []string, self string, errs []error) {
	mine, _ := resolveAddr(ctx, c.cfg.Advertise)
	if len(mine) > 0 {
		self = mine[0]
	}
	seen := map[string]bool{}
	for _, a := range mine {
		seen[a] = true
	}
	for _, entry := range c.cfg.Join {
		addrs, err := resolveAddr(ctx, entry)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, a := range addrs {
			if !seen[a] {
				seen[a] = true
				cands = append(cands, a)
			}
		}
	}
	return cands, self, errs
}

// resolveAddr turns host:port into ip:port addresses (itself when the host
// is an IP address).
func resolveAddr(ctx context.Context, hostport string) ([]string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("cluster.join %q: %w", hostport, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []string{net.JoinHostPort(ip.Unmap().String(), port)}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(rctx, host)
	if err != nil {
		return nil, fmt.Errorf("cluster.join %q: %w", hostport, err)
	}
	slices.Sort(ips)
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip, port))
	}
	return out, nil
}

// lowestAddr reports whether self sorts before every other address (IP
// addresses by value, then ports; anything else by its text).
func lowestAddr(self string, others []string) bool {
	for _, o := range others {
		if compareAddr(o, self) < 0 {
			return false
		}
	}
	return true
}

func compareAddr(a, b string) int {
	pa, errA := netip.ParseAddrPort(a)
	pb, errB := netip.ParseAddrPort(b)
	if errA == nil && errB == nil {
		return pa.Compare(pb)
	}
	return strings.Compare(a, b)
}

// peerClients keeps one NodeService connection per peer, made on first use.
type peerClients struct {
	maxSend int             // the largest forwarded payload, plus room
	creds   grpc.DialOption // plaintext or mutual TLS
	mu      sync.Mutex
	addrs   map[uint64]string
	conns   map[uint64]*grpc.ClientConn
	closed  bool // no more connections: they would never be closed
}

func newPeerClients(maxBatchBytes int, creds grpc.DialOption) *peerClients {
	return &peerClients{maxSend: maxBatchBytes + 1<<20, creds: creds, addrs: map[uint64]string{}, conns: map[uint64]*grpc.ClientConn{}}
}

// set records a peer's address; it reports whether it changed.
func (p *peerClients) set(id uint64, addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addrs[id] == addr {
		return false
	}
	p.addrs[id] = addr
	if cc, ok := p.conns[id]; ok {
		_ = cc.Close()
		delete(p.conns, id)
	}
	return true
}

// remove forgets a node (removed from the cluster).
func (p *peerClients) remove(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.addrs, id)
	if cc, ok := p.conns[id]; ok {
		_ = cc.Close()
		delete(p.conns, id)
	}
}

func (p *peerClients) all() map[uint64]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[uint64]string, len(p.addrs))
	for k, v := range p.addrs {
		out[k] = v
	}
	return out
}

func (p *peerClients) client(id uint64) (clusterv1.NodeServiceClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc, ok := p.conns[id]; ok {
		return clusterv1.NewNodeServiceClient(cc), nil
	}
	if p.closed {
		return nil, fmt.Errorf("node %d: %w", id, engine.ErrClosed)
	}
	addr, ok := p.addrs[id]
	if !ok {
		return nil, fmt.Errorf("no address known for node %d", id)
	}
	// The raft transport's keepalive and reconnect settings: without
	// keepalive, a connection whose bytes a partition dropped stays in TCP
	// retransmission backoff after the heal, and forwarded publishes wait
	// for its next retransmission (7-12 s after a 15 s one-way cut); with
	// gRPC's default backoff a node back after a minute down would take
	// them minutes later.
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{p.creds, grpcbuf.DialOption(), grpcbuf.ClientCodec(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRemoteFetchBytes+1<<20), grpc.MaxCallSendMsgSize(p.maxSend)),
	}, transport.PeerDialOptions()...)...)
	if err != nil {
		return nil, err
	}
	p.conns[id] = cc
	return clusterv1.NewNodeServiceClient(cc), nil
}

func (p *peerClients) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for id, cc := range p.conns {
		_ = cc.Close()
		delete(p.conns, id)
	}
}
