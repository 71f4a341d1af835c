// Package jetstream is a storage backend (engine.Backend) that keeps a
// sidecar's messages in NATS JetStream instead of the embedded log
// (docs/backends.md).
//
// # Mapping
//
//   - A topic partition is a stream, <prefix>_<topic>_<partition> (dots of
//     the topic as _), with one subject, <prefix>.<topic>.<partition>, file
//     storage, and the topic's retention as MaxAge and MaxBytes. A stream per
//     partition rather than per topic, because Spool's offsets are
//     contiguous per partition and JetStream's sequences are per stream:
//     offset = stream sequence − 1, exactly, with no index to keep.
//   - A record is one NATS message: its payload holds id, key, headers and
//     value (encode.go), its Nats-Msg-Id is the record's id, so the stream
//     drops a retried publish within its duplicate window (2 minutes).
//     The record's time is the stream's store time (message metadata).
//   - Produce publishes a call's records in order and completes once the
//     stream has acked all of them (stored, and on R>1 streams on a quorum).
//   - Fetch is one batched direct get (ADR-31) from the offset's sequence,
//     bounded in messages and bytes.
//   - Watch follows each partition with an ordered, headers-only consumer
//     from the stream's end, and signals once a second as well, so a
//     missed notification delays delivery by at most that.
//   - Positions (LoadPositions, CommitPositions) are values of the key-value
//     bucket <prefix>_positions, key <group>/<topic>: a group's next offset
//     and finished offsets above it, per partition, written whole.
//   - Consumer groups across sidecars (GroupCoordinator): the state machine
//     of engine/groups/coord, one value per group in the bucket
//     <prefix>_groups, changed by compare-and-set (coord.go).
//
// It imports engine (types, sentinels) and engine/groups/coord, never the
// sidecar.
package jetstream
