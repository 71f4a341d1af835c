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
//   - Host: every replica of a node, driven by one scheduler (groups with
//     work only, a fixed worker pool, one ticker), with each proposal
//     tracked to its outcome by a pure tracker; it is the transport's
//     Handler.
//
// Only Host starts goroutines (in its Run) and reads a clock; the rest
// takes time as Tick and hands disk and network work out as values (a
// Replica waits for its log store's appender, which the caller runs). The formats, the write order
// and the invariants are in docs/replication.md ("Raft state and storage
// adapter", "Wiring: one partition replicated").
//
// This package imports engine/log, engine/transport (for its Message and
// Handler types; messages go out through the Send function it is given)
// and go.etcd.io/raft/v3, and must never import the sidecar, gRPC, Redis,
// Prometheus or the engine package above it.
package raft
