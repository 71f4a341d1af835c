package tracker

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/spoolmq/spool/internal/backoff"
)

// The model: every message ever added, in a slice, with its state; every
// question answered by a linear scan. Obviously correct, hopelessly slow.

type mMsg struct {
	bytes          int64
	off            int64
	key            string
	st             state
	attempt        int
	token          uint64
	tokens         []uint64 // every token issued for it
	due            time.Time
	firstDelivered time.Time
	deadLettered   time.Time
	lastError      string
	reason         string
	expired        bool
	dlFailures     int
	firstSightDL   bool
	outside        bool      // a scheduled message outside its key's order: in no lane
	waiting        bool      // a scheduled message waiting for its time
	holdUntil      time.Time // a scheduled message in its key's order, not yet heading its lane
}

type model struct {
	cfg        Config
	r          float64
	now        time.Time
	msgs       []*mMsg
	nextOffset int64
	lastToken  uint64
	paused     bool
	dlq        []*mMsg // queued for TakeDeadLetters, FIFO
	taken      []int64 // offsets taken and not answered
}

func (m *model) laneKey(key string) (string, bool) {
	switch m.cfg.Ordering {
	case OrderKey:
		return key, key != ""
	case OrderPartition:
		return "", true
	}
	return "", false
}

func (m *model) committed() (int64, []int64) {
	next := m.nextOffset
	for _, x := range m.msgs {
		if x.st != stDone {
			next = x.off
			break
		}
	}
	var above []int64
	for _, x := range m.msgs {
		if x.off > next && x.st == stDone {
			above = append(above, x.off)
		}
	}
	return next, above
}

func (m *model) find(off int64) *mMsg {
	next, _ := m.committed()
	for _, x := range m.msgs {
		if x.off == off && off >= next {
			return x
		}
	}
	return nil
}

// windowBytes is what the window's records hold: Σ Bytes over the window.
func (m *model) windowBytes() int64 {
	next, _ := m.committed()
	var n int64
	for _, x := range m.msgs {
		if x.off >= next {
			n += x.bytes
		}
	}
	return n
}

func (m *model) windowLen() int {
	next, _ := m.committed()
	n := 0
	for _, x := range m.msgs {
		if x.off >= next {
			n++
		}
	}
	return n
}

func (m *model) count(f func(*mMsg) bool) int {
	n := 0
	for _, x := range m.msgs {
		if f(x) {
			n++
		}
	}
	return n
}

func (m *model) inFlight() int { return m.count(func(x *mMsg) bool { return x.st == stInFlight }) }
func (m *model) pending() int {
	return m.count(func(x *mMsg) bool { return x.st == stReady || x.st == stBackoff })
}
func (m *model) parked() int {
	return m.count(func(x *mMsg) bool { _, o := m.laneKey(x.key); return o && !x.outside && x.st == stBackoff })
}
func (m *model) dead() int {
	return m.count(func(x *mMsg) bool { return x.st >= stDLQueued && x.st <= stDLWait })
}

func (m *model) wants() int {
	if m.parked() >= m.cfg.MaxParkedKeys {
		return 0
	}
	return m.cfg.WindowMessages - m.windowLen()
}

// blocked: an earlier message of the same lane is still being delivered.
func (m *model) blocked(x *mMsg) bool {
	k, ordered := m.laneKey(x.key)
	if !ordered || x.outside {
		return false
	}
	for _, y := range m.msgs {
		if y == x {
			return false
		}
		if k2, _ := m.laneKey(y.key); k2 == k && y.st <= stBackoff && !y.outside {
			return true
		}
	}
	panic("unreachable")
}

func (m *model) timed(x *mMsg) bool {
	return x.st == stInFlight || x.st == stBackoff || x.st == stDLWait
}

func (m *model) nextDeadline() (time.Time, bool) {
	var best time.Time
	ok := false
	for _, x := range m.msgs {
		if m.timed(x) && (!ok || x.due.Before(best)) {
			best, ok = x.due, true
		}
	}
	return best, ok
}

func (m *model) toDL(x *mMsg, reason string) {
	x.st = stDLQueued
	x.reason = reason
	x.deadLettered = m.now
	m.dlq = append(m.dlq, x)
}

func (m *model) fail(x *mMsg, after time.Duration, errText string, immediate bool) {
	x.lastError = errText
	if x.attempt >= m.cfg.MaxAttempts {
		m.toDL(x, ReasonMaxAttempts)
		return
	}
	failed := x.attempt
	x.attempt++
	if immediate {
		x.st = stReady
		return
	}
	x.st = stBackoff
	x.due = m.now.Add(max(after, m.cfg.Backoff.Delay(failed, m.r)))
}

// answer returns the message an app answer refers to, or the error expected.
func (m *model) answer(off int64, tok uint64, needInFlight bool) (*mMsg, error) {
	x := m.find(off)
	if x == nil {
		return nil, ErrUnknownOffset
	}
	if tok == 0 || tok != x.token {
		return nil, ErrStaleToken
	}
	if needInFlight && x.st != stInFlight {
		return nil, ErrNotInFlight
	}
	return x, nil
}

type machine struct {
	tr *Tracker[string]
	m  *model
}

func checkErr(t *rapid.T, op string, got, want error) {
	t.Helper()
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Fatalf("%s: error %v, want %v", op, got, want)
	}
}

func (s *machine) pickOffset(t *rapid.T) int64 {
	if len(s.m.msgs) == 0 || rapid.IntRange(0, 9).Draw(t, "unknownOffset") == 0 {
		return rapid.Int64Range(0, s.m.nextOffset+3).Draw(t, "offset")
	}
	// Prefer messages that are in flight, so answers mostly succeed.
	var live []*mMsg
	for _, x := range s.m.msgs {
		if x.st == stInFlight {
			live = append(live, x)
		}
	}
	if len(live) > 0 && rapid.Bool().Draw(t, "pickLive") {
		return rapid.SampledFrom(live).Draw(t, "live").off
	}
	return rapid.SampledFrom(s.m.msgs).Draw(t, "msg").off
}

func (s *machine) pickToken(t *rapid.T, off int64) uint64 {
	var x *mMsg
	for _, y := range s.m.msgs {
		if y.off == off {
			x = y
		}
	}
	switch rapid.IntRange(0, 5).Draw(t, "tokenKind") {
	case 0:
		return 0
	case 1:
		return rapid.Uint64Range(0, s.m.lastToken+2).Draw(t, "anyToken")
	case 2:
		if x != nil && len(x.tokens) > 0 {
			return rapid.SampledFrom(x.tokens).Draw(t, "oldToken") // often stale
		}
	}
	if x != nil {
		return x.token
	}
	return 1
}

func (s *machine) check(t *rapid.T) {
	tr, m := s.tr, s.m
	m.holdHeads() // the lanes the last action moved on (the tracker does it as they move)
	if err := tr.checkInternal(); err != nil {
		t.Fatalf("internal: %v", err)
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"InFlight", tr.InFlight(), m.inFlight()},
		{"Pending", tr.Pending(), m.pending()},
		{"Parked", tr.Parked(), m.parked()},
		{"DeadLetters", tr.DeadLetters(), m.dead()},
		{"Window", tr.Window(), m.windowLen()},
		{"Wants", tr.Wants(), m.wants()},
		{"Scheduled", tr.Scheduled(), m.count(func(x *mMsg) bool { return x.waiting })},
	} {
		if c.got != c.want {
			t.Fatalf("%s = %d, model %d", c.name, c.got, c.want)
		}
	}
	// HeldBytes: the records' bytes plus the ring, which never stays more
	// than four times (and at least minRing) the window's length.
	ring := tr.HeldBytes() - m.windowBytes()
	if ring < 0 || ring%tr.EntryBytes() != 0 {
		t.Fatalf("HeldBytes %d: records hold %d in the model, ring part %d not a multiple of %d", tr.HeldBytes(), m.windowBytes(), ring, tr.EntryBytes())
	}
	if slots := int(ring / tr.EntryBytes()); slots > max(minRing, 4*m.windowLen()) {
		t.Fatalf("ring of %d slots for a window of %d", slots, m.windowLen())
	}
	if tr.InFlight() > m.cfg.MaxInFlight {
		t.Fatalf("in flight %d > MaxInFlight %d", tr.InFlight(), m.cfg.MaxInFlight)
	}
	gotNext, gotAbove := tr.Committed(nil)
	wantNext, wantAbove := m.committed()
	if gotNext != wantNext || !slices.Equal(gotAbove, wantAbove) {
		t.Fatalf("Committed = %d %v, model %d %v", gotNext, gotAbove, wantNext, wantAbove)
	}
	gd, gok := tr.NextDeadline()
	wd, wok := m.nextDeadline()
	if gok != wok || !gd.Equal(wd) {
		t.Fatalf("NextDeadline = %v %v, model %v %v", gd, gok, wd, wok)
	}
	// Ordering: at most one in flight per lane.
	inLane := map[string]int64{}
	for _, x := range m.msgs {
		if k, ordered := m.laneKey(x.key); ordered && !x.outside && x.st == stInFlight {
			if o, dup := inLane[k]; dup {
				t.Fatalf("offsets %d and %d of lane %q both in flight", o, x.off, k)
			}
			inLane[k] = x.off
		}
	}
	// No message lost: every message not complete is held by the tracker in
	// the model's state; attempts stay within MaxAttempts.
	for _, x := range m.msgs {
		if x.attempt > m.cfg.MaxAttempts && !x.firstSightDL {
			t.Fatalf("offset %d: attempt %d > MaxAttempts", x.off, x.attempt)
		}
		if x.st == stDone {
			continue
		}
		seq, ok := tr.win.find(x.off)
		if !ok {
			t.Fatalf("offset %d (state %d) lost", x.off, x.st)
		}
		e := tr.win.at(seq)
		if e.state != x.st || int(e.attempt) != x.attempt || e.token != x.token {
			t.Fatalf("offset %d: tracker state %d attempt %d token %d, model %d %d %d",
				x.off, e.state, e.attempt, e.token, x.st, x.attempt, x.token)
		}
	}
}

func (s *machine) add(t *rapid.T) {
	m := s.m
	n := rapid.IntRange(1, 4).Draw(t, "n")
	recs := make([]Record[string], n)
	off := m.nextOffset
	for i := range recs {
		off += rapid.Int64Range(0, 2).Draw(t, "gap")
		prior := 0
		if rapid.IntRange(0, 4).Draw(t, "hasPrior") == 0 {
			prior = rapid.IntRange(0, m.cfg.MaxAttempts+1).Draw(t, "prior")
		}
		recs[i] = Record[string]{
			Offset: off, Key: rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(t, "key"),
			PriorAttempts: prior, LastError: "prior", Value: fmt.Sprint("v", off),
			Bytes: rapid.Int64Range(0, 1<<20).Draw(t, "bytes"),
		}
		if rapid.IntRange(0, 3).Draw(t, "scheduled") == 0 {
			recs[i].NotBefore = m.now.Add(time.Duration(rapid.Int64Range(-int64(time.Second), int64(10*time.Second)).Draw(t, "notBefore")))
			recs[i].Cancelled = rapid.IntRange(0, 9).Draw(t, "cancelled") == 0
			recs[i].InKeyOrder = rapid.Bool().Draw(t, "inKeyOrder")
		}
		off++
	}
	if rapid.IntRange(0, 19).Draw(t, "badOrder") == 0 && m.nextOffset > 0 {
		recs[0].Offset = m.nextOffset - 1
	}
	err := s.tr.Add(m.now, recs...)
	var want error
	switch {
	case n > m.wants() && m.parked() >= m.cfg.MaxParkedKeys:
		want = ErrTooManyParked
	case n > m.wants():
		want = ErrWindowFull
	case recs[0].Offset < m.nextOffset:
		want = ErrOffsetOrder
	}
	checkErr(t, "add", err, want)
	if want != nil {
		return
	}
	for _, r := range recs {
		_, ordered := m.laneKey(r.Key)
		x := &mMsg{off: r.Offset, key: r.Key, st: stReady, attempt: r.PriorAttempts + 1, lastError: r.LastError, bytes: r.Bytes,
			outside: !r.NotBefore.IsZero() && !(r.InKeyOrder && ordered)}
		m.msgs = append(m.msgs, x)
		switch {
		case r.Cancelled:
			x.st, x.attempt = stDone, 0 // finished on arrival, never attempted
		case r.PriorAttempts >= m.cfg.MaxAttempts:
			x.attempt = r.PriorAttempts
			x.firstSightDL = true
			m.toDL(x, ReasonMaxAttempts)
		case x.outside && r.NotBefore.After(m.now):
			x.st, x.waiting, x.due = stBackoff, true, r.NotBefore
		case !r.NotBefore.IsZero() && r.NotBefore.After(m.now):
			x.holdUntil = r.NotBefore
		}
		m.nextOffset = r.Offset + 1
	}
	m.holdHeads()
}

// holdHeads: a scheduled message kept in its key's order that now heads
// its lane waits for its time there (or is ready, its time past).
func (m *model) holdHeads() {
	for _, x := range m.msgs {
		if !x.holdUntil.IsZero() && x.st == stReady && !m.blocked(x) {
			if x.holdUntil.After(m.now) {
				x.st, x.waiting, x.due = stBackoff, true, x.holdUntil
			}
			x.holdUntil = time.Time{}
		}
	}
}

func (s *machine) next(t *rapid.T) {
	m := s.m
	n := rapid.IntRange(0, 5).Draw(t, "credit")
	got := s.tr.Next(m.now, n, nil)
	var want []Delivery[string]
	if !m.paused {
		limit := min(n, m.cfg.MaxInFlight-m.inFlight())
		var eligible []*mMsg
		for _, x := range m.msgs {
			if x.st == stReady && !m.blocked(x) {
				eligible = append(eligible, x)
			}
		}
		for _, x := range eligible[:min(limit, len(eligible))] {
			m.lastToken++
			x.token = m.lastToken
			x.tokens = append(x.tokens, x.token)
			x.st = stInFlight
			x.expired = false
			x.due = m.now.Add(m.cfg.VisibilityTimeout)
			if x.firstDelivered.IsZero() {
				x.firstDelivered = m.now
			}
			want = append(want, Delivery[string]{
				Offset: x.off, Key: x.key, Attempt: x.attempt, Token: x.token, Deadline: x.due,
				FirstDelivered: x.firstDelivered, LastError: x.lastError, Value: fmt.Sprint("v", x.off),
			})
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Next(%d) = %+v\nmodel %+v", n, got, want)
	}
	// Ordering, stated directly: a delivered message's lane has nothing
	// earlier still to deliver.
	for _, d := range got {
		k, ordered := m.laneKey(d.Key)
		for _, y := range m.msgs {
			if k2, _ := m.laneKey(y.key); ordered && k2 == k && y.off < d.Offset && y.st <= stBackoff && !y.outside && !m.find(d.Offset).outside {
				t.Fatalf("delivered offset %d of lane %q before offset %d (state %d)", d.Offset, k, y.off, y.st)
			}
		}
		if d.Attempt > m.cfg.MaxAttempts || d.Attempt < 1 {
			t.Fatalf("delivered offset %d with attempt %d", d.Offset, d.Attempt)
		}
	}
}

func (s *machine) ack(t *rapid.T) {
	off := s.pickOffset(t)
	tok := s.pickToken(t, off)
	x, want := s.m.answer(off, tok, false)
	if want == nil && !(x.st == stInFlight || x.st == stBackoff && x.expired) {
		want = ErrNotInFlight
	}
	checkErr(t, "ack", s.tr.Ack(s.m.now, off, tok), want)
	if want == nil {
		x.st = stDone
	}
}

func (s *machine) retry(t *rapid.T) {
	off := s.pickOffset(t)
	tok := s.pickToken(t, off)
	after := time.Duration(rapid.Int64Range(-1, int64(10*time.Minute)).Draw(t, "after"))
	x, want := s.m.answer(off, tok, true)
	checkErr(t, "retry", s.tr.Retry(s.m.now, off, tok, after, "boom"), want)
	if want == nil {
		s.m.fail(x, min(max(after, 0), s.m.cfg.MaxRetryAfter), "boom", false)
	}
}

func (s *machine) deadLetter(t *rapid.T) {
	off := s.pickOffset(t)
	tok := s.pickToken(t, off)
	x, want := s.m.answer(off, tok, true)
	checkErr(t, "dead-letter", s.tr.DeadLetter(s.m.now, off, tok, "poison"), want)
	if want == nil {
		s.m.toDL(x, "poison")
	}
}

func (s *machine) extend(t *rapid.T) {
	off := s.pickOffset(t)
	tok := s.pickToken(t, off)
	dl := s.m.now.Add(time.Duration(rapid.Int64Range(-int64(time.Second), int64(24*time.Hour)).Draw(t, "extendBy")))
	x, want := s.m.answer(off, tok, true)
	if want == nil && !dl.After(s.m.now) {
		want = ErrBadDeadline
	}
	got, err := s.tr.Extend(s.m.now, off, tok, dl)
	checkErr(t, "extend", err, want)
	if want == nil {
		if limit := s.m.now.Add(s.m.cfg.MaxLease); dl.After(limit) {
			dl = limit
		}
		if !got.Equal(dl) {
			t.Fatalf("extend granted %v, want %v", got, dl)
		}
		x.due = dl
	}
}

func (s *machine) release(t *rapid.T) {
	off := s.pickOffset(t)
	tok := s.pickToken(t, off)
	count := rapid.Bool().Draw(t, "countAttempt")
	x, want := s.m.answer(off, tok, true)
	checkErr(t, "release", s.tr.Release(s.m.now, off, tok, count), want)
	if want != nil {
		return
	}
	if count {
		s.m.fail(x, 0, ErrTextReleased, true)
		return
	}
	x.st = stReady // keeps its attempt number: check compares it
}

func (s *machine) deferMsg(t *rapid.T) {
	off := s.pickOffset(t)
	tok := s.pickToken(t, off)
	until := s.m.now.Add(time.Duration(rapid.Int64Range(-int64(time.Second), int64(time.Minute)).Draw(t, "deferFor")))
	x, want := s.m.answer(off, tok, true)
	checkErr(t, "defer", s.tr.Defer(s.m.now, off, tok, until), want)
	if want != nil {
		return
	}
	// No attempt counted, whatever the wait.
	if !until.After(s.m.now) {
		x.st = stReady
		return
	}
	x.st = stBackoff
	x.expired = false
	x.due = until
}

func (s *machine) advance(t *rapid.T) {
	switch rapid.IntRange(0, 2).Draw(t, "step") {
	case 0:
		s.m.now = s.m.now.Add(time.Duration(rapid.Int64Range(1, int64(2*time.Second)).Draw(t, "small")))
	case 1:
		s.m.now = s.m.now.Add(time.Duration(rapid.Int64Range(int64(time.Second), int64(2*time.Minute)).Draw(t, "large")))
	case 2:
		if d, ok := s.m.nextDeadline(); ok && d.After(s.m.now) {
			s.m.now = d
		}
	}
}

func (s *machine) tick(t *rapid.T) {
	m := s.m
	got := s.tr.Tick(m.now, nil)
	var want []Event
	for {
		var x *mMsg
		for _, y := range m.msgs {
			if m.timed(y) && !y.due.After(m.now) && (x == nil || y.due.Before(x.due)) {
				x = y
			}
		}
		if x == nil {
			break
		}
		switch x.st {
		case stInFlight:
			want = append(want, Event{Kind: EventLeaseExpired, Offset: x.off, Key: x.key,
				Attempt: x.attempt, Token: x.token, DeadLettered: x.attempt >= m.cfg.MaxAttempts})
			m.fail(x, 0, ErrTextLeaseExpired, false)
			x.expired = x.st == stBackoff
		case stBackoff:
			x.st = stReady
			x.expired = false
			x.waiting = false
		case stDLWait:
			x.st = stDLQueued
			m.dlq = append(m.dlq, x)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Tick = %+v\nmodel %+v", got, want)
	}
}

func (s *machine) takeDeadLetters(t *rapid.T) {
	got := s.tr.TakeDeadLetters(nil)
	var want []DeadLetter[string]
	for _, x := range s.m.dlq {
		x.st = stDLTaken
		s.m.taken = append(s.m.taken, x.off)
		want = append(want, DeadLetter[string]{Offset: x.off, Key: x.key, Attempts: x.attempt, Reason: x.reason,
			LastError: x.lastError, FirstDelivered: x.firstDelivered, DeadLettered: x.deadLettered, Value: fmt.Sprint("v", x.off)})
	}
	s.m.dlq = nil
	if !slices.Equal(got, want) {
		t.Fatalf("TakeDeadLetters = %+v\nmodel %+v", got, want)
	}
}

func (s *machine) answerDeadLetter(t *rapid.T) {
	var off int64
	if len(s.m.taken) > 0 && rapid.IntRange(0, 4).Draw(t, "takenOffset") > 0 {
		off = rapid.SampledFrom(s.m.taken).Draw(t, "taken")
	} else {
		off = s.pickOffset(t)
	}
	ok := rapid.Bool().Draw(t, "published")
	x := s.m.find(off)
	var want error
	switch {
	case x == nil:
		want = ErrUnknownOffset
	case x.st != stDLTaken:
		want = ErrNotDeadLettering
	}
	var err error
	if ok {
		err = s.tr.DeadLettered(off)
	} else {
		err = s.tr.DeadLetterFailed(s.m.now, off)
	}
	checkErr(t, fmt.Sprintf("dead-lettered(%v)", ok), err, want)
	if want != nil {
		return
	}
	s.m.taken = slices.DeleteFunc(s.m.taken, func(o int64) bool { return o == off })
	if ok {
		x.st = stDone
		return
	}
	x.dlFailures++
	x.st = stDLWait
	x.due = s.m.now.Add(s.m.cfg.Backoff.Delay(x.dlFailures, s.m.r))
}

// cancelScheduled cancels one message by its value: done if it waits for
// its time, untouched otherwise.
func (s *machine) cancelScheduled(t *rapid.T) {
	off := s.pickOffset(t)
	got := s.tr.CancelScheduled(s.m.now, func(v *string) bool { return *v == fmt.Sprint("v", off) }, nil)
	var want []int64
	if x := s.m.find(off); x != nil && (x.waiting || !x.holdUntil.IsZero() && x.st == stReady) {
		x.st, x.waiting, x.holdUntil = stDone, false, time.Time{}
		want = append(want, off)
	}
	s.m.holdHeads()
	if !slices.Equal(got, want) {
		t.Fatalf("CancelScheduled(offset %d) = %v, model %v", off, got, want)
	}
}

func (s *machine) pause(t *rapid.T) {
	p := rapid.IntRange(0, 3).Draw(t, "pause") == 0 // mostly unpaused
	s.tr.Pause(p)
	s.m.paused = p
}

func drawConfig(t *rapid.T, o Ordering) (Config, float64) {
	cfg := Config{
		Ordering:          o,
		MaxInFlight:       rapid.IntRange(1, 4).Draw(t, "maxInFlight"),
		MaxParkedKeys:     rapid.IntRange(1, 3).Draw(t, "maxParked"),
		MaxAttempts:       rapid.IntRange(1, 4).Draw(t, "maxAttempts"),
		VisibilityTimeout: time.Duration(rapid.Int64Range(1, 30).Draw(t, "visibility_s")) * time.Second,
		MaxRetryAfter:     time.Duration(rapid.Int64Range(1, 300).Draw(t, "maxRetryAfter_s")) * time.Second,
		Backoff: backoff.Config{
			Base:       time.Duration(rapid.Int64Range(0, 5000).Draw(t, "base_ms")) * time.Millisecond,
			Multiplier: rapid.Float64Range(1, 3).Draw(t, "mult"),
		},
	}
	cfg.WindowMessages = cfg.MaxInFlight + rapid.IntRange(0, 8).Draw(t, "windowExtra")
	cfg.MaxLease = cfg.VisibilityTimeout + time.Duration(rapid.Int64Range(0, 3600).Draw(t, "leaseExtra_s"))*time.Second
	if cfg.Backoff.Base > 0 {
		cfg.Backoff.Max = cfg.Backoff.Base * time.Duration(rapid.Int64Range(1, 20).Draw(t, "maxFactor"))
	}
	r := rapid.SampledFrom([]float64{0, 0.5, 0.999999}).Draw(t, "rand")
	cfg.Rand = func() float64 { return r }
	return cfg, r
}

func TestModel(t *testing.T) {
	// Long runs reach deep states (attempts used up, dead-letter retries);
	// -rapid.steps on the command line still wins.
	if f := flag.Lookup("rapid.steps"); f != nil && f.Value.String() == f.DefValue && !testing.Short() {
		_ = f.Value.Set("150")
		defer f.Value.Set(f.DefValue)
	}
	for _, o := range []Ordering{OrderKey, OrderPartition, OrderNone} {
		t.Run(o.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				cfg, r := drawConfig(t, o)
				start := rapid.Int64Range(0, 100).Draw(t, "start")
				tr, err := New[string](cfg, start)
				if err != nil {
					t.Fatal(err)
				}
				s := &machine{tr: tr, m: &model{
					cfg: tr.Config(), r: r, nextOffset: start,
					now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
				}}
				t.Repeat(map[string]func(*rapid.T){
					"":                 s.check,
					"add":              s.add,
					"next":             s.next,
					"ack":              s.ack,
					"retry":            s.retry,
					"deadLetter":       s.deadLetter,
					"extend":           s.extend,
					"release":          s.release,
					"defer":            s.deferMsg,
					"advance":          s.advance,
					"tick":             s.tick,
					"takeDeadLetters":  s.takeDeadLetters,
					"answerDeadLetter": s.answerDeadLetter,
					"pause":            s.pause,
					"cancelScheduled":  s.cancelScheduled,
				})
			})
		})
	}
}
