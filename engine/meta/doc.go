// Package meta is the cluster metadata the controller (raft group 0)
// replicates: the cluster id, the nodes, the topics and where each
// partition's replicas are. Each committed record of group 0's log holds one
// Command (EncodeCommand/DecodeCommand); every node applies them in order to
// its own State with Apply and so holds the same State.
//
// Everything here is pure: no I/O, no clock, no goroutines, no randomness,
// and no map iteration order reaches a result, so the same commands give the
// same State (byte for byte through EncodeState) on every node. A refused
// command (Result.Err) changes nothing and is refused the same way on every
// node. Placement of partitions happens inside Apply, so it is replicated
// like everything else.
//
// ControllerMembers says which nodes should vote in group 0 and which
// follow as learners; NextConfChange gives the next raft configuration step
// toward that, one safe change at a time. The engine proposes the commands,
// stores them, calls Apply and proposes the conf changes.
//
// The commands, the placement rule, the limits and the tests proving them
// are in docs/replication.md ("The controller's state (group 0)").
//
// This package imports go.etcd.io/raft/v3/raftpb, the generated protocol
// (proto/spool/cluster/v1) and engine/internal/protocheck only; it must
// never import the rest of engine, the sidecar, gRPC, Redis or Prometheus.
package meta
