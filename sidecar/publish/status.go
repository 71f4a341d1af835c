package publish

import (
	"context"
	"errors"
	"syscall"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
)

// ErrorDomain is the domain of the ErrorInfo detail on every Spool error.
const ErrorDomain = "spool.dev"

// ToStatus turns an error from publishing into a gRPC status with a stable
// reason (an errdetails.ErrorInfo). It is the one place where publish errors
// get their codes; the mapping says what a producer should do:
//
//	INVALID_ARGUMENT / RESOURCE_EXHAUSTED: fix the message, do not retry as is
//	NOT_FOUND (UNKNOWN_TOPIC): declare the topic in the sidecar's config
//	UNAVAILABLE (NOT_LEADER, DISK_FULL, CLOSED): retry later, same message ids
//	UNKNOWN (OUTCOME_UNKNOWN): may or may not be stored: retry with the same ids
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status (from a peer or a lower layer)
	}
	code, reason := codes.Internal, "INTERNAL"
	var le *LimitError
	var nl *engine.NotLeaderError
	switch {
	case errors.As(err, &le):
		code, reason = codes.InvalidArgument, le.Reason
		if le.ResourceExhausted() {
			code = codes.ResourceExhausted
		}
	case errors.Is(err, engine.ErrUnknownTopic):
		code, reason = codes.NotFound, ReasonUnknownTopic
	case errors.Is(err, engine.ErrUnknownPartition):
		code, reason = codes.InvalidArgument, ReasonBadPartition
	case errors.As(err, &nl):
		code, reason = codes.Unavailable, "NOT_LEADER"
	case errors.Is(err, engine.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code, reason = codes.Unknown, "OUTCOME_UNKNOWN"
	case errors.Is(err, syscall.ENOSPC):
		code, reason = codes.Unavailable, "DISK_FULL"
	case errors.Is(err, engine.ErrClosed):
		code, reason = codes.Unavailable, "SHUTTING_DOWN"
	case errors.Is(err, engine.ErrBatchTooLarge):
		code, reason = codes.ResourceExhausted, ReasonMessageTooLarge
	}
	st, derr := status.New(code, err.Error()).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	if derr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

// reasonOf returns the ErrorInfo reason of a status, or the code's name.
func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return st.Code().String()
}
