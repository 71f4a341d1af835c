package spool

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// How the SDK reads a gRPC error. Every status the sidecar itself sends
// carries an ErrorInfo with a stable reason (DISK_FULL, UNKNOWN_TOPIC, ...);
// statuses made by gRPC on this side of the connection (no connection, a
// frame above the receive limit) carry none. That is how the SDK tells "the
// sidecar answered no" from "nothing answered".

// ErrOutcomeUnknown matches (errors.Is) a publish whose outcome the sidecar
// could not learn: the partition's leader was lost before the message
// committed, and the sidecar's own resends of it — with the same producer
// id and sequence, so that a copy already stored is not stored again — did
// not get an answer within its produce_timeout. The message may or may not
// be stored: publish it again with the same message id; consumers dedupe on
// the id.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// Reason returns the sidecar's reason for an error from this SDK — the
// stable code in the ErrorInfo of its status (UNKNOWN_TOPIC,
// MESSAGE_TOO_LARGE, DISK_FULL, OUTCOME_UNKNOWN ...; docs/errors.md) —
// or "" when the error carries none (the sidecar was not reached, or the
// error is not from a call to it). It looks through wrapping.
func Reason(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if r := errorReason(e); r != "" {
			return r
		}
	}
	return ""
}

// errorReason is the ErrorInfo reason of a gRPC status error, or "".
func errorReason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// sidecarUnreachable reports whether err means the sidecar could not be
// reached (no process listening, connection refused or lost): UNAVAILABLE
// without a reason. A sidecar that answers UNAVAILABLE with a reason
// (DISK_FULL, NOT_LEADER, SHUTTING_DOWN) is running: asking the user whether
// spoold runs would send them the wrong way.
func sidecarUnreachable(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && errorReason(err) == ""
}

// frameTooLarge reports whether a Recv error is this client's gRPC refusing
// a frame above its receive limit (RESOURCE_EXHAUSTED without a reason; the
// sidecar's own RESOURCE_EXHAUSTED statuses carry one).
func frameTooLarge(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && errorReason(err) == ""
}

// errFrameTooLarge marks a stream that broke on a frame this client cannot
// receive: reconnecting would get the same frame.
var errFrameTooLarge = errors.New("frame above the receive limit")
