// Package breaker owns the circuit breakers of a subscription toward the
// downstreams its app depends on: one breaker per (subscription, downstream),
// the downstream being the name the app tags a RETRY with ("email-provider";
// the sidecar tags a callback's UNAVAILABLE "app"). While any breaker of a
// subscription is open, the subscription is paused: nothing is delivered,
// failures toward the open downstream burn no attempt, nothing is
// dead-lettered. docs/breaker.md is the operator's view.
//
// A Set is a pure state machine in the style of sidecar/tracker: no
// goroutines, no clock, no I/O. The delivery loop that owns it passes the
// current time to every call and does what the answers say:
//
//	n, probe := set.Allow(now)       // before dispatching: -1 no limit, 0 paused, 1 the probe
//	tr := set.ProbeSent(now)         // it sent the probe
//	tr := set.Success(now, isProbe)  // a delivery was acked
//	counted, tr := set.Failure(now, downstream, isProbe) // a RETRY; !counted: give it back uncounted
//	tr := set.ProbeLost(now)         // the probe ended without an outcome (lease expiry, release, …)
//	at, ok := set.NextChange()       // timer: when an open breaker half-opens; then Advance(now)
//
// # States
//
// Closed → Open when the failures toward the downstream reach
// Config.ConsecutiveFailures in a row (no success in between, however long
// that takes), or when at least Config.FailureRatio of the outcomes of the
// current Config.Window failed and the window saw at least
// Config.MinRequests. An ack of any delivery of the subscription is a
// success for every closed breaker; an untagged retry feeds none. Open →
// HalfOpen when its open time is over: Allow already counts it as half-open
// at such a now, and the next call that returns transitions (Advance,
// ProbeSent, ProbeLost, Success, Failure) makes the change and reports it.
// HalfOpen lets exactly one delivery through, the probe; the probe's ack
// closes it, the probe's failure toward it reopens it, anything else about
// the probe (untagged failure, failure toward another downstream, lease
// expiry, release) lets another probe go. Outcomes of other deliveries —
// sent before the breaker opened and coming back late — never move a
// breaker out of Open or HalfOpen: only the probe tests the downstream.
// There is one probe per subscription: it probes every breaker half-open
// when it is sent.
//
// # Growing open time
//
// The first open lasts Config.OpenTimeout; each failed probe reopens the
// breaker for twice as long as the last time, capped at
// Config.MaxOpenTimeout (Config.OpenWait); the growth resets when the
// breaker closes. This package keeps the reopen deadline itself, on the
// caller's clock: NextChange reports it.
//
// # What gobreaker does here
//
// github.com/sony/gobreaker/v2 counts the outcomes of a closed breaker and
// decides the trip: its Counts feed a ReadyToTrip that applies both rules.
// Its open and half-open states are not used, because its timeout is fixed
// and read from time.Now: a breaker leaves the gobreaker behind when it
// opens and starts a fresh one (fresh counts) when it closes. Its Interval
// is not used either: the window is kept here on the caller's clock and a
// window ends by replacing the gobreaker, carrying the run of consecutive
// failures over (the consecutive rule is not windowed). gobreaker still
// calls time.Now internally, but with no interval and no timeout in reach
// the result never depends on it: every decision of a Set depends only on
// the times passed in, and tests are deterministic.
//
// # Limits
//
// A Set holds at most Config.MaxDownstreams (default 64) named breakers,
// plus one shared breaker named OtherDownstream ("other") that counts the
// failures toward every further name, toward names longer than
// MaxDownstreamNameBytes and toward names that are not valid UTF-8: a flood
// of distinct names cannot grow memory. Names are kept for the life of the
// Set.
//
// This package must never import anything from Spool but internal/backoff
// (a pure formula that imports nothing), nor any I/O, Prometheus or gRPC
// package; gobreaker is its only other dependency.
package breaker
