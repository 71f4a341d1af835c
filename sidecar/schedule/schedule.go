// Package schedule owns the rules of scheduled delivery (docs/scheduling.md):
// how a publish's deliver_at_ms or deliver_after_ms becomes a delivery time,
// the horizon it must fall within, and the reserved headers that carry the
// time (and a cancel) in the log. It is pure: callers pass the time; it
// imports nothing of Spool but apierr and the engine's record type.
package schedule

import (
	"strconv"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/apierr"
)

// Header carries a scheduled message's delivery time in the log, as decimal
// Unix milliseconds. Only the publish path sets it (names starting with
// "spool-" are refused from producers).
const Header = "spool-deliver-at-ms"

// KeyOrderHeader marks a scheduled message that keeps its key's order
// (PublishMessage.deliver_in_key_order); its value is "1".
const KeyOrderHeader = "spool-deliver-in-key-order"

// CancelHeader marks a cancel record: its value is the id of the scheduled
// message it cancels, in the same partition. A cancel record is never
// delivered; a group that reads it while the message waits for its time
// finishes the message without delivering it.
const CancelHeader = "spool-cancel-scheduled"

// The horizon a delay must fall within, and the farthest delivery time a
// publish may ask for (from now). The upper bound is also capped by the
// topic's retention (Horizon's retention argument).
const (
	MinDelay   = time.Second
	MaxHorizon = 365 * 24 * time.Hour
)

// DeliverAt turns a publish's delivery fields into a delivery time.
// It returns the zero time for a message that is not scheduled (both 0).
// retention is the topic's retention by age (0: kept forever).
//
//   - deliver_at_ms: a time in the past or within MinDelay is accepted (a
//     producer's clock may lag the sidecar's) and is delivered at once;
//   - deliver_after_ms: MinDelay to MaxHorizon, never negative;
//   - either: not past now+MaxHorizon, nor past now+retention (retention
//     would delete the message before it is due).
func DeliverAt(now time.Time, atMs, afterMs int64, retention time.Duration) (time.Time, error) {
	var at time.Time
	switch {
	case atMs != 0 && afterMs != 0:
		return time.Time{}, apierr.New(apierr.InvalidSchedule, "deliver_at_ms and deliver_after_ms are both set: set one of them")
	case atMs < 0:
		return time.Time{}, apierr.New(apierr.InvalidSchedule, "deliver_at_ms is %d, before 1970: send Unix milliseconds (UTC)", atMs)
	case afterMs < 0:
		return time.Time{}, apierr.New(apierr.InvalidSchedule, "deliver_after_ms is %d, negative: send a delay of %v to %v", afterMs, MinDelay, MaxHorizon)
	case atMs > 0:
		at = time.UnixMilli(atMs)
	case afterMs > 0:
		d := time.Duration(afterMs) * time.Millisecond
		if afterMs > int64(MaxHorizon/time.Millisecond) || d < MinDelay {
			return time.Time{}, apierr.New(apierr.InvalidSchedule, "deliver_after_ms is %d: send a delay of %v to %v (%d to %d ms)",
				afterMs, MinDelay, MaxHorizon, MinDelay.Milliseconds(), MaxHorizon.Milliseconds())
		}
		at = now.Add(d)
	default:
		return time.Time{}, nil
	}
	ahead := at.Sub(now)
	if ahead > MaxHorizon {
		return time.Time{}, apierr.New(apierr.InvalidSchedule, "delivery time %s is %v ahead, more than the horizon of %v: schedule it later, closer to its time",
			at.UTC().Format(time.RFC3339Nano), ahead.Round(time.Second), MaxHorizon)
	}
	if retention > 0 && ahead >= retention {
		return time.Time{}, apierr.New(apierr.SchedulePastRetention, "delivery time %s is %v ahead, not within the topic's retention of %v: retention would delete the message before it is due; schedule it sooner or raise the topic's retention",
			at.UTC().Format(time.RFC3339Nano), ahead.Round(time.Second), retention)
	}
	return at, nil
}

// Format is the Header value of a delivery time, rounded up to the
// millisecond (a message is never delivered before its time).
func Format(at time.Time) []byte {
	ms := at.UnixMilli()
	if time.UnixMilli(ms).Before(at) {
		ms++
	}
	return strconv.AppendInt(nil, ms, 10)
}

// Of is the delivery time of a record, if it is a scheduled message.
func Of(r *engine.Record) (time.Time, bool) {
	if v, ok := header(r, Header); ok {
		return Parse(v)
	}
	return time.Time{}, false
}

// InKeyOrder reports whether a scheduled record keeps its key's order.
func InKeyOrder(r *engine.Record) bool {
	_, ok := header(r, KeyOrderHeader)
	return ok
}

// CancelOf is the id a cancel record cancels, if r is one.
func CancelOf(r *engine.Record) (string, bool) {
	v, ok := header(r, CancelHeader)
	return string(v), ok
}

func header(r *engine.Record, name string) ([]byte, bool) {
	for _, h := range r.Headers {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

// Parse reads a Header value; ok is false for a value no publish wrote
// (such a record is delivered as unscheduled).
func Parse(v []byte) (time.Time, bool) {
	ms, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}
