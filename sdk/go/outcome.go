package spool

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// A Handler's return value is the delivery's outcome:
//
//   - nil: ACK, the message is never delivered to this group again.
//   - Retry / RetryDownstream: RETRY after the given delay (0 = the
//     subscription's backoff), with the error text shown to the next attempt.
//   - DeadLetter: DEAD_LETTER now, with the reason recorded in the DLQ entry.
//   - Release: RELEASE, handed back untouched: delivered again at once
//     (to this or another consumer) without counting an attempt.
//   - any other error: RETRY after the subscription's backoff, with err.Error().
//   - a panic: recovered, RETRY with the panic text.
//
// Outcome errors may be wrapped (fmt.Errorf("...: %w", spool.Retry(...)));
// the SDK finds them with errors.As.

// RetryError asks for the delivery to be retried. Build it with Retry or
// RetryDownstream.
type RetryError struct {
	// After is the minimum delay before the next attempt; 0 means the
	// subscription's backoff.
	After time.Duration
	// Downstream names the dependency that failed (feeds its circuit breaker
	// in the sidecar); empty when none.
	Downstream string
	// Err is the cause, shown to the next attempt as Message.LastError.
	Err error
}

func (e *RetryError) Error() string {
	var b strings.Builder
	b.WriteString("retry")
	if e.Downstream != "" {
		b.WriteString(" (downstream ")
		b.WriteString(e.Downstream)
		b.WriteString(")")
	}
	if e.After > 0 {
		b.WriteString(" after ")
		b.WriteString(e.After.String())
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *RetryError) Unwrap() error { return e.Err }

// Retry returns the error a Handler returns to have the message delivered
// again no sooner than after (0 = the subscription's backoff). err is the
// cause; its text becomes the next attempt's Message.LastError.
func Retry(after time.Duration, err error) error {
	return &RetryError{After: after, Err: err}
}

// RetryDownstream is Retry for a failure of a named dependency (for example
// "email-provider"). The sidecar counts such retries toward that
// downstream's circuit breaker and pauses the subscription while it is open.
func RetryDownstream(downstream string, after time.Duration, err error) error {
	return &RetryError{After: after, Downstream: downstream, Err: err}
}

// DeadLetterError moves the delivery to the subscription's dead-letter topic.
// Build it with DeadLetter.
type DeadLetterError struct {
	// Reason says why the message can never succeed; it is kept in the DLQ entry.
	Reason string
}

func (e *DeadLetterError) Error() string { return "dead letter: " + e.Reason }

// DeadLetter returns the error a Handler returns for a message that can never
// succeed (poison: bad schema, unknown customer...). The message moves to the
// subscription's dead-letter topic now, without further attempts.
func DeadLetter(reason string) error {
	return &DeadLetterError{Reason: reason}
}

// ReleaseError hands the delivery back without counting an attempt. Build
// it with Release.
type ReleaseError struct{}

func (*ReleaseError) Error() string { return "released" }

// Release returns the error a Handler returns to hand a message back
// untouched — it did nothing with it (this instance is shutting down, or
// the message is for someone else): the sidecar delivers it again at once,
// at the same attempt number. A handler that did work and failed should
// Retry instead, so that max_attempts bounds the tries.
func Release() error { return &ReleaseError{} }

// maxErrorTextBytes bounds the error text and reason sent with a Nack, so a
// huge error (a whole response body) cannot make a settlement frame fail.
const maxErrorTextBytes = 4096

// settlement is one outcome waiting in a session's send queue. Values, not
// protos: the sender turns them into reused proto messages.
type settlement struct {
	ref          deliveryRef
	outcome      spoolv1.Outcome // ACK, RETRY, DEAD_LETTER, RELEASE
	retryAfter   uint32          // ms
	reason       string
	errText      string
	downstream   string
	returnCredit bool
}

type deliveryRef struct {
	topic     string
	partition int32
	offset    int64
	token     uint64
}

// settlementFor maps a handler's result to the settlement sent to the sidecar.
func settlementFor(ref deliveryRef, err error) settlement {
	s := settlement{ref: ref, returnCredit: true}
	if err == nil {
		s.outcome = spoolv1.Outcome_OUTCOME_ACK
		return s
	}
	var rel *ReleaseError
	if errors.As(err, &rel) {
		s.outcome = spoolv1.Outcome_OUTCOME_RELEASE
		return s
	}
	var dl *DeadLetterError
	if errors.As(err, &dl) {
		s.outcome = spoolv1.Outcome_OUTCOME_DEAD_LETTER
		s.reason = cleanText(dl.Reason)
		s.errText = cleanText(err.Error())
		return s
	}
	s.outcome = spoolv1.Outcome_OUTCOME_RETRY
	s.errText = cleanText(err.Error())
	var re *RetryError
	if errors.As(err, &re) {
		s.downstream = cleanText(re.Downstream)
		if re.After > 0 {
			ms := re.After.Milliseconds()
			if ms == 0 {
				ms = 1 // a positive delay below 1 ms still asks for a delay
			}
			if ms > int64(^uint32(0)) {
				ms = int64(^uint32(0))
			}
			s.retryAfter = uint32(ms)
		}
	}
	return s
}

// cleanText makes text safe for a proto string: valid UTF-8 (or the whole
// frame fails to marshal) and at most maxErrorTextBytes.
func cleanText(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) > maxErrorTextBytes {
		cut := maxErrorTextBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func panicError(v any) error {
	return fmt.Errorf("handler panicked: %v", v)
}
