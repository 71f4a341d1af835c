// Package embedded is Spool's own log, the storage backend that implements
// every interface of package engine (Backend, ClusterAdmin,
// GroupCoordinator, Quarantiner): on one node, a Node holds every partition
// in engine/log; with a ClusterConfig, the sidecars form a cluster and each
// partition is a raft group (engine/raft) replicated to ReplicationFactor
// nodes, placed by the controller (engine/meta, raft group 0), with consumer
// groups coordinated on the internal __groups topic (engine/groups/coord).
//
// Every call names a (topic, partition) and works the same whether the
// partition is stored on this node or led by a peer: Produce is asynchronous
// and may complete with an *engine.NotLeaderError (retry at the named leader) or
// engine.ErrOutcomeUnknown (the append may or may not have happened: retry
// with the same message ids).
//
// # Two ends of a partition
//
// A partition has a durable end (engine/log's DurableOffset: fsynced on this
// node) and a committed end (what readers may see). Fetch, Offsets (lag),
// RecordTime and the notifications of Watch and Changed use the committed
// end only. On one node the committed end follows the durable end: the log
// reports every move of the durable end (group commit, a timer fsync with
// FsyncInterval, a roll, Close) through its OnDurable hook, and the
// partition's setCommitted moves the committed end and signals watchers.
// With raft, the same setCommitted is called with the commit index instead,
// which may lag the local durable end; nothing above the engine changes.
//
// # Completions
//
// Produce callbacks never run on the caller's goroutine, on the log's
// appender, or under any lock: the appender only queues a result on the
// partition's completer, whose own goroutine calls done in append order. A
// done that blocks delays the later completions of its own partition and
// nothing else (other partitions, publishers, Run and Close carry on).
//
// # Damage
//
// A partition whose data fails its checks (at open, or when a read finds
// it) is quarantined rather than failing the node: it serves the records
// before the damage, never past it, refuses appends with ErrQuarantined, and
// is reported once (an ERROR log with file, byte position and offset, and
// Hooks.PartitionQuarantined). Quarantined lists them; RepairPartition
// truncates one offline to its last good offset (docs/operations.md).
//
// It imports no Redis, no Prometheus and nothing from the sidecar; it
// reports what operators need through Hooks and ClusterStatus. Its lock
// order is in LOCKS.md.
package embedded
