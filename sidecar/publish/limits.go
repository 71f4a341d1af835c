package publish

import (
	"fmt"
	"strings"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Limits bound what one publish may carry. Each has a name in the config
// (limits.*) and a reason code in errors and in spool_publish_rejected_total.
type Limits struct {
	MaxMessageBytes  int // key + payload + headers of one message
	MaxKeyBytes      int
	MaxIDBytes       int
	MaxHeaders       int
	MaxHeaderBytes   int // all header names and values of one message
	MaxBatchMessages int // messages in one request
}

// DefaultLimits are the documented defaults (docs/configuration.md).
var DefaultLimits = Limits{
	MaxMessageBytes:  1 << 20,
	MaxKeyBytes:      1 << 10,
	MaxIDBytes:       128,
	MaxHeaders:       64,
	MaxHeaderBytes:   16 << 10,
	MaxBatchMessages: 10_000,
}

// ReservedHeaderPrefix marks headers that Spool itself sets (dead-letter
// metadata, trace context handling); producers may not send them.
const ReservedHeaderPrefix = "spool-"

// Reasons for rejected messages (stable: clients may match on them).
const (
	ReasonMessageTooLarge = "MESSAGE_TOO_LARGE"
	ReasonKeyTooLarge     = "KEY_TOO_LARGE"
	ReasonIDTooLarge      = "ID_TOO_LARGE"
	ReasonTooManyHeaders  = "TOO_MANY_HEADERS"
	ReasonHeadersTooLarge = "HEADERS_TOO_LARGE"
	ReasonReservedHeader  = "RESERVED_HEADER"
	ReasonBatchTooLarge   = "BATCH_TOO_LARGE"
	ReasonBadPartition    = "BAD_PARTITION"
	ReasonUnknownTopic    = "UNKNOWN_TOPIC"
)

// LimitError is a message or request that breaks a limit. Nothing of the
// request is written.
type LimitError struct {
	Reason  string
	Index   int // message index in the request, -1 for the request itself
	Message string
}

func (e *LimitError) Error() string {
	if e.Index < 0 {
		return e.Message
	}
	return fmt.Sprintf("message %d: %s", e.Index, e.Message)
}

// ResourceExhausted reports whether the limit is about size (the gRPC code
// RESOURCE_EXHAUSTED) rather than about form (INVALID_ARGUMENT).
func (e *LimitError) ResourceExhausted() bool {
	switch e.Reason {
	case ReasonMessageTooLarge, ReasonBatchTooLarge, ReasonHeadersTooLarge, ReasonTooManyHeaders:
		return true
	}
	return false
}

// check validates one message and returns its size in bytes.
func (l Limits) check(i int, m *spoolv1.PublishMessage) (int, error) {
	if n := len(m.GetKey()); n > l.MaxKeyBytes {
		return 0, &LimitError{ReasonKeyTooLarge, i, fmt.Sprintf("key is %d bytes, limit max_key_bytes is %d: use a shorter key (an id, not a document)", n, l.MaxKeyBytes)}
	}
	if n := len(m.GetId()); n > l.MaxIDBytes {
		return 0, &LimitError{ReasonIDTooLarge, i, fmt.Sprintf("id is %d bytes, limit max_id_bytes is %d", n, l.MaxIDBytes)}
	}
	if n := len(m.GetHeaders()); n > l.MaxHeaders {
		return 0, &LimitError{ReasonTooManyHeaders, i, fmt.Sprintf("%d headers, limit max_headers is %d", n, l.MaxHeaders)}
	}
	hdrBytes := 0
	for k, v := range m.GetHeaders() {
		if k == "" {
			return 0, &LimitError{ReasonReservedHeader, i, "a header has an empty name"}
		}
		if strings.HasPrefix(strings.ToLower(k), ReservedHeaderPrefix) {
			return 0, &LimitError{ReasonReservedHeader, i, fmt.Sprintf("header %q: names starting with %q are reserved for Spool; rename it", k, ReservedHeaderPrefix)}
		}
		hdrBytes += len(k) + len(v)
	}
	if hdrBytes > l.MaxHeaderBytes {
		return 0, &LimitError{ReasonHeadersTooLarge, i, fmt.Sprintf("headers are %d bytes, limit max_header_bytes is %d", hdrBytes, l.MaxHeaderBytes)}
	}
	size := len(m.GetKey()) + len(m.GetPayload()) + hdrBytes
	if size > l.MaxMessageBytes {
		return 0, &LimitError{ReasonMessageTooLarge, i, fmt.Sprintf("message is %d bytes (key+payload+headers), limit max_message_bytes is %d: store large blobs elsewhere and publish a reference", size, l.MaxMessageBytes)}
	}
	return size + len(m.GetId()), nil
}
