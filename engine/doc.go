// Package engine is the API of the log the sidecar stores its messages in:
// the Backend interface and its capability interfaces (ClusterAdmin,
// GroupCoordinator, Quarantiner), the record and position types, topic
// specs, produce options, the errors callers classify, limits, the key
// partitioner and the status values operators read.
//
// It holds no implementation. Three packages implement it: engine/embedded
// (Spool's own log, on one node or replicated among the sidecars with
// raft), engine/kafka and engine/jetstream (a broker the user already
// runs). The sidecar sees only this package; sidecar/backend.go opens the
// backend the configuration names.
//
// Every call names a (topic, partition). Produce is asynchronous: done never
// runs on the caller's goroutine nor under a backend lock, and runs in
// append order per partition; it may complete with a *NotLeaderError or
// ErrOutcomeUnknown (retry with the same message ids). Fetch, Offsets,
// RecordTime and Watch see only what is committed. Backend says the whole
// contract; docs/backends.md how each backend maps it.
//
// This package imports no raft, transport, controller state machine, gRPC
// server, Redis or Prometheus (scripts/banned.sh checks it with go list
// -deps): a broker backend links only what it uses.
package engine
