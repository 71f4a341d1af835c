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
//     appends of every group into one group commit.
//
// Nothing here starts a goroutine or reads a clock: time comes in as Tick,
// disk and network work goes out as values. The formats, the write order
// and the invariants are in docs/replication.md ("Raft state and storage
// adapter").
//
// This package imports engine/log (for its FS layer) and go.etcd.io/raft/v3,
// and must never import the sidecar, gRPC, Redis, Prometheus or the engine
// package above it.
package raft
