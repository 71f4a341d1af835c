// Package coord is the consumer-group coordinator's state machine: the
// members of each group, the group's generation, which member owns which
// partition and which it is being asked to give up, and the group's
// committed positions.
//
// The engine runs it on a replicated log: each record of a partition of the
// internal offsets topic holds one Command (EncodeCommand/DecodeCommand);
// every replica applies the committed commands in order to its own State
// with Apply and so holds the same State. The coordinator of a group is the
// leader of partition hash(group) % N of that topic; it stamps every command
// with its clock (Command.AtMs) and proposes the commands Next says are due.
//
// Everything here is pure: no I/O, no clock, no goroutines, no randomness,
// and no map iteration order reaches a result, so the same commands give the
// same State (byte for byte through EncodeState) on every replica. A refused
// command (Result.Err) changes nothing and is refused the same way on every
// replica. Assignment happens inside Apply, so it is replicated like
// everything else.
//
// Assignment is server-side, sticky and incremental: a partition moves only
// when its owner is gone or balance needs it, a partition that moves away
// from a live member is first revoked (the member stops delivering it,
// commits, and says RevokeDone) and only then granted, so no partition is
// ever owned by two members, and partitions that do not move keep flowing.
// Commits carry the generation the member got the partition in (generation
// fencing). docs/groups.md describes the commands, the rules, the limits and
// the tests that prove them.
//
// This package imports the generated protocol (proto/spool/cluster/v1)
// and engine/internal/protocheck only; it must never import the rest of
// engine, the sidecar, gRPC, Redis or Prometheus.
package coord
