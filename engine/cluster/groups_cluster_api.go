package cluster

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/cluster/route"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// Coordinate applies one consumer-group coordinator command (a Join,
// Heartbeat, Leave, RevokeDone, Commit or Expire) at the coordinator of
// its group: the leader of partition CoordinatorPartition(cmd.Group, N) of
// the groups topic, here or forwarded to it. The leader stamps the command
// with its clock (cmd.AtMs is ignored), proposes it, and answers once it
// has applied it.
//
// A refusal of the state machine is returned both as Result.Err and as the
// error; errors.Is matches coord's sentinels (coord.ErrFenced, ...) across
// a forward too. Otherwise, as for Produce: ErrNoLeader (no leader found
// within ProduceTimeout; nothing was applied), ErrOutcomeUnknown (the
// command may or may not be applied; Commit and Heartbeat may be sent
// again as they are, the others' retries may be refused as already done),
// ErrNotPlaced (the groups topic waits for nodes).
func (n *Node) Coordinate(ctx context.Context, cmd coord.Command) (coord.Result, error) {
	cmd.AtMs = 0 // the leader's clock stamps it
	if err := cmd.Validate(); err != nil {
		return coord.Result{Err: err}, err
	}
	g := n.coord
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ProduceTimeout)
	defer cancel()
	part, err := g.partitionOf(ctx, cmd.Group)
	if err != nil {
		return coord.Result{}, err
	}
	return n.coordinateAt(ctx, part, cmd)
}

// coordinateAt applies cmd at the leader of part (a partition of the
// groups topic), here or forwarded, as Coordinate does.
func (n *Node) coordinateAt(ctx context.Context, part *partition, cmd coord.Command) (coord.Result, error) {
	g := n.coord
	b, err := coord.EncodeCommand(cmd)
	if err != nil {
		return coord.Result{Err: err}, err
	}
	wire := &clusterv1.GroupsCommand{}
	if err := proto.Unmarshal(b, wire); err != nil {
		return coord.Result{}, fmt.Errorf("engine: coordinator command: %w", err)
	}
	var res coord.Result
	err = g.atLeader(ctx, part, func(ctx context.Context) error {
		var err error
		res, err = g.propose(ctx, part, cmd)
		return err
	}, func(ctx context.Context, node uint64, cl clusterv1.NodeServiceClient) error {
		sentOpt, sent := route.NeverSent()
		resp, err := cl.Coordinate(ctx, &clusterv1.CoordinateRequest{ClusterId: n.id.ClusterID, Partition: part.Num, Group: part.X.raftGroup, Command: wire}, sentOpt)
		if err != nil {
			return route.Unsent(node, sent, err)
		}
		if err := coordinateError(node, part, resp.GetError(), resp.GetLeader(), resp.GetMessage()); err != nil {
			return err
		}
		res = coord.Result{Generation: resp.GetGeneration(), Rebalanced: resp.GetRebalanced(), Expired: coord.ExpireReason(resp.GetExpired())}
		if resp.GetError() == clusterv1.CoordinateError_COORDINATE_ERROR_REFUSED {
			res.Err = refusalFromProto(resp.GetRefusal(), resp.GetMessage())
		}
		return nil
	})
	if err != nil {
		return coord.Result{}, err
	}
	return res, res.Err
}

// DescribeGroup returns the group as the leader of its coordinator
// partition has applied it: a coord.State holding that group alone (none
// when the group has no members and no committed positions), to query
// with its Assignment, Members, Position and LagInputs. The read is
// linearizable: the leader answers once a quorum has confirmed that it
// still leads and its state holds every command committed before the call
// (awaitCaughtUp); a leader cut off from its majority answers nothing.
func (n *Node) DescribeGroup(ctx context.Context, group string) (*coord.State, error) {
	g := n.coord
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ProduceTimeout)
	defer cancel()
	part, err := g.partitionOf(ctx, group)
	if err != nil {
		return nil, err
	}
	var st *clusterv1.GroupsState
	err = g.atLeader(ctx, part, func(ctx context.Context) error {
		var err error
		st, err = g.describeLocal(ctx, part, group)
		return err
	}, func(ctx context.Context, node uint64, cl clusterv1.NodeServiceClient) error {
		resp, err := cl.DescribeGroup(ctx, &clusterv1.DescribeGroupRequest{ClusterId: n.id.ClusterID, Partition: part.Num, Group: part.X.raftGroup, Name: group})
		if err != nil { // a read: safe to ask again
			return fmt.Errorf("%w: node %d: %v", route.ErrUnreachable, node, err)
		}
		if err := coordinateError(node, part, resp.GetError(), resp.GetLeader(), resp.GetMessage()); err != nil {
			return err
		}
		st = resp.GetState()
		return nil
	})
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("engine: group %q: %w", group, err)
	}
	s, err := coord.DecodeState(b)
	if err != nil {
		return nil, fmt.Errorf("engine: group %q as its coordinator sent it: %w", group, err)
	}
	return s, nil
}

// GroupAssignment returns a member's assignment as its group's coordinator
// holds it; coord.ErrUnknownMember when the group has no such member (it
// must Join).
func (n *Node) GroupAssignment(ctx context.Context, group, member string) (coord.Assignment, error) {
	s, err := n.DescribeGroup(ctx, group)
	if err != nil {
		return coord.Assignment{}, err
	}
	a, ok := s.Assignment(group, member)
	if !ok {
		return coord.Assignment{}, fmt.Errorf("%w %q in group %q: it never joined, left or was expired; join again", coord.ErrUnknownMember, member, group)
	}
	return a, nil
}

// GroupLagInputs returns, per partition the group knows or committed on,
// its committed position and owner (coord.State.LagInputs), as the group's
// coordinator holds them. Lag in messages is the partition's committed end
// (Offsets) minus Position.Next minus the finished offsets below it.
func (n *Node) GroupLagInputs(ctx context.Context, group string) ([]coord.PartitionState, error) {
	s, err := n.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	return s.LagInputs(group), nil
}

// partitionOf is the partition of the groups topic coordinating group;
// the topic is created on first use (ensureGroupsTopic).
func (g *coordinators) partitionOf(ctx context.Context, group string) (*partition, error) {
	c := g.c
	parts := c.internalParts(meta.GroupsTopic)
	if len(parts) == 0 {
		if err := c.ensureGroupsTopic(ctx); err != nil {
			return nil, err
		}
		if parts = c.internalParts(meta.GroupsTopic); len(parts) == 0 {
			return nil, fmt.Errorf("%w: the consumer groups' topic %s is known to the controller but not open here: see the log for why", engine.ErrNotPlaced, meta.GroupsTopic)
		}
	}
	part := parts[CoordinatorPartition(group, int32(len(parts)))]
	if part.X.raftGroup == 0 {
		return nil, fmt.Errorf("%w: the consumer groups' topic %s waits for %d nodes to place its replicas (the cluster has %d): start more spoold with --join",
			engine.ErrNotPlaced, meta.GroupsTopic, c.topicRF(meta.GroupsTopic), c.nodeCount())
	}
	return part, nil
}

// atLeader runs local when this node leads part's group, remote at the
// leader otherwise (the one router: engine/cluster/route), retrying while
// nothing was done until ctx ends. An outcome that may be stored comes back
// as engine.ErrOutcomeUnknown.
func (g *coordinators) atLeader(ctx context.Context, part *partition,
	local func(context.Context) error, remote func(context.Context, uint64, clusterv1.NodeServiceClient) error) error {
	c := g.c
	err := c.router.Do(ctx, route.Call{
		Group:   part.X.raftGroup,
		Holders: part.X.holders(),
		Local:   local,
		Remote: func(ctx context.Context, node uint64) error {
			cl, err := c.peers.client(node)
			if err != nil {
				return fmt.Errorf("%w: node %d: %w", route.ErrUnreachable, node, err)
			}
			return remote(ctx, node, cl)
		},
	})
	if errors.Is(err, raft.ErrOutcomeUnknown) && !errors.Is(err, engine.ErrOutcomeUnknown) {
		return fmt.Errorf("%w: %s/%d: %w", engine.ErrOutcomeUnknown, meta.GroupsTopic, part.Num, err)
	}
	if err != nil && errors.Is(err, engine.ErrNoLeader) {
		return fmt.Errorf("%s/%d: %w", meta.GroupsTopic, part.Num, err)
	}
	return err
}

// coordinateError is the error a forwarded call's answer stands for (nil
// for a result, REFUSED included).
func coordinateError(node uint64, part *partition, code clusterv1.CoordinateError, leader uint64, msg string) error {
	switch code {
	case clusterv1.CoordinateError_COORDINATE_ERROR_UNSPECIFIED, clusterv1.CoordinateError_COORDINATE_ERROR_REFUSED:
		return nil
	case clusterv1.CoordinateError_COORDINATE_ERROR_NOT_LEADER:
		return &raft.NotLeaderError{Group: part.X.raftGroup, Leader: leader}
	case clusterv1.CoordinateError_COORDINATE_ERROR_LOST:
		return fmt.Errorf("%w: at node %d: %s", raft.ErrProposalLost, node, msg)
	case clusterv1.CoordinateError_COORDINATE_ERROR_OUTCOME_UNKNOWN:
		return fmt.Errorf("%w: at node %d: %s", engine.ErrOutcomeUnknown, node, msg)
	case clusterv1.CoordinateError_COORDINATE_ERROR_UNAVAILABLE:
		return fmt.Errorf("%w: node %d: %s", errCoordUnavailable, node, msg)
	case clusterv1.CoordinateError_COORDINATE_ERROR_INVALID:
		return fmt.Errorf("%w: node %d: %s", engine.ErrGroupCommandUnreadable, node, msg)
	case clusterv1.CoordinateError_COORDINATE_ERROR_FAILED:
		return fmt.Errorf("engine: the coordinator command failed at node %d: %s", node, msg)
	default:
		return fmt.Errorf("engine: node %d refused the coordinator request: %s", node, msg)
	}
}

// refusals pairs coord's sentinels with their reason on the wire.
var refusals = []struct {
	err    error
	reason clusterv1.GroupsRefusal
}{
	{coord.ErrInvalid, clusterv1.GroupsRefusal_GROUPS_REFUSAL_INVALID},
	{coord.ErrLimit, clusterv1.GroupsRefusal_GROUPS_REFUSAL_LIMIT},
	{coord.ErrUnknownGroup, clusterv1.GroupsRefusal_GROUPS_REFUSAL_UNKNOWN_GROUP},
	{coord.ErrUnknownMember, clusterv1.GroupsRefusal_GROUPS_REFUSAL_UNKNOWN_MEMBER},
	{coord.ErrStaleSession, clusterv1.GroupsRefusal_GROUPS_REFUSAL_STALE_SESSION},
	{coord.ErrTopicConflict, clusterv1.GroupsRefusal_GROUPS_REFUSAL_TOPIC_CONFLICT},
	{coord.ErrNotExpired, clusterv1.GroupsRefusal_GROUPS_REFUSAL_NOT_EXPIRED},
	{coord.ErrNotRevoking, clusterv1.GroupsRefusal_GROUPS_REFUSAL_NOT_REVOKING},
	{coord.ErrFenced, clusterv1.GroupsRefusal_GROUPS_REFUSAL_FENCED},
	{coord.ErrGroupActive, clusterv1.GroupsRefusal_GROUPS_REFUSAL_GROUP_ACTIVE},
}

func refusalToProto(err error) clusterv1.GroupsRefusal {
	for _, r := range refusals {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return clusterv1.GroupsRefusal_GROUPS_REFUSAL_UNSPECIFIED
}

// refusalError is a refusal of the coordinator's leader, received from it:
// its text, matching the sentinel with errors.Is.
type refusalError struct {
	sentinel error
	msg      string
}

func (e *refusalError) Error() string { return e.msg }
func (e *refusalError) Unwrap() error { return e.sentinel }

func refusalFromProto(reason clusterv1.GroupsRefusal, msg string) error {
	for _, r := range refusals {
		if r.reason == reason {
			return &refusalError{sentinel: r.err, msg: msg}
		}
	}
	// A reason this release does not know (a newer leader): still a refusal.
	return &refusalError{sentinel: coord.ErrInvalid, msg: msg}
}

// Coordinate applies a forwarded coordinator command if this node leads
// its partition; it never forwards again (the caller retries at the
// leader it names).
func (s *nodeService) Coordinate(ctx context.Context, req *clusterv1.CoordinateRequest) (*clusterv1.CoordinateResponse, error) {
	c := s.c
	part, code, leader, err := s.coordinatorPart(req.GetPartition(), req.GetGroup())
	if err != nil {
		return &clusterv1.CoordinateResponse{Error: code, Leader: leader, Message: err.Error()}, nil
	}
	b, err := proto.Marshal(req.GetCommand())
	var cmd coord.Command
	if err == nil {
		cmd, err = coord.DecodeCommand(b)
	}
	if err == nil {
		err = c.checkCoordinate(ctx, cmd)
	}
	if err != nil {
		c.logger.Warn("spool cluster: refused a peer's coordinator command", "group", cmd.Group, "err", err)
		return &clusterv1.CoordinateResponse{Error: clusterv1.CoordinateError_COORDINATE_ERROR_INVALID, Message: err.Error()}, nil
	}
	res, err := c.coord.propose(ctx, part, cmd)
	var nl *raft.NotLeaderError
	switch {
	case err == nil && res.Err == nil:
		return &clusterv1.CoordinateResponse{Generation: res.Generation, Rebalanced: res.Rebalanced, Expired: int32(res.Expired)}, nil
	case err == nil:
		return &clusterv1.CoordinateResponse{Error: clusterv1.CoordinateError_COORDINATE_ERROR_REFUSED, Refusal: refusalToProto(res.Err), Message: res.Err.Error(),
			Generation: res.Generation}, nil
	case errors.As(err, &nl):
		return &clusterv1.CoordinateResponse{Error: clusterv1.CoordinateError_COORDINATE_ERROR_NOT_LEADER, Leader: nl.Leader, Message: err.Error()}, nil
	case errors.Is(err, raft.ErrProposalLost):
		return &clusterv1.CoordinateResponse{Error: clusterv1.CoordinateError_COORDINATE_ERROR_LOST, Message: err.Error()}, nil
	case errors.Is(err, raft.ErrOutcomeUnknown), errors.Is(err, engine.ErrOutcomeUnknown):
		return &clusterv1.CoordinateResponse{Error: clusterv1.CoordinateError_COORDINATE_ERROR_OUTCOME_UNKNOWN, Message: err.Error()}, nil
	case errors.Is(err, errCoordUnavailable):
		return &clusterv1.CoordinateResponse{Error: clusterv1.CoordinateError_COORDINATE_ERROR_UNAVAILABLE, Message: err.Error()}, nil
	default:
		return &clusterv1.CoordinateResponse{Error: clusterv1.CoordinateError_COORDINATE_ERROR_FAILED, Message: err.Error()}, nil
	}
}

// DescribeGroup answers with one group as this leader applied it.
func (s *nodeService) DescribeGroup(ctx context.Context, req *clusterv1.DescribeGroupRequest) (*clusterv1.DescribeGroupResponse, error) {
	c := s.c
	part, code, leader, err := s.coordinatorPart(req.GetPartition(), req.GetGroup())
	if err != nil {
		return &clusterv1.DescribeGroupResponse{Error: code, Leader: leader, Message: err.Error()}, nil
	}
	st, err := c.coord.describeLocal(ctx, part, req.GetName())
	if err != nil {
		return &clusterv1.DescribeGroupResponse{Error: clusterv1.CoordinateError_COORDINATE_ERROR_UNAVAILABLE, Message: err.Error()}, nil
	}
	return &clusterv1.DescribeGroupResponse{State: st}, nil
}

// coordinatorPart checks that this node leads the partition of the groups
// topic a request names, in the raft group it names.
func (s *nodeService) coordinatorPart(num int32, group uint64) (*partition, clusterv1.CoordinateError, uint64, error) {
	c := s.c
	unavailable := clusterv1.CoordinateError_COORDINATE_ERROR_UNAVAILABLE
	part, err := c.partition(meta.GroupsTopic, num)
	if err != nil {
		return nil, unavailable, 0, err
	}
	if part.X.raftGroup != group {
		return nil, unavailable, 0, fmt.Errorf("%s/%d is group %d here, not %d: the nodes' views of the cluster differ for now", meta.GroupsTopic, num, part.X.raftGroup, group)
	}
	st, ok := c.status(group)
	if !ok {
		return nil, unavailable, 0, fmt.Errorf("node %d holds no replica of %s/%d", c.id.NodeID, meta.GroupsTopic, num)
	}
	if !st.IsLeader {
		return nil, clusterv1.CoordinateError_COORDINATE_ERROR_NOT_LEADER, st.Leader, fmt.Errorf("node %d does not lead %s/%d", c.id.NodeID, meta.GroupsTopic, num)
	}
	return part, 0, 0, nil
}
