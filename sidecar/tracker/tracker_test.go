package tracker

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/backoff"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// half makes the jitter deterministic: every delay is half its cap.
func half() float64 { return 0.5 }

func newTracker(t *testing.T, cfg Config) *Tracker[string] {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = half
	}
	tr, err := New[string](cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func recs(keys ...string) []Record[string] {
	out := make([]Record[string], len(keys))
	for i, k := range keys {
		out[i] = Record[string]{Offset: int64(i), Key: k, Value: k}
	}
	return out
}

func offsets(ds []Delivery[string]) []int64 {
	var out []int64
	for _, d := range ds {
		out = append(out, d.Offset)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustCheck(t *testing.T, tr *Tracker[string]) {
	t.Helper()
	if err := tr.checkInternal(); err != nil {
		t.Fatal(err)
	}
}

func TestPoisonKeyParksOnlyItself(t *testing.T) {
	tr := newTracker(t, Config{Backoff: backoff.Config{Base: time.Second}})
	must(t, tr.Add(t0, recs("a", "b", "a", "b", "", "")...))
	got := tr.Next(t0, 100, nil)
	if want := []int64{0, 1, 4, 5}; !slices.Equal(offsets(got), want) {
		t.Fatalf("first deliveries %v, want %v (one per key, empty keys unordered)", offsets(got), want)
	}
	must(t, tr.Retry(t0, 0, got[0].Token, 0, "downstream 503")) // a fails: parked
	must(t, tr.Ack(t0, 1, got[1].Token))                        // b succeeds
	if tr.Parked() != 1 {
		t.Fatalf("Parked = %d, want 1", tr.Parked())
	}
	got = tr.Next(t0, 100, nil)
	if want := []int64{3}; !slices.Equal(offsets(got), want) {
		t.Fatalf("while a is parked, deliveries %v, want %v (b flows, a waits)", offsets(got), want)
	}
	// Backoff of attempt 1 is half of 1s: a's retry is due at t0+500ms.
	if d, _ := tr.NextDeadline(); !d.Equal(t0.Add(500 * time.Millisecond)) {
		t.Fatalf("NextDeadline = %v", d)
	}
	now := t0.Add(500 * time.Millisecond)
	tr.Tick(now, nil)
	got = tr.Next(now, 100, nil)
	if len(got) != 1 || got[0].Offset != 0 || got[0].Attempt != 2 || got[0].LastError != "downstream 503" {
		t.Fatalf("retry = %+v, want offset 0 attempt 2 with the last error", got)
	}
	if tr.Parked() != 0 {
		t.Fatalf("Parked = %d after retry due", tr.Parked())
	}
	mustCheck(t, tr)
}

func TestLeaseExpiryRedeliversWithNextAttempt(t *testing.T) {
	tr := newTracker(t, Config{VisibilityTimeout: 10 * time.Second, Backoff: backoff.Config{Base: 2 * time.Second}})
	must(t, tr.Add(t0, recs("k")...))
	d1 := tr.Next(t0, 1, nil)[0]
	if !d1.Deadline.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("deadline %v", d1.Deadline)
	}
	if ev := tr.Tick(t0.Add(9*time.Second), nil); len(ev) != 0 {
		t.Fatalf("events before the deadline: %v", ev)
	}
	now := t0.Add(10 * time.Second)
	ev := tr.Tick(now, nil)
	want := []Event{{Kind: EventLeaseExpired, Offset: 0, Key: "k", Attempt: 1, Token: d1.Token}}
	if !slices.Equal(ev, want) {
		t.Fatalf("Tick events %+v, want %+v", ev, want)
	}
	if got := tr.Next(now, 1, nil); len(got) != 0 {
		t.Fatalf("redelivered before the backoff: %+v", got)
	}
	now = now.Add(time.Second) // half of the 2s base
	tr.Tick(now, nil)
	d2 := tr.Next(now, 1, nil)[0]
	if d2.Attempt != 2 || d2.Token <= d1.Token || d2.LastError != ErrTextLeaseExpired || !d2.FirstDelivered.Equal(t0) {
		t.Fatalf("redelivery %+v", d2)
	}
	// The first delivery's answers are fenced off now.
	for name, err := range map[string]error{
		"ack":         tr.Ack(now, 0, d1.Token),
		"retry":       tr.Retry(now, 0, d1.Token, 0, "x"),
		"dead-letter": tr.DeadLetter(now, 0, d1.Token, "x"),
		"release":     tr.Release(now, 0, d1.Token, false),
	} {
		if !errors.Is(err, ErrStaleToken) {
			t.Errorf("%s with the old token: %v, want ErrStaleToken", name, err)
		}
	}
	if _, err := tr.Extend(now, 0, d1.Token, now.Add(time.Minute)); !errors.Is(err, ErrStaleToken) {
		t.Errorf("extend with the old token: %v", err)
	}
	must(t, tr.Ack(now, 0, d2.Token))
	if next, _ := tr.Committed(nil); next != 1 {
		t.Fatalf("committed %d, want 1", next)
	}
	mustCheck(t, tr)
}

func TestLateAckAfterLeaseExpiryIsAccepted(t *testing.T) {
	tr := newTracker(t, Config{VisibilityTimeout: time.Second})
	must(t, tr.Add(t0, recs("k", "k")...))
	d := tr.Next(t0, 1, nil)[0]
	tr.Tick(t0.Add(time.Second), nil) // expired, waiting for its retry
	must(t, tr.Ack(t0.Add(1100*time.Millisecond), 0, d.Token))
	if got := tr.Next(t0.Add(1100*time.Millisecond), 9, nil); !slices.Equal(offsets(got), []int64{1}) {
		t.Fatalf("after the late ack, deliveries %v, want [1]", offsets(got))
	}
	mustCheck(t, tr)
}

func TestWindowFullStopsFetching(t *testing.T) {
	tr := newTracker(t, Config{WindowMessages: 3, MaxInFlight: 3})
	if tr.Wants() != 3 {
		t.Fatalf("Wants = %d", tr.Wants())
	}
	must(t, tr.Add(t0, recs("a", "b", "c")...))
	if tr.Wants() != 0 {
		t.Fatalf("Wants = %d with a full window", tr.Wants())
	}
	if err := tr.Add(t0, Record[string]{Offset: 3}); !errors.Is(err, ErrWindowFull) {
		t.Fatalf("Add to a full window: %v", err)
	}
	ds := tr.Next(t0, 3, nil)
	must(t, tr.Ack(t0, 1, ds[1].Token)) // not the lowest: the window does not slide
	if tr.Wants() != 0 {
		t.Fatalf("Wants = %d", tr.Wants())
	}
	must(t, tr.Ack(t0, 0, ds[0].Token)) // 0 and 1 complete: slides by 2
	if tr.Wants() != 2 {
		t.Fatalf("Wants = %d, want 2", tr.Wants())
	}
	mustCheck(t, tr)
}

func TestParkedKeysLimitStopsFetching(t *testing.T) {
	tr := newTracker(t, Config{MaxParkedKeys: 2})
	must(t, tr.Add(t0, recs("a", "b", "c")...))
	ds := tr.Next(t0, 3, nil)
	must(t, tr.Retry(t0, 0, ds[0].Token, time.Minute, "x"))
	if tr.Wants() == 0 {
		t.Fatal("Wants = 0 with one parked key")
	}
	must(t, tr.Retry(t0, 1, ds[1].Token, time.Minute, "x"))
	if tr.Wants() != 0 {
		t.Fatalf("Wants = %d with two parked keys", tr.Wants())
	}
	if err := tr.Add(t0, Record[string]{Offset: 3, Key: "d"}); !errors.Is(err, ErrTooManyParked) {
		t.Fatalf("Add: %v", err)
	}
	mustCheck(t, tr)
}

func TestMaxAttemptsThenDeadLetterUntilConfirmed(t *testing.T) {
	tr := newTracker(t, Config{MaxAttempts: 2, Backoff: backoff.Config{Base: time.Second}})
	must(t, tr.Add(t0, recs("k", "k")...))
	now := t0
	for attempt := 1; attempt <= 2; attempt++ {
		tr.Tick(now, nil)
		d := tr.Next(now, 1, nil)[0]
		if d.Offset != 0 || d.Attempt != attempt {
			t.Fatalf("delivery %+v, want offset 0 attempt %d", d, attempt)
		}
		must(t, tr.Retry(now, 0, d.Token, 0, "bad payload"))
		now = now.Add(time.Minute)
	}
	dl := tr.TakeDeadLetters(nil)
	if len(dl) != 1 || dl[0].Reason != ReasonMaxAttempts || dl[0].Attempts != 2 || dl[0].LastError != "bad payload" {
		t.Fatalf("dead letters %+v", dl)
	}
	// The key moves on while the dead-letter publish is under way.
	if d := tr.Next(now, 1, nil); len(d) != 1 || d[0].Offset != 1 {
		t.Fatalf("next of the key: %+v", d)
	}
	must(t, tr.DeadLetterFailed(now, 0))
	if next, _ := tr.Committed(nil); next != 0 {
		t.Fatalf("committed %d before the dead-letter publish was confirmed", next)
	}
	if got := tr.TakeDeadLetters(nil); len(got) != 0 {
		t.Fatalf("offered again before its backoff: %+v", got)
	}
	due, _ := tr.NextDeadline()
	tr.Tick(due, nil)
	if got := tr.TakeDeadLetters(nil); len(got) != 1 || got[0].Offset != 0 {
		t.Fatalf("offered again: %+v", got)
	}
	must(t, tr.DeadLettered(0))
	if next, _ := tr.Committed(nil); next != 1 {
		t.Fatalf("committed %d, want 1", next)
	}
	if err := tr.DeadLettered(0); !errors.Is(err, ErrUnknownOffset) {
		t.Fatalf("second confirmation: %v", err)
	}
	mustCheck(t, tr)
}

func TestPriorAttemptsUsedUpGoStraightToDeadLetter(t *testing.T) {
	tr := newTracker(t, Config{MaxAttempts: 3})
	must(t, tr.Add(t0,
		Record[string]{Offset: 0, Key: "k", PriorAttempts: 3, LastError: "timeout"},
		Record[string]{Offset: 1, Key: "k", PriorAttempts: 2}))
	dl := tr.TakeDeadLetters(nil)
	if len(dl) != 1 || dl[0].Offset != 0 || dl[0].Attempts != 3 || dl[0].LastError != "timeout" {
		t.Fatalf("dead letters %+v", dl)
	}
	d := tr.Next(t0, 9, nil)
	if len(d) != 1 || d[0].Offset != 1 || d[0].Attempt != 3 {
		t.Fatalf("deliveries %+v, want offset 1 as attempt 3", d)
	}
	mustCheck(t, tr)
}

func TestRelease(t *testing.T) {
	tr := newTracker(t, Config{})
	must(t, tr.Add(t0, recs("k")...))
	d := tr.Next(t0, 1, nil)[0]
	must(t, tr.Release(t0, 0, d.Token, false)) // drained, never started
	d = tr.Next(t0, 1, nil)[0]
	if d.Attempt != 1 {
		t.Fatalf("attempt %d after an uncounted release, want 1", d.Attempt)
	}
	must(t, tr.Release(t0, 0, d.Token, true)) // stream closed: counts, no backoff
	d = tr.Next(t0, 1, nil)[0]
	if d.Attempt != 2 || d.LastError != ErrTextReleased {
		t.Fatalf("after a counted release: %+v", d)
	}
	mustCheck(t, tr)
}

func TestPartitionOrderingOneAtATime(t *testing.T) {
	tr := newTracker(t, Config{Ordering: OrderPartition})
	must(t, tr.Add(t0, recs("a", "b", "")...))
	for want := int64(0); want < 3; want++ {
		d := tr.Next(t0, 9, nil)
		if len(d) != 1 || d[0].Offset != want {
			t.Fatalf("deliveries %v, want [%d]", offsets(d), want)
		}
		must(t, tr.Ack(t0, want, d[0].Token))
	}
}

func TestCommittedWithGapsAndOutOfOrderAcks(t *testing.T) {
	tr := newTracker(t, Config{Ordering: OrderNone})
	must(t, tr.Add(t0, Record[string]{Offset: 10}, Record[string]{Offset: 12}, Record[string]{Offset: 13}, Record[string]{Offset: 17}))
	ds := tr.Next(t0, 9, nil)
	must(t, tr.Ack(t0, 13, ds[2].Token))
	must(t, tr.Ack(t0, 17, ds[3].Token))
	if next, above := tr.Committed(nil); next != 10 || !slices.Equal(above, []int64{13, 17}) {
		t.Fatalf("Committed = %d %v", next, above)
	}
	must(t, tr.Ack(t0, 10, ds[0].Token))
	must(t, tr.Ack(t0, 12, ds[1].Token))
	if next, above := tr.Committed(nil); next != 18 || len(above) != 0 || tr.Window() != 0 {
		t.Fatalf("Committed = %d %v window %d", next, above, tr.Window())
	}
	if err := tr.Add(t0, Record[string]{Offset: 17}); !errors.Is(err, ErrOffsetOrder) {
		t.Fatalf("Add of an old offset: %v", err)
	}
	if err := tr.Ack(t0, 10, ds[0].Token); !errors.Is(err, ErrUnknownOffset) {
		t.Fatalf("ack below the window: %v", err)
	}
}

func TestPause(t *testing.T) {
	tr := newTracker(t, Config{Ordering: OrderNone})
	must(t, tr.Add(t0, recs("a", "b")...))
	d := tr.Next(t0, 1, nil)
	tr.Pause(true)
	if got := tr.Next(t0, 9, nil); len(got) != 0 {
		t.Fatalf("delivered while paused: %v", offsets(got))
	}
	must(t, tr.Ack(t0, 0, d[0].Token)) // in-flight work still completes
	tr.Pause(false)
	if got := tr.Next(t0, 9, nil); !slices.Equal(offsets(got), []int64{1}) {
		t.Fatalf("after resume: %v", offsets(got))
	}
}

func TestExtend(t *testing.T) {
	tr := newTracker(t, Config{VisibilityTimeout: time.Second, MaxLease: time.Hour})
	must(t, tr.Add(t0, recs("k")...))
	d := tr.Next(t0, 1, nil)[0]
	got, err := tr.Extend(t0, 0, d.Token, t0.Add(48*time.Hour))
	must(t, err)
	if !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("granted %v, want capped at MaxLease", got)
	}
	if ev := tr.Tick(t0.Add(time.Minute), nil); len(ev) != 0 {
		t.Fatalf("expired despite the extension: %v", ev)
	}
	if _, err := tr.Extend(t0, 0, d.Token, t0); !errors.Is(err, ErrBadDeadline) {
		t.Fatalf("extend to now: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	var c Config
	must(t, c.Validate())
	if c.MaxInFlight != 256 || c.WindowMessages != 1000 || c.MaxParkedKeys != 1000 || c.MaxAttempts != 5 ||
		c.VisibilityTimeout != 30*time.Second || c.MaxLease != 12*time.Hour || c.Backoff.Base != time.Second || c.Rand == nil {
		t.Fatalf("defaults %+v", c)
	}
	small := Config{WindowMessages: 100}
	must(t, small.Validate())
	if small.MaxInFlight != 100 {
		t.Fatalf("default MaxInFlight with a 100-message window = %d", small.MaxInFlight)
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{MaxInFlight: -1}, "MaxInFlight = -1"},
		{Config{WindowMessages: 10, MaxInFlight: 20}, "MaxInFlight = 20"},
		{Config{WindowMessages: MaxWindowMessages + 1}, "WindowMessages"},
		{Config{MaxAttempts: -3}, "MaxAttempts = -3"},
		{Config{VisibilityTimeout: time.Hour, MaxLease: time.Minute}, "VisibilityTimeout"},
		{Config{MaxLease: -time.Second}, "MaxLease"},
		{Config{Ordering: 7}, "Ordering"},
		{Config{Backoff: backoff.Config{Multiplier: 0.1}}, "Multiplier"},
	} {
		if err := tc.c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error about %q", tc.c, err, tc.want)
		}
	}
	for s, want := range map[string]Ordering{"": OrderKey, "key": OrderKey, "partition": OrderPartition, "none": OrderNone} {
		if o, err := ParseOrdering(s); err != nil || o != want {
			t.Errorf("ParseOrdering(%q) = %v, %v", s, o, err)
		}
	}
	if _, err := ParseOrdering("fifo"); err == nil {
		t.Error("ParseOrdering(fifo) succeeded")
	}
}

// Defer hands a delivery back without counting an attempt; it comes back
// no sooner than the given time, and its key waits (parked) meanwhile.
func TestDeferKeepsAttemptAndParksKey(t *testing.T) {
	now := time.Unix(1000, 0)
	tr, err := New[string](Config{MaxAttempts: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Add(now, Record[string]{Offset: 0, Key: "a"}, Record[string]{Offset: 1, Key: "a"}, Record[string]{Offset: 2, Key: "b"}); err != nil {
		t.Fatal(err)
	}
	ds := tr.Next(now, 10, nil)
	if len(ds) != 2 || ds[0].Offset != 0 || ds[1].Offset != 2 {
		t.Fatalf("first deliveries = %+v, want offsets 0 and 2", ds)
	}
	until := now.Add(5 * time.Second)
	for i := 0; i < 3; i++ { // deferring any number of times burns no attempt
		if err := tr.Defer(now, 0, ds[0].Token, until); err != nil {
			t.Fatal(err)
		}
		if tr.Parked() != 1 {
			t.Fatalf("parked = %d, want key a parked", tr.Parked())
		}
		if got := tr.Next(now, 10, nil); len(got) != 0 {
			t.Fatalf("delivered %+v before the deferral ended", got)
		}
		tr.Tick(until, nil)
		again := tr.Next(until, 10, nil)
		if len(again) != 1 || again[0].Offset != 0 || again[0].Attempt != 1 {
			t.Fatalf("after the deferral: %+v, want offset 0 again at attempt 1", again)
		}
		ds[0] = again[0]
		now = until
		until = now.Add(5 * time.Second)
	}
	if err := tr.Defer(now, 0, ds[0].Token-1, until); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("defer with a stale token: %v, want ErrStaleToken", err)
	}
	// A deferral that is already due makes the message ready at once.
	if err := tr.Defer(now, 0, ds[0].Token, now); err != nil {
		t.Fatal(err)
	}
	if got := tr.Next(now, 10, nil); len(got) != 1 || got[0].Offset != 0 {
		t.Fatalf("due deferral: %+v, want offset 0 at once", got)
	}
}

// What a parked key costs the other keys of its partition: they flow past
// it only within the window, which counts from the lowest unfinished
// offset (docs/semantics.md, the parked-key row). With the parked message
// first, window_messages - 1 later records of other keys are delivered and
// finished; then nothing more is fetched until the parked one finishes.
func TestParkedKeyHoldsTheWindowAtItsOffset(t *testing.T) {
	tr := newTracker(t, Config{WindowMessages: 4, MaxInFlight: 4, Backoff: backoff.Config{Base: time.Minute}})
	must(t, tr.Add(t0, recs("parked", "b", "c", "d")...))
	ds := tr.Next(t0, 4, nil)
	must(t, tr.Retry(t0, 0, ds[0].Token, time.Minute, "busy"))
	for _, d := range ds[1:] {
		must(t, tr.Ack(t0, d.Offset, d.Token))
	}
	if w := tr.Wants(); w != 0 {
		t.Fatalf("Wants = %d with the parked message at the window's start and 3 finished after it, want 0", w)
	}
	tr.Tick(t0.Add(time.Minute), nil)
	d := tr.Next(t0.Add(time.Minute), 1, nil)[0]
	must(t, tr.Ack(t0.Add(time.Minute), d.Offset, d.Token))
	if w := tr.Wants(); w != 4 {
		t.Fatalf("Wants = %d once the parked message finished, want 4", w)
	}
	mustCheck(t, tr)
}
