package embedded

import (
	"context"
	"errors"
	"fmt"

	"github.com/spoolmq/spool/engine"
)

// A single node is no cluster: it answers the cluster's administration and
// group coordination (engine.ClusterAdmin, engine.GroupCoordinator) with
// why not, so that the sidecar treats it as what it is.

// ErrNotClustered: the node runs without a cluster; its consumer groups are
// the sidecar's local ones, and there is no coordinator to ask.
var ErrNotClustered = errors.New("engine: not a cluster node")

// ClusterStatus is false: the node is in no cluster.
func (n *Node) ClusterStatus() (engine.ClusterStatus, bool) { return engine.ClusterStatus{}, false }

// DecommissionNode is refused: the node is in no cluster.
func (n *Node) DecommissionNode(context.Context, uint64) error {
	return fmt.Errorf("%w: this sidecar is not a cluster member (a single node, or storage off): ask a member's admin address", engine.ErrDecommissionRefused)
}

// Leave is refused: the node is in no cluster.
func (n *Node) Leave(context.Context) (engine.LeaveReport, error) {
	return engine.LeaveReport{}, fmt.Errorf("%w: this sidecar is not a cluster member (a single node, or storage off): it has nothing to hand over", engine.ErrDecommissionRefused)
}

// PlanMove is refused: the node is in no cluster.
func (n *Node) PlanMove(string, int32, []uint64) (engine.ReplicaMove, error) {
	return engine.ReplicaMove{}, notMember()
}

// MoveReplicas is refused: the node is in no cluster.
func (n *Node) MoveReplicas(context.Context, string, int32, []uint64) (engine.ReplicaMove, error) {
	return engine.ReplicaMove{}, notMember()
}

func notMember() error {
	return fmt.Errorf("%w: this sidecar is not a cluster member (a single node, or storage off): ask a member's admin address", engine.ErrMoveRefused)
}

// Coordinate is refused with ErrNotClustered: a single node's groups are
// its own.
func (n *Node) Coordinate(context.Context, engine.GroupCommand) (engine.GroupResult, error) {
	return engine.GroupResult{}, notClustered()
}

// DescribeGroup is refused with ErrNotClustered.
func (n *Node) DescribeGroup(context.Context, string) (*engine.GroupState, error) {
	return nil, notClustered()
}

func notClustered() error {
	return fmt.Errorf("%w: consumer groups across sidecars need a cluster (cluster: in the sidecar's config); this node's groups are its own", ErrNotClustered)
}

// FinalizeClusterVersion is refused: a single node has no cluster version.
func (n *Node) FinalizeClusterVersion(context.Context) (engine.ClusterVersionChange, error) {
	return engine.ClusterVersionChange{}, fmt.Errorf("%w: this sidecar is a single node, not a cluster member: there is no cluster version to finalize", engine.ErrClusterVersion)
}
