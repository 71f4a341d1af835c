// Package cluster is Spool's own log replicated among the sidecars: a Node
// is a member of a cluster (or a storage-off node of one) and implements
// every interface of package engine (Backend, ClusterAdmin,
// GroupCoordinator, Quarantiner). Each partition is a raft group
// (engine/raft) replicated to ReplicationFactor nodes and placed by the
// controller (engine/meta, raft group 0); consumer groups are coordinated on
// the partitions of the internal __groups topic (engine/groups/coord).
// docs/replication.md has the design.
//
// Every call names a (topic, partition) and works the same whether the
// partition is stored on this node or led by a peer: Produce is
// asynchronous and may complete with an *engine.NotLeaderError or
// engine.ErrOutcomeUnknown (the append may or may not have happened: retry
// with the same message ids).
//
// What it owns: joining and identity (identity.go, cluster_rpc.go), start
// and the components (cluster.go), placement as meta.PlanLocal's plan
// executed (cluster_place.go), replica moves, leaving and deleting
// (cluster_move.go, cluster_leave.go, cluster_delete.go), the producer
// dedupe table (cluster_dedupe.go), forwarding to leaders (cluster_forward.go
// and the router, route/), the storage-off node's polling
// (cluster_client.go), the coordinators (groups_cluster*.go) and the
// NodeService server. Both replicated state machines are applied by
// engine/internal/rsm. The topic table, watchers, completions, the committed
// end and the local read path are engine/internal/table's, shared with the
// single node (engine/embedded).
//
// It imports no Redis, no Prometheus and nothing from the sidecar; it
// reports what operators need through Hooks and ClusterStatus. Its lock
// order is in LOCKS.md.
package cluster
