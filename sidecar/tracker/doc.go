// Package tracker is the per-partition delivery state machine of a
// subscription: it decides which fetched records are delivered to the app and
// when, tracks leases (visibility timeouts) and fencing tokens, schedules
// retries with backoff, keeps per-key order (parking a failing key while the
// others flow), hands poison messages to the dead-letter output and computes
// the committed offset.
//
// Like etcd-io/raft's RawNode it is pure: no goroutines, no clock, no I/O.
// The driver (one goroutine per partition in the sidecar) feeds it records and
// the app's answers together with the current time, calls Tick whenever the
// time reported by NextDeadline has come, and does the work it is handed
// (deliveries from Next, dead letters from TakeDeadLetters, offsets from
// Committed). A Tracker is not safe for concurrent use.
//
// Time only advances in Tick: lease expiries and retry due times are
// processed there and nowhere else, so a driver must call Tick(now) before
// Next(now) whenever now ≥ NextDeadline().
//
// This package must never import the engine, Redis, Prometheus, gRPC or
// anything that does I/O; its only Spool dependency is sidecar/backoff.
package tracker
