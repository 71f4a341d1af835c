package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
)

// Operators' changes to the cluster (spool cluster move): the request is
// checked against this node's copy of the controller's state, proposed as
// a controller command, and answered once this node has applied it. The
// controller refuses it again if the state changed meanwhile, with the
// same errors.

// MoveReplicas moves a partition's replicas to the nodes named, the first
// being the preferred leader: each new node copies the log as a learner,
// then the partition's membership changes (docs/replication.md, "Replica
// moves"). A move under way is redirected. The partition is pinned: the
// controller's balancing leaves it where the operator put it (repairs
// still replace a node that goes down or leaves). It returns once the
// controller has recorded the move, not when the copies are made:
// ClusterStatus (PartitionsMoving) and the topic's partitions (Target)
// show the progress.
//
// Refused, saying why: ErrUnknownTopic, ErrUnknownPartition, ErrUnknownNode
// (a node the cluster does not have), ErrInvalidMove (not as many nodes as
// the topic's replication factor, or a node twice), ErrMoveRefused (a node
// down or leaving, a topic waiting for nodes, or this node not a cluster
// member).
func (n *Node) MoveReplicas(ctx context.Context, topic string, partition int32, replicas []uint64) (engine.ReplicaMove, error) {
	c := n
	if err := n.role.operatorReady(); err != nil {
		return engine.ReplicaMove{}, err
	}
	cmd, mv, err := c.planMove(topic, partition, replicas)
	if err != nil {
		return engine.ReplicaMove{}, err
	}
	if _, err := c.proposeMeta(ctx, cmd); err != nil {
		return engine.ReplicaMove{}, moveErr(topic, partition, err)
	}
	c.logger.Info("spool cluster: an operator moves a partition's replicas", "topic", topic, "partition", partition, "group", mv.Group, "from", mv.From, "to", mv.To)
	return mv, nil
}

// PlanMove checks a replica move as MoveReplicas would and says what it
// would do, without recording anything (spool cluster move --dry-run).
func (n *Node) PlanMove(topic string, partition int32, replicas []uint64) (engine.ReplicaMove, error) {
	c := n
	if err := n.role.operatorReady(); err != nil {
		return engine.ReplicaMove{}, err
	}
	_, mv, err := c.planMove(topic, partition, replicas)
	return mv, err
}

// operatorReady waits, before an operator's change, until this member is
// ready.
func (c *member) operatorReady() error { return c.awaitReady(c.cfg.JoinTimeout) }

// planMove finds the partition's group in this node's state and checks
// the command against a copy of it.
func (c *cluster) planMove(topic string, partition int32, replicas []uint64) (meta.Command, engine.ReplicaMove, error) {
	c.mu.Lock()
	st := c.state.Clone()
	c.mu.Unlock()
	t, ok := st.Topic(topic)
	switch {
	case !ok:
		return meta.Command{}, engine.ReplicaMove{}, fmt.Errorf("%w %q: spool topic list shows the topics (names are case-sensitive)", engine.ErrUnknownTopic, topic)
	case partition < 0 || partition >= t.Spec.Partitions:
		return meta.Command{}, engine.ReplicaMove{}, fmt.Errorf("%w: topic %s has no partition %d (it has 0..%d)", engine.ErrUnknownPartition, topic, partition, t.Spec.Partitions-1)
	case t.Pending():
		return meta.Command{}, engine.ReplicaMove{}, fmt.Errorf("%w: topic %s waits for %d nodes to place its replicas (the cluster has %d): there is nothing to move yet",
			engine.ErrMoveRefused, topic, t.Spec.ReplicationFactor, len(st.Nodes()))
	}
	p := t.Partitions[partition]
	mv := engine.ReplicaMove{Topic: topic, Partition: partition, Group: p.Group, From: slices.Clone(p.Replicas), To: slices.Clone(replicas), PreviousTarget: slices.Clone(p.Target)}
	cmd := meta.Command{MoveReplicas: &meta.MoveReplicas{Group: p.Group, Replicas: slices.Clone(replicas), Pin: true}}
	if r := st.Apply(cmd); r.Err != nil {
		return meta.Command{}, engine.ReplicaMove{}, moveErr(topic, partition, r.Err)
	}
	return cmd, mv, nil
}

// moveErr gives a controller's refusal of an operator's move the engine's
// sentinel.
func moveErr(topic string, partition int32, err error) error {
	switch {
	case errors.Is(err, meta.ErrUnknownNode):
		return fmt.Errorf("%w: %v", engine.ErrUnknownNode, err)
	case errors.Is(err, meta.ErrInvalid):
		return fmt.Errorf("%w: %v", engine.ErrInvalidMove, err)
	case errors.Is(err, meta.ErrNodeUnavailable):
		return fmt.Errorf("%w: %v", engine.ErrMoveRefused, err)
	case errors.Is(err, meta.ErrUnknownGroup), errors.Is(err, meta.ErrUnknownTopic):
		return fmt.Errorf("%w: %s/%d was deleted meanwhile: %v", engine.ErrUnknownTopic, topic, partition, err)
	}
	return fmt.Errorf("engine: move the replicas of %s/%d: %w", topic, partition, err)
}
