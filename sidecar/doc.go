// Package sidecar assembles spoold: it opens the engine, declares the
// configured topics, and serves the app (publish, Subscribe streams, Handle
// callbacks) and the operator (metrics, health, admin) until its context
// ends, then shuts down gracefully: stop fetching, let in-flight deliveries
// finish within the drain budget, commit offsets, flush the log, exit.
//
// Dependency direction: cmd → sidecar → engine. The sidecar reaches the log
// only through the engine package.
package sidecar
