// Package embedded is Spool's own log on one node: a Node holds every
// partition of its topics in engine/log and implements engine.Backend and
// engine.Quarantiner; as engine.ClusterAdmin and engine.GroupCoordinator it
// says it is in no cluster (notclustered.go). The sidecars' cluster, where
// each partition is a raft group, is engine/cluster; what both share (the
// topic table, watchers, completions, the committed end, the local read
// path and quarantine) is engine/internal/table.
//
// # Two ends of a partition
//
// A partition has a durable end (engine/log's DurableOffset: fsynced on this
// node) and a committed end (what readers may see). Fetch, Offsets (lag),
// RecordTime and the notifications of Watch and Changed use the committed
// end only. On one node the committed end follows the durable end: the log
// reports every move of the durable end (group commit, a timer fsync with
// FsyncInterval, a roll, Close) through its OnDurable hook, and the
// partition's SetCommitted moves the committed end and signals watchers.
// In engine/cluster the same SetCommitted is called with the raft commit
// index instead, which may lag the local durable end.
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
// It imports no raft, transport or controller state machine
// (scripts/banned.sh checks it), no Redis, no Prometheus and nothing from
// the sidecar; it reports what operators need through Hooks. Its lock
// order is in LOCKS.md.
package embedded
