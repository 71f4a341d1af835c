// Package deliver pushes messages to the application and keeps their
// consume semantics: leases, retries, per-key order, dead letters and
// committed offsets.
//
// One Group per consumer group runs one loop (Group.Run) that owns the
// delivery trackers (sidecar/tracker) of every partition of every topic the
// group subscribes to. Everything that changes a tracker — fetched records,
// settlements from the app, lease expiries, dead-letter publish results —
// reaches it as an event on the loop's inbox, so the trackers need no locks
// (STYLE.md #6). Streams (Subscribe) and callback workers (Handle) are
// consumers: they hold credit, receive batches of deliveries, and send
// settlements back as SubscribeRequest frames.
//
// The loop reaches the log only through the Engine interface, which works
// the same when a partition is led by a peer. The place where the Redis
// ledger checks a message before it is delivered is Group.admit.
package deliver
