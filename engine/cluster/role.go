package cluster

import (
	"context"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
)

// role is what a node does as a member of the cluster (*member: cluster.go
// and the files of its replicas, moves, leaving and deleting) or as a
// storage-off node (*storageOff: cluster_client.go). Open picks it once
// from ClusterConfig.StorageOff; the Node's shared code calls it wherever
// the two differ, and nothing else tells them apart.
type role interface {
	// run serves the node until ctx ends: a member joins, starts raft and
	// its components; a storage-off node polls the controller's state.
	run(ctx context.Context) error
	// whyNotReady says, for operators, why the node is not ready yet.
	whyNotReady() error

	// status is raft's status of a group this node holds a replica of
	// (false: none here; always, on a storage-off node).
	status(group uint64) (raft.GroupStatus, bool)
	// replicaStopped: this node's replica of group stopped on a storage
	// error and has not run since (never, on a storage-off node).
	replicaStopped(group uint64) bool
	// placementKnown: this node's controller state is as new as what it
	// has heard of the controller's leader since it started (a storage-off
	// node's state comes from the leader: always). Until then a partition
	// it has no placement of may have one it has not read yet.
	placementKnown() bool
	// proposeWith proposes data in a group whose leader status found here.
	proposeWith(group uint64, data []byte, opts raft.ProposeOptions, done func(raft.Proposed, error))
	// readIndex confirms with a quorum that this node still leads group
	// (raft.Host.ReadIndex): done gets the offset a linearizable read
	// waits for its state to be applied up to.
	readIndex(group uint64, done func(raft.Proposed, error))

	// controllerHolders are the nodes to ask for the controller's leader
	// (route.Call.Holders of a controller command).
	controllerHolders() []uint64
	// awaitResult is the result of the controller command committed at
	// base, once this node can know it.
	awaitResult(ctx context.Context, cmd meta.Command, base int64) (meta.Result, error)
	// awaitGroupsTopic waits, after the controller was asked to create the
	// groups topic, until this node knows it.
	awaitGroupsTopic(ctx context.Context) error

	// addPeer and removePeer follow the members (reconcile) beside the
	// Node's own peer connections; replicaOps places this node's replicas.
	addPeer(id uint64, addr string)
	removePeer(id uint64)
	replicaOps() replicaOps

	// clusterStatus fills in out (its identity filled) once the node is ready.
	clusterStatus(out engine.ClusterStatus) engine.ClusterStatus

	// The operators' calls, which a storage-off node refuses: Leave,
	// DecommissionNode, DeleteTopic; MoveReplicas and PlanMove go ahead
	// once operatorReady returns nil (a member, ready).
	leave(ctx context.Context) (engine.LeaveReport, error)
	decommission(ctx context.Context, id uint64) error
	deleteTopic(name string) error
	finalize(ctx context.Context) (engine.ClusterVersionChange, error)
	operatorReady() error
}

// The two roles.
var (
	_ role = (*member)(nil)
	_ role = (*storageOff)(nil)
)

// status is raft's status of a group on this node (role.status).
func (c *cluster) status(group uint64) (raft.GroupStatus, bool) { return c.role.status(group) }
