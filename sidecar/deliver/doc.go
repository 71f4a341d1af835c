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
//
// # Machine and driver
//
// The decisions are a pure state machine (machine.go's machine type):
// events in as method calls with the current time, actions out (m.acts).
// The driver (Group.Run and its goroutines) owns the clock, the channels
// and every engine, ledger and coordinator call, and feeds the answers
// back as events. No engine call is made on the loop's goroutine except a
// read when ReadsInFlight is 0 (the embedded log of one node answers from
// memory): lag gauges, admin snapshots and offset resets read the log's
// ends on the lag prober or on the admin caller's goroutine (progress.go,
// reset.go), so a slow broker or peer never stalls deliveries and acks.
//
// Machine files, the pure decision logic:
//
//	machine.go    fetches, dispatch, sends, leases, drain, wake-ups
//	events.go     the loop's events and settlements (settle)
//	consumer.go   a consumer's credit and outstanding deliveries
//	member.go     partition ownership in a cluster, degradation
//	fence.go      self-fencing, and the deliveries of a fenced member
//	commit.go     positions, commits, offset resets (reset)
//	deadletter.go dead letters to publish, failed-attempt history
//	ledger.go     claims and ledger writes to ask for
//	breakers.go   the subscriptions' breakers
//	budget.go     the memory budget of reads
//	spans.go      attempt spans and Tail steps to emit
//	snapshot.go   progress: what lag and snapshots are measured from
//	observe.go    counters, gauges and log lines, kept as data
//	faults.go     fault injection (tests only): duplicates, lost acks, delays, early lease expiries, drawn from a seed
//
// The rule, checked by scripts/banned.sh (which lists these files; a new
// machine file is added there deliberately): a machine file has no `go`
// statement, no channel, nothing from package sync and no time.Now, and
// neither logs nor touches a Prometheus metric; it makes no engine, ledger
// or network call. What it counts and has to say is data in its own state
// (observe.go), which the driver publishes after each round (report.go).
//
// Driver files: group.go (Run, the loop and the actions), conn.go (a
// consumer's queue of frames), report.go (metrics and log lines of the
// machine's observations), progress.go (snapshots, the lag prober),
// reset.go (the offset reset API), trace.go (Tail streams, span
// recording), pipeline.go (the ledger pipeline), coordinator.go (cluster
// membership), callback.go and stream.go (the consumers' goroutines) and
// subscription.go (configuration).
package deliver
