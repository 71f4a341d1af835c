// Package ledger owns Spool's idempotency ledger: per (consumer group,
// message id) it records whether a message is in progress (under a lease,
// with a fencing token and an owner), released for a retry, done or dead,
// how many attempts were started and the last error, so that dedupe and
// attempt counts survive a sidecar restart or failover.
//
// Three implementations of [Ledger]:
//   - [Redis]: the production ledger. Each batch call is one Lua script
//     over all keys of the batch (one round trip, atomic per call).
//   - [Memory]: the same semantics in process, for `spoold --dev` and for
//     fault-injection tests. Both pass one conformance suite.
//   - [Breaker]: wraps a Ledger with a per-call timeout and a circuit
//     breaker, so that a dead or slow Redis costs the delivery loop
//     [ErrUnavailable] at once instead of a stall. The policy applied then
//     (pause or deliver without dedupe) belongs to sidecar/deliver.
//
// The ledger is a leaf: it must never import the engine, the rest of the
// sidecar or Prometheus (metrics come out through [Hooks]).
//
// Key layout, states, scripts and failure behaviour: docs/ledger.md.
package ledger
