// Package apierr is the catalogue of errors that Spool's gRPC services
// answer: every failure a client can see has a stable Reason (the
// google.rpc.ErrorInfo reason, domain "spool.dev"), and each Reason has
// exactly one gRPC code. docs/errors.md lists them all, with what the user
// should do; a test keeps the page and this file in step.
//
// Inside spoold errors stay Go errors: sentinels and typed errors from the
// engine and the ledger, wrapped with %w, and *Error for failures that
// services detect themselves (a key too large, an unknown group). They
// become gRPC statuses in one place, Status, called by the service edge
// (publish, admin, subscribe) and by nothing deeper. Metrics label
// rejections with Classify, so a metric and the status a client sees always
// name the same reason.
//
// apierr imports engine and ledger (for their errors) and gRPC; it must
// never import a service package (publish, deliver, dlq).
package apierr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"syscall"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/ledger"
)

// Domain is the ErrorInfo domain of every Spool error.
const Domain = "spool.dev"

// Error is a failure a service detected itself, with its reason and a
// message that says what was wrong and what to do.
type Error struct {
	Reason Reason
	// Msg says what was wrong and what to do about it.
	Msg string
	// Metadata goes into ErrorInfo.metadata (for example the limit's name
	// or the index of the offending message); may be nil.
	Metadata map[string]string
	// Err is the cause, if any; its text follows Msg.
	Err error
}

// New returns an *Error with a formatted message.
func New(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error for cause err: Msg says what to do, err says what
// happened underneath.
func Wrap(r Reason, err error, format string, args ...any) *Error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...), Err: err}
}

// With returns e with one more metadata entry (e is changed and returned,
// for chaining where it is built).
func (e *Error) With(key, value string) *Error {
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	e.Metadata[key] = value
	return e
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Classify returns the reason of any error a Spool service returns. It is
// the one place where engine, ledger and context errors get their reasons;
// the order matters where one error can match several cases:
//
//   - *Error (anywhere in the chain): its own reason, decided where the
//     failure was detected.
//   - engine.ErrOutcomeUnknown before context errors: a publish whose
//     caller went away is wrapped in it, and what matters to the producer is
//     that the messages may be stored.
//   - ENOSPC before engine.ErrClosed: a full disk is the cause to report.
//   - a gRPC status (from a peer or from gRPC itself): the Spool reason it
//     carries if it is one of ours, else INTERNAL (a reason outside the
//     catalogue never leaks into a metric label).
//   - anything else is INTERNAL: a bug or an environment failure, logged.
func Classify(err error) Reason {
	var e *Error
	var notLeader *engine.NotLeaderError
	var conflict *engine.TopicConflictError
	var outOfRange *engine.OffsetOutOfRangeError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		if _, ok := lookup(e.Reason); ok {
			return e.Reason
		}
		return Internal
	case errors.Is(err, engine.ErrOutcomeUnknown):
		return OutcomeUnknown
	case errors.Is(err, syscall.ENOSPC):
		return DiskFull
	case errors.Is(err, engine.ErrUnknownTopic):
		return UnknownTopic
	case errors.Is(err, engine.ErrDeleteUnsupported):
		return TopicDeleteUnsupported
	case errors.Is(err, engine.ErrTopicInUse):
		return TopicInUse
	case errors.Is(err, engine.ErrUnknownNode):
		return UnknownNode
	case errors.Is(err, engine.ErrDecommissionRefused):
		return DecommissionRefused
	case errors.Is(err, engine.ErrMoveRefused):
		return MoveRefused
	case errors.Is(err, engine.ErrClusterVersion):
		return ClusterVersion
	case errors.Is(err, engine.ErrUnsupported):
		return BackendUnsupported
	case errors.Is(err, engine.ErrInvalidMove):
		return InvalidReplicas
	case errors.Is(err, engine.ErrUnknownPartition):
		return BadPartition
	case errors.Is(err, engine.ErrTopicNameCase):
		return TopicExists
	case errors.Is(err, engine.ErrPartitionBudget), errors.Is(err, engine.ErrFileBudget):
		return InvalidTopicSpec
	case errors.As(err, &notLeader):
		return NotLeader
	case errors.Is(err, engine.ErrNoLeader), errors.Is(err, engine.ErrOffsetsUnknown):
		return NoLeader
	case errors.Is(err, engine.ErrNotPlaced):
		return TopicNotPlaced
	case errors.As(err, &conflict):
		return TopicConflict
	case errors.Is(err, engine.ErrQuarantined):
		return PartitionQuarantined
	case errors.As(err, &outOfRange):
		return OffsetOutOfRange
	case errors.Is(err, engine.ErrBatchTooLarge):
		return MessageTooLarge
	case errors.Is(err, engine.ErrClosed):
		return ShuttingDown
	case errors.Is(err, ledger.ErrUnavailable):
		return LedgerUnavailable
	case errors.Is(err, context.Canceled):
		return Cancelled
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	}
	if st, ok := status.FromError(err); ok {
		if r := reasonOf(st); r != "" {
			return r
		}
	}
	return Internal
}

// Status turns err into the gRPC status a client receives: the code of
// its reason, a message that says what to do, and an ErrorInfo with the
// reason. It is the only function that decides gRPC codes; services return
// Status(err).Err() (or ToStatus). A status that is already a gRPC status
// (from a peer, or made by gRPC) is returned unchanged.
func Status(err error) *status.Status {
	if err == nil {
		return nil
	}
	var e *Error
	if st, ok := status.FromError(err); ok && !errors.As(err, &e) {
		return st
	}
	r := Classify(err)
	msg := err.Error()
	var md map[string]string
	if errors.As(err, &e) {
		md = maps.Clone(e.Metadata)
	} else if hint := hintOf(err, r); hint != "" {
		// Engine and ledger errors say what happened; add what to do.
		msg += ": " + hint
	}
	st := status.New(r.Code(), msg)
	if withInfo, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: string(r), Domain: Domain, Metadata: md}); derr == nil {
		st = withInfo
	}
	return st
}

// hintOf is what to do about err of reason r: the reason's hint, but for
// the few errors of a reason whose cause needs another remedy.
func hintOf(err error, r Reason) string {
	if errors.Is(err, engine.ErrOffsetsUnknown) {
		return "this spoold started moments ago and has not read the cluster's state yet: retry in a second"
	}
	return lookupHint(r)
}

// ToStatus is Status(err).Err(): nil for nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	return Status(err).Err()
}

// ReasonOf returns the Spool reason carried by a status (its ErrorInfo in
// domain spool.dev), or "" when it carries none of ours.
func ReasonOf(st *status.Status) Reason {
	return reasonOf(st)
}

func reasonOf(st *status.Status) Reason {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == Domain {
			if _, known := lookup(Reason(ei.GetReason())); known {
				return Reason(ei.GetReason())
			}
		}
	}
	return ""
}
