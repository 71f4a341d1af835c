// Package transport carries raft messages between the nodes of a Spool
// cluster: one gRPC stream per peer (and a second one for raft group 0, the
// controller, so that partition traffic never delays it) carrying batches of
// (group, raftpb.Message), heartbeats of every group coalesced into one
// compact list per flush, and snapshots on their own client-streaming RPC
// (proto/spool/cluster/v1). Network is its in-memory twin for tests: seeded
// and replayable, it drops, delays, duplicates, reorders and partitions.
//
// It owns the peer connections, the bounded per-peer send queues, the
// handshake (cluster id, node ids, protocol version) and the checks on what
// arrives; it knows nothing of what a group is beyond its id. Received
// messages go to a Handler (the raft layer), which decides whether a group
// exists here. docs/replication.md ("Peer transport") describes the wire
// protocol, the limits and the failure behaviour.
//
// It imports raftpb and the cluster protocol; it must never import the
// sidecar, engine/log, engine/raft, Redis or Prometheus (metrics are read
// through Stats).
package transport
