package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/spoolmq/spool/sidecar/apierr"
)

func TestDeliverAt(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		name          string
		atMs, afterMs int64
		retention     time.Duration
		want          time.Time
		reason        apierr.Reason
	}{
		{name: "not scheduled", want: time.Time{}},
		{name: "delay", afterMs: 1500, want: now.Add(1500 * time.Millisecond)},
		{name: "delay of a second", afterMs: 1000, want: now.Add(time.Second)},
		{name: "delay of a year", afterMs: ms(MaxHorizon), want: now.Add(MaxHorizon)},
		{name: "delay under a second", afterMs: 999, reason: apierr.InvalidSchedule},
		{name: "negative delay", afterMs: -1, reason: apierr.InvalidSchedule},
		{name: "delay past a year", afterMs: ms(MaxHorizon) + 1, reason: apierr.InvalidSchedule},
		{name: "huge delay", afterMs: 1 << 62, reason: apierr.InvalidSchedule},
		{name: "both", atMs: now.UnixMilli() + 5000, afterMs: 5000, reason: apierr.InvalidSchedule},
		{name: "time ahead", atMs: now.UnixMilli() + 5000, want: now.Add(5 * time.Second)},
		{name: "time in the past is due at once", atMs: now.UnixMilli() - 60_000, want: now.Add(-time.Minute)},
		{name: "time now", atMs: now.UnixMilli(), want: now},
		{name: "negative time", atMs: -5, reason: apierr.InvalidSchedule},
		{name: "time past a year", atMs: now.Add(MaxHorizon).UnixMilli() + 1, reason: apierr.InvalidSchedule},
		{name: "within retention", afterMs: ms(week - time.Second), retention: week, want: now.Add(week - time.Second)},
		{name: "at retention", afterMs: ms(week), retention: week, reason: apierr.SchedulePastRetention},
		{name: "time past retention", atMs: now.Add(2 * week).UnixMilli(), retention: week, reason: apierr.SchedulePastRetention},
		{name: "past time with retention", atMs: now.Add(-2 * week).UnixMilli(), retention: week, want: now.Add(-2 * week)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeliverAt(now, tc.atMs, tc.afterMs, tc.retention)
			if tc.reason != "" {
				var e *apierr.Error
				if !errors.As(err, &e) || e.Reason != tc.reason {
					t.Fatalf("DeliverAt = %v, %v; want reason %s", got, err, tc.reason)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("DeliverAt = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_800_000_123_456)
	if got, ok := Parse(Format(at)); !ok || !got.Equal(at) {
		t.Fatalf("Parse(Format(%v)) = %v, %v", at, got, ok)
	}
	late := at.Add(time.Microsecond)
	if got, _ := Parse(Format(late)); got.Before(late) {
		t.Fatalf("Parse(Format(%v)) = %v: before the time", late, got)
	}
	for _, v := range []string{"", "x", "-5", "0", "12.5"} {
		if got, ok := Parse([]byte(v)); ok {
			t.Errorf("Parse(%q) = %v, true; want not ok", v, got)
		}
	}
}
