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
// Two roles, one Node. A member holds replicas: it has a raft host and
// transport, group 0's log and its applier, and does the controller
// leader's chores. A storage-off node (ClusterConfig.StorageOff) has none
// of these: it polls the controller's state from members and publishes and
// reads through them. Both serve the same engine API from the same core —
// the Node: configuration, store, topic table, peers, router, the
// controller's state as last applied or polled, the consumer-group API —
// and differ only in its role field, an unexported interface (role.go)
// with exactly two implementations, *member and *storageOff, each
// embedding the Node. Open picks the role once from the configuration;
// after that no code asks which one it is: where they differ (run,
// readiness, raft status and proposals, awaiting a controller command,
// the transport's peers and the replicas placement opens, ClusterStatus,
// and the operators' calls a storage-off node refuses), the core calls the
// role. A method with a *member receiver runs only on a member; one with
// a *Node (alias cluster) receiver runs on both. The roles embed the Node
// (they use its state directly); the Node reaches a role only through the
// interface. Node stays the one exported type, so Open and the engine API
// are the same for both.
//
// What it owns: joining and identity (identity.go, cluster_rpc.go), the
// configuration, the Node and the member's start and components
// (cluster.go), the roles (role.go; the member's state, controller
// machine, chores and replicas in member.go, the storage-off node's polling
// in cluster_client.go), placement as meta.PlanLocal's plan executed
// (cluster_place.go), replica moves, leaving and deleting (cluster_move.go,
// cluster_leave.go, cluster_delete.go), the producer dedupe table
// (cluster_dedupe.go; its rules, pure, in producers.go), forwarding to leaders (cluster_forward.go and the
// router, route/), the coordinators (groups_cluster*.go) and the
// NodeService server (a member's), and a pause gate that stands a member
// still for fault injection in tests (pause.go). Both replicated state machines are
// applied by engine/internal/rsm. The topic table, watchers, completions,
// the committed end and the local read path are engine/internal/table's,
// shared with the single node (engine/embedded).
//
// It imports no Redis, no Prometheus and nothing from the sidecar; it
// reports what operators need through Hooks and ClusterStatus. Its lock
// order is in LOCKS.md.
package cluster
