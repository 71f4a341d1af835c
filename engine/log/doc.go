// Package log is Spool's partition log: the on-disk storage of one data
// directory, and the raft log of each partition.
//
// It owns segment files and their batch framing (header + CRC32C, see
// EncodeBatch), which make the partition's raft log: every batch is one
// raft entry with its index and term (Entry, AppendEntries, TruncateAfter,
// Term, Entries), written once; the sparse offset, raft index and time
// indexes, recovery on open (torn
// tails are truncated, corruption before the tail is a *CorruptionError),
// group commit with fdatasync (Store.Run is the one appender per data
// directory), segment rolls, retention and the persisted log start offset.
// The byte-level format, recovery rules, durability modes and limits are in
// docs/storage-format.md; the lock order is in LOCKS.md.
//
// Durability: with FsyncAlways (the default) Append returns only after the
// batch is fdatasynced — in its segment, or, with Options.Journal, in the
// data dir's node journal, which a round syncs once for every partition
// and the segments are synced behind (journal.go); with FsyncInterval it
// returns after write(2) and acknowledged data can be lost on power loss.
//
// This package must never import Redis, Prometheus, gRPC, the sidecar or any
// other Spool package: it sits at the bottom of engine/, and engine/raft
// builds its raft.Storage on top of it. Metrics belong in hooks, not here.
package log
