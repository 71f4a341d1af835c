package apierr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/ledger"
)

// Every error the engine, the ledger and the services produce gets the
// code and reason docs/errors.md promises, wrapped or not.
func TestStatusMapsEveryError(t *testing.T) {
	diskFull := fmt.Errorf("spool log: disk full during write of 00000.log; appends resume when space returns: %w",
		&os.PathError{Op: "write", Path: "00000.log", Err: syscall.ENOSPC})
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason Reason
	}{
		{"unknown topic", fmt.Errorf("%w %q: declare it", engine.ErrUnknownTopic, "nope"), codes.NotFound, UnknownTopic},
		{"unknown partition", fmt.Errorf("%w 9 of topic %q", engine.ErrUnknownPartition, "t"), codes.InvalidArgument, BadPartition},
		{"topic conflict", &engine.TopicConflictError{Topic: "t", Stored: 4, Declared: 2}, codes.FailedPrecondition, TopicConflict},
		{"closed", fmt.Errorf("topic %q partition 0: %w", "t", fmt.Errorf("%w: log closed", engine.ErrClosed)), codes.Unavailable, ShuttingDown},
		{"offsets not known yet", fmt.Errorf("%w: t/0: not read yet", engine.ErrOffsetsUnknown), codes.Unavailable, NoLeader},
		{"batch too large", fmt.Errorf("%w: 1 records encode to 5000000 bytes", engine.ErrBatchTooLarge), codes.InvalidArgument, MessageTooLarge},
		{"disk full", fmt.Errorf("topic %q partition 1: %w", "t", diskFull), codes.ResourceExhausted, DiskFull},
		{"disk full while closing", fmt.Errorf("%w: %w", engine.ErrClosed, diskFull), codes.ResourceExhausted, DiskFull},
		{"outcome unknown", fmt.Errorf("%w: leader changed", engine.ErrOutcomeUnknown), codes.Unknown, OutcomeUnknown},
		{"caller gone during publish", fmt.Errorf("%w: %w", engine.ErrOutcomeUnknown, context.Canceled), codes.Unknown, OutcomeUnknown},
		{"not leader", &engine.NotLeaderError{Topic: "t", Partition: 1, Leader: "n2"}, codes.Unavailable, NotLeader},
		{"offset out of range", &engine.OffsetOutOfRangeError{}, codes.OutOfRange, OffsetOutOfRange},
		{"quarantined", fmt.Errorf("topic %q partition 0: %w", "t", engine.ErrQuarantined), codes.FailedPrecondition, PartitionQuarantined},
		{"ledger unavailable", fmt.Errorf("redrive: resetting: %w", ledger.ErrUnavailable), codes.Unavailable, LedgerUnavailable},
		{"cancelled", context.Canceled, codes.Canceled, Cancelled},
		{"deadline", fmt.Errorf("peek: %w", context.DeadlineExceeded), codes.DeadlineExceeded, DeadlineExceeded},
		{"service error", New(KeyTooLarge, "key is 2000 bytes, limit max_key_bytes is 1024"), codes.InvalidArgument, KeyTooLarge},
		{"wrapped service error", fmt.Errorf("message 3: %w", New(ReservedHeader, "reserved")), codes.InvalidArgument, ReservedHeader},
		{"service error around an engine error", Wrap(UnknownSubscription, engine.ErrUnknownTopic, "no subscription"), codes.NotFound, UnknownSubscription},
		{"unexpected", errors.New("boom"), codes.Internal, Internal},
		{"reason outside the catalogue", &Error{Reason: "MADE_UP", Msg: "x"}, codes.Internal, Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Classify(c.err); got != c.reason {
				t.Fatalf("Classify = %s, want %s", got, c.reason)
			}
			st := Status(c.err)
			if st.Code() != c.code {
				t.Fatalf("code = %s, want %s (%v)", st.Code(), c.code, st.Message())
			}
			if got := ReasonOf(st); got != c.reason {
				t.Fatalf("ErrorInfo reason = %q, want %s", got, c.reason)
			}
			if !strings.Contains(st.Message(), c.err.Error()) {
				t.Fatalf("message %q lost the error's own text %q", st.Message(), c.err.Error())
			}
			// A status survives being sent: what the client decodes has the same reason.
			if got := Classify(st.Err()); got != c.reason {
				t.Fatalf("Classify(status) = %s, want %s", got, c.reason)
			}
		})
	}
}

// Errors from the engine say what happened; the status adds what to do.
func TestStatusSaysWhatToDo(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: log closed", engine.ErrClosed), "retry against the restarted sidecar"},
		{fmt.Errorf("%w", engine.ErrOutcomeUnknown), "retry with the same message ids"},
		{fmt.Errorf("%w: t/0: not read yet", engine.ErrOffsetsUnknown), "retry in a second"},
		{&os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, "free disk space"},
		{errors.New("boom"), "see spoold's log"},
	} {
		if msg := Status(c.err).Message(); !strings.Contains(msg, c.want) {
			t.Errorf("Status(%v).Message() = %q: want it to say %q", c.err, msg, c.want)
		}
	}
}

func TestMetadataTravels(t *testing.T) {
	st := Status(New(KeyTooLarge, "key too large").With("limit", "max_key_bytes").With("index", "3"))
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		info, _ = d.(*errdetails.ErrorInfo)
	}
	if info == nil || info.GetDomain() != Domain || info.GetMetadata()["limit"] != "max_key_bytes" || info.GetMetadata()["index"] != "3" {
		t.Fatalf("ErrorInfo = %v", info)
	}
}

// A status made elsewhere (by gRPC, or by a peer) passes unchanged; one
// without a Spool reason is INTERNAL for metrics, never its own text.
func TestForeignStatus(t *testing.T) {
	in := status.Error(codes.Unavailable, "connection refused")
	if got := Status(in); got.Code() != codes.Unavailable || got.Message() != "connection refused" {
		t.Fatalf("Status changed a foreign status: %v", got)
	}
	if got := Classify(in); got != Internal {
		t.Fatalf("Classify(foreign) = %s, want INTERNAL", got)
	}
	peer, _ := status.New(codes.NotFound, "x").WithDetails(&errdetails.ErrorInfo{Reason: "SOMETHING_ELSE", Domain: Domain})
	if got := Classify(peer.Err()); got != Internal {
		t.Fatalf("Classify(unknown reason) = %s, want INTERNAL", got)
	}
}

// Every reason has a code and a row in docs/errors.md, and the page lists
// no reason the code does not define, each with the code the catalogue
// gives it.
func TestDocsListEveryReason(t *testing.T) {
	b, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| `([A-Z_]+)` \\| (yes|no) \\|").FindAllStringSubmatch(string(b), -1)
	var docs []Reason
	for _, r := range rows {
		reason := Reason(r[1])
		docs = append(docs, reason)
		if _, ok := lookup(reason); !ok {
			t.Errorf("docs/errors.md lists %s, which the catalogue does not define", reason)
			continue
		}
		if codeName(reason.Code()) != r[2] {
			t.Errorf("docs/errors.md gives %s the code %s, the catalogue %s", reason, r[2], codeName(reason.Code()))
		}
		if retry := r[3] == "yes"; retry != reason.Retryable() {
			t.Errorf("docs/errors.md says %s is retryable: %s; Retryable() = %v", reason, r[3], reason.Retryable())
		}
	}
	all := All()
	seen := map[Reason]bool{}
	for _, r := range all {
		if seen[r] {
			t.Errorf("All lists %s twice", r)
		}
		seen[r] = true
		if _, ok := lookup(r); !ok {
			t.Errorf("All lists %s, which lookup does not know", r)
		}
	}
	slices.Sort(all)
	slices.Sort(docs)
	if !slices.Equal(all, docs) {
		t.Fatalf("docs/errors.md and the catalogue disagree:\ncode: %v\ndocs: %v", all, docs)
	}
}

// codeName is the canonical upper-case name of a code, as in the gRPC docs.
func codeName(c codes.Code) string {
	switch c {
	case codes.Canceled:
		return "CANCELLED"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	case codes.DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.OutOfRange:
		return "OUT_OF_RANGE"
	case codes.ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.Unknown:
		return "UNKNOWN"
	case codes.Internal:
		return "INTERNAL"
	}
	return c.String()
}
