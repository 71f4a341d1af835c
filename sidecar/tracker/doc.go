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
// anything that does I/O; its only Spool dependency is internal/backoff.
package tracker

// Semantics decided here (each checked by the model test, model_test.go):
//
//   - Attempt numbers count from 1; a record's first delivery is attempt
//     PriorAttempts+1. An attempt ends as failed on Retry, on lease expiry
//     (reported by Tick as EventLeaseExpired) and on Release with
//     countAttempt (the consumer's stream closed: redelivered at once, no
//     backoff). When the attempt that failed was the MaxAttempts-th, the
//     message goes to the dead-letter output with ReasonMaxAttempts instead;
//     this holds for counted releases too (an app that crashes on a message
//     every time must not loop forever). Release without countAttempt gives
//     the message back with its attempt number unchanged.
//   - The retry of failed attempt n is due at now + max(retry_after,
//     Backoff.Delay(n, Rand())), retry_after capped at MaxRetryAfter.
//   - Ordering: key (messages with an empty key are unordered), partition
//     (one lane for the whole partition) or none. Within a lane only the
//     oldest unfinished message is ever delivered; a lane whose head waits
//     for its retry is parked, and Parked counts parked lanes only
//     (unordered messages waiting for a retry block nobody).
//   - A message handed to the dead-letter output leaves its lane at once:
//     the key's next message flows while the dead-letter publish is under
//     way. It stays in the window (the committed offset does not pass it)
//     until DeadLettered confirms the publish; DeadLetterFailed offers it
//     again through TakeDeadLetters after a backoff, so it is never lost.
//   - Fencing: every delivery gets a new token (strictly increasing, never
//     0). An answer whose token is not the message's latest fails with
//     ErrStaleToken and changes nothing; an answer for a message no longer
//     in flight fails with ErrNotInFlight (duplicate acks of messages below
//     the committed offset get ErrUnknownOffset). One exception: an Ack with
//     the latest token after the lease expired, while the message still
//     waits for its retry, is accepted: the work was done and nobody else
//     holds the message.
//   - Extend sets the lease deadline to what the app asks (it may also
//     shorten it), capped at now+MaxLease; a deadline not after now is
//     ErrBadDeadline.
//   - Deliveries are handed out lowest offset first, so the committed
//     offset advances as fast as possible.
//   - Downstream names of retries (for the circuit breaker) are the
//     sidecar's business, not the tracker's: Pause is its lever here.
//
// Cost: Add, Next, Ack, Retry, Extend, Release, Tick per item and
// DeadLettered are O(log n) in the window (heaps, binary search over the
// window's ring); Committed is O(window). Steady state allocates nothing per
// message: the ring, heaps and key map grow to the window's size and stay.
