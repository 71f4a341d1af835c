package tracker

import "errors"

// Errors returned by the Tracker, always wrapped with the offset and token
// concerned; compare with errors.Is.
var (
	// ErrStaleToken: the fencing token is not the one of the message's latest
	// delivery (it was redelivered since, or the token was never issued).
	// Nothing changed.
	ErrStaleToken = errors.New("stale fencing token")
	// ErrUnknownOffset: the offset is not held by the tracker (never added, or
	// already complete and below the committed offset).
	ErrUnknownOffset = errors.New("offset not in the tracker's window")
	// ErrNotInFlight: the token is current but the message is not in flight
	// any more (already acked, released, retried or handed to the dead-letter
	// output). Nothing changed.
	ErrNotInFlight = errors.New("message not in flight")
	// ErrNotDeadLettering: DeadLettered/DeadLetterFailed for a message that
	// was not taken with TakeDeadLetters.
	ErrNotDeadLettering = errors.New("message not awaiting a dead-letter publish")
	// ErrWindowFull: Add was given more records than Wants allowed.
	ErrWindowFull = errors.New("window full")
	// ErrTooManyParked: Add was called while MaxParkedKeys keys are parked.
	ErrTooManyParked = errors.New("too many parked keys")
	// ErrOffsetOrder: Add was given an offset not above the previous one.
	ErrOffsetOrder = errors.New("offsets must increase")
	// ErrBadRecord: a record field is out of range.
	ErrBadRecord = errors.New("bad record")
	// ErrBadDeadline: Extend was given a deadline not after now.
	ErrBadDeadline = errors.New("lease deadline not in the future")
)
