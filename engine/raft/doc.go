// Package raft holds what one raft group of a partition keeps besides its
// log, and the glue between go.etcd.io/raft/v3 and Spool's storage:
//
//   - StateStore: the group's HardState, ConfState and applied index in one
//     small file of two alternating CRC-protected slots (a torn write never
//     loses the previous state);
//   - SnapshotMeta: raft snapshots carry metadata only (log start
//     index/term, membership and an opaque application blob), with a
//     CRC-protected encoding;
//   - Storage: the raft.Storage adapter over an EntryLog (the partition log
//     seen as a raft log) and the snapshot metadata;
//   - Group: a pure driver of one RawNode with AsyncStorageWrites, which
//     hands out each Ready as "append these entries and this HardState, then
//     deliver these responses", so that a node-level scheduler can batch the
//     appends of every group into one group commit;
//   - PartitionLog: the EntryLog of a *log.Partition (entry and error
//     conversion);
//   - Replica: one partition's group on one node, wired to its partition
//     log and state file: Process carries out a Ready against the real log
//     and tracks the committed data offset (CommittedEnd, OnCommitted).
//
// Nothing here starts a goroutine or reads a clock: time comes in as Tick,
// disk and network work goes out as values (a Replica waits for its log
// store's appender, which the caller runs). The formats, the write order
// and the invariants are in docs/replication.md ("Raft state and storage
// adapter", "Wiring: one partition replicated").
//
// This package imports engine/log and go.etcd.io/raft/v3, and must never
// import the sidecar, gRPC, engine/transport (messages go out through a
// callback; only its tests use the transport's in-memory twin), Redis,
// Prometheus or the engine package above it.
package raft
