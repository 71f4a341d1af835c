package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes, documented in docs/cli.md.
const (
	exitOK          = 0 // the command did what it was asked
	exitFailed      = 1 // the sidecar refused or failed the operation, or the user declined
	exitUsage       = 2 // bad command line: unknown command, bad flag, missing argument
	exitUnreachable = 3 // no sidecar answered at the address
)

// exitError is an error with its exit code and a one-line message that
// says what was wrong and what to do.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

func failed(format string, args ...any) error {
	return &exitError{code: exitFailed, msg: fmt.Sprintf(format, args...)}
}

// reasonOf is the ErrorInfo reason of a status from spoold (docs/errors.md),
// or "" for a status gRPC made on this side (no connection, deadline).
func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// callError turns the error of a call to the sidecar at addr into an
// exitError. what names the operation ("list topics"). The sidecar's
// messages already say what to do (docs/errors.md); spool adds the reason
// so that it can be looked up. A status without a reason came from gRPC on
// this side: the sidecar did not answer.
func callError(what, addr, flag string, err error) error {
	if errors.Is(err, context.Canceled) {
		return failed("%s: interrupted", what)
	}
	st, ok := status.FromError(err)
	if !ok {
		return failed("%s: %v", what, err)
	}
	reason := reasonOf(st)
	msg := oneLine(st.Message())
	switch {
	case reason != "" && strings.HasPrefix(msg, what):
		return failed("%s (%s)", msg, reason) // spoold named the operation already
	case reason != "":
		return failed("%s: %s (%s)", what, msg, reason)
	case st.Code() == codes.Unavailable:
		// gRPC's text ends with the cause: "...: connect: connection refused".
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = strings.Trim(msg[i+2:], `"`)
		}
		return &exitError{code: exitUnreachable, msg: fmt.Sprintf("%s: no sidecar answering at %s (%s): is spoold running? start one with `spool dev`, or give its address with %s", what, addr, msg, flag)}
	case st.Code() == codes.DeadlineExceeded:
		return &exitError{code: exitUnreachable, msg: fmt.Sprintf("%s: the sidecar at %s did not answer in time: check that it is running and not overloaded, or allow more with --timeout", what, addr)}
	case st.Code() == codes.Canceled:
		return failed("%s: interrupted", what)
	case st.Code() == codes.Unauthenticated:
		return failed("%s: %s: give spool a token (--token-file, %s or %s) or a client certificate (--cert and --key), or a context that has one (--context)", what, msg, envTokenFile, envToken)
	case st.Code() == codes.PermissionDenied:
		return failed("%s: %s: use a token or certificate with that role (PermissionDenied)", what, msg)
	case st.Code() == codes.Unimplemented:
		return failed("%s: the sidecar at %s does not know this call (%s): upgrade spoold to the version of this spool", what, addr, msg)
	default:
		return failed("%s: %s (%s)", what, msg, st.Code())
	}
}

// oneLine keeps a message on one line.
func oneLine(s string) string {
	return termText(strings.Join(strings.Fields(s), " "))
}
