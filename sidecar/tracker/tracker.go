package tracker

import (
	"fmt"
	"time"
	"unsafe"
)

// Reasons and error texts set by the tracker itself.
const (
	// ReasonMaxAttempts is the dead-letter reason when MaxAttempts is used up.
	ReasonMaxAttempts = "max_attempts_exceeded"
	// ErrTextLeaseExpired becomes a message's LastError when its lease expires.
	ErrTextLeaseExpired = "lease expired"
	// ErrTextReleased becomes a message's LastError when it is released with
	// the attempt counted (the consumer's stream closed).
	ErrTextReleased = "released: consumer stream closed"
)

// Record is one record fed to the tracker, in offset order.
type Record[T any] struct {
	Offset int64
	Key    string
	// PriorAttempts is the number of attempts already made elsewhere (from
	// the ledger, so attempt numbers survive failover); 0 if unknown.
	PriorAttempts int
	// LastError of the prior attempts, if known.
	LastError string
	// Value is whatever the sidecar keeps with the record (payload, headers).
	Value T
	// Bytes is what the caller counts the record as holding (its payload,
	// headers and the share of a read buffer it keeps alive): HeldBytes
	// sums it over the window. 0 is allowed (not counted).
	Bytes int64
	// NotBefore, when set, makes the record a scheduled message
	// (docs/scheduling.md): it is not delivered before this time, and it
	// is outside its key's order (it neither waits for the key's other
	// messages nor holds them back). A time not after now is due at once.
	NotBefore time.Time
	// InKeyOrder keeps a scheduled message (NotBefore set) in its key's
	// order, as the publisher asked: it waits for the key's earlier
	// messages, and when it heads its key before its time the key is
	// parked until then. Without a lane (ordering none, no key) it only
	// waits for its time.
	InKeyOrder bool
	// Cancelled: the record is finished on arrival, never delivered (a
	// scheduled message whose cancel was read with it).
	Cancelled bool
}

// Delivery is one message to hand to the app.
type Delivery[T any] struct {
	Offset int64
	Key    string
	// Attempt is the attempt number of this delivery, from 1.
	Attempt int
	// Token fences the app's answers: unique and strictly increasing per tracker.
	Token          uint64
	Deadline       time.Time // lease deadline
	FirstDelivered time.Time // of the first delivery by this tracker
	LastError      string
	Value          T
}

// DeadLetter is one message to publish to the dead-letter output.
type DeadLetter[T any] struct {
	Offset int64
	Key    string
	// Attempts made (for a record dead-lettered on first sight, its PriorAttempts).
	Attempts       int
	Reason         string
	LastError      string
	FirstDelivered time.Time // zero if never delivered by this tracker
	DeadLettered   time.Time // when it was handed to the dead-letter output
	Value          T
}

// EventKind says what happened in Tick.
type EventKind int

const (
	// EventLeaseExpired: a delivery's lease expired; the attempt counts.
	EventLeaseExpired EventKind = iota + 1
)

// Event reports something Tick did, for metrics and logs.
type Event struct {
	Kind    EventKind
	Offset  int64
	Key     string
	Attempt int    // the attempt that ended
	Token   uint64 // its token
	// DeadLettered: the attempts are used up and the message went to the
	// dead-letter output (otherwise it waits for its retry).
	DeadLettered bool
}

type lane struct{ head, tail int64 }

// Tracker is the delivery state machine of one (subscription, partition).
// See the package documentation.
type Tracker[T any] struct {
	cfg        Config
	win        ring[T]
	nextOffset int64 // offset after the last record added (or the start offset)
	lastToken  uint64
	paused     bool

	ready    readyHeap   // deliverable now: stReady entries that head their lane (or have none)
	timers   []timerItem // stInFlight, stBackoff, stDLWait entries by deadline
	epoch    time.Time   // timers count from here
	hasEpoch bool
	lanes    map[string]lane
	dlq      seqQueue // stDLQueued entries, FIFO

	inFlight, pending, parked, dead, done int
	scheduled                             int   // entries waiting for their NotBefore
	recBytes                              int64 // Σ Record.Bytes over the window
}

// New returns a tracker that expects records from startOffset on.
func New[T any](cfg Config, startOffset int64) (*Tracker[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if startOffset < 0 {
		return nil, fmt.Errorf("tracker: start offset %d: must be ≥ 0", startOffset)
	}
	return &Tracker[T]{cfg: cfg, nextOffset: startOffset, lanes: make(map[string]lane)}, nil
}

// Config returns the validated configuration.
func (t *Tracker[T]) Config() Config { return t.cfg }

// laneKey returns the lane a key belongs to, if its messages are ordered.
func (t *Tracker[T]) laneKey(key string) (string, bool) {
	switch t.cfg.Ordering {
	case OrderKey:
		return key, key != ""
	case OrderPartition:
		return "", true
	}
	return "", false
}

// Wants returns how many more records Add accepts now: 0 when the window is
// full or MaxParkedKeys keys are parked (backpressure).
func (t *Tracker[T]) Wants() int {
	if t.parked >= t.cfg.MaxParkedKeys {
		return 0
	}
	return t.cfg.WindowMessages - t.win.n
}

// Add feeds records in increasing offset order (gaps are allowed). It adds all
// of them or none: more records than Wants() is an error. A record whose
// PriorAttempts already reach MaxAttempts goes to the dead-letter output.
func (t *Tracker[T]) Add(now time.Time, recs ...Record[T]) error {
	if w := t.Wants(); len(recs) > w {
		if t.parked >= t.cfg.MaxParkedKeys {
			return fmt.Errorf("tracker: add %d records: %w (%d parked, limit %d)", len(recs), ErrTooManyParked, t.parked, t.cfg.MaxParkedKeys)
		}
		return fmt.Errorf("tracker: add %d records: %w (room for %d of %d)", len(recs), ErrWindowFull, w, t.cfg.WindowMessages)
	}
	next := t.nextOffset
	for i := range recs {
		r := &recs[i]
		if r.Offset < next {
			return fmt.Errorf("tracker: add offset %d: %w (expected ≥ %d)", r.Offset, ErrOffsetOrder, next)
		}
		if r.PriorAttempts < 0 || r.PriorAttempts > 1<<30 {
			return fmt.Errorf("tracker: add offset %d: %w: PriorAttempts = %d", r.Offset, ErrBadRecord, r.PriorAttempts)
		}
		if r.Bytes < 0 {
			return fmt.Errorf("tracker: add offset %d: %w: Bytes = %d", r.Offset, ErrBadRecord, r.Bytes)
		}
		next = r.Offset + 1
	}
	for i := range recs {
		t.add(now, &recs[i])
	}
	t.nextOffset = next
	return nil
}

func (t *Tracker[T]) add(now time.Time, r *Record[T]) {
	t.recBytes += r.Bytes
	seq := t.win.push(entry[T]{
		offset:     r.Offset,
		key:        r.Key,
		value:      r.Value,
		bytes:      r.Bytes,
		lastError:  r.LastError,
		attempt:    int32(r.PriorAttempts) + 1,
		nextInLane: none,
		timerIdx:   none,
	})
	e := t.win.at(seq)
	if r.Cancelled {
		t.complete(seq, e)
		return
	}
	if r.PriorAttempts >= t.cfg.MaxAttempts {
		e.attempt = int32(r.PriorAttempts)
		t.toDeadLetter(now, seq, e, ReasonMaxAttempts)
		return
	}
	t.pending++
	k, ordered := t.laneKey(r.Key)
	sched := !r.NotBefore.IsZero()
	e.outside = sched && !(r.InKeyOrder && ordered)
	if sched && r.NotBefore.After(now) {
		if e.outside {
			t.wait(seq, e, r.NotBefore)
			return
		}
		e.held, e.deadline = true, r.NotBefore
	}
	if !ordered || e.outside {
		t.ready.push(seq)
		return
	}
	e.ordered = true
	if l, ok := t.lanes[k]; ok {
		t.win.at(l.tail).nextInLane = seq
		l.tail = seq
		t.lanes[k] = l
		return
	}
	t.lanes[k] = lane{seq, seq}
	t.toHead(now, seq, e)
}

// wait holds a scheduled message until at: no attempt, and its key (if it
// is in one) parked meanwhile.
func (t *Tracker[T]) wait(seq int64, e *entry[T], at time.Time) {
	e.state = stBackoff
	e.scheduled = true
	t.scheduled++
	if e.ordered {
		t.parked++
	}
	t.timerPush(seq, at)
}

// toHead makes an entry that now heads its lane deliverable, or makes it
// wait for its time (a scheduled message kept in its key's order).
func (t *Tracker[T]) toHead(now time.Time, seq int64, e *entry[T]) {
	if e.held {
		e.held = false
		if e.deadline.After(now) {
			t.wait(seq, e, e.deadline)
			return
		}
	}
	t.ready.push(seq)
}

// Next appends to dst the deliveries ready now, lowest offset first, at most
// max and at most what MaxInFlight leaves; none while paused.
func (t *Tracker[T]) Next(now time.Time, max int, dst []Delivery[T]) []Delivery[T] {
	if t.paused {
		return dst
	}
	limit := min(max, t.cfg.MaxInFlight-t.inFlight)
	for ; limit > 0 && len(t.ready) > 0; limit-- {
		seq := t.ready.pop()
		e := t.win.at(seq)
		t.lastToken++
		e.token = t.lastToken
		e.state = stInFlight
		e.expired = false
		if e.firstDelivered.IsZero() {
			e.firstDelivered = now
		}
		t.timerPush(seq, now.Add(t.cfg.VisibilityTimeout))
		t.pending--
		t.inFlight++
		dst = append(dst, Delivery[T]{
			Offset:         e.offset,
			Key:            e.key,
			Attempt:        int(e.attempt),
			Token:          e.token,
			Deadline:       e.deadline,
			FirstDelivered: e.firstDelivered,
			LastError:      e.lastError,
			Value:          e.value,
		})
	}
	return dst
}

// lookup finds the message an answer refers to and checks its token.
func (t *Tracker[T]) lookup(op string, offset int64, token uint64) (int64, *entry[T], error) {
	seq, ok := t.win.find(offset)
	if !ok {
		return 0, nil, fmt.Errorf("tracker: %s offset %d token %d: %w", op, offset, token, ErrUnknownOffset)
	}
	e := t.win.at(seq)
	if token == 0 || e.token != token {
		return 0, nil, fmt.Errorf("tracker: %s offset %d token %d: %w (current token %d)", op, offset, token, ErrStaleToken, e.token)
	}
	return seq, e, nil
}

// inFlight finds an in-flight message and ends its lease.
func (t *Tracker[T]) takeInFlight(op string, offset int64, token uint64) (int64, *entry[T], error) {
	seq, e, err := t.lookup(op, offset, token)
	if err != nil {
		return 0, nil, err
	}
	if e.state != stInFlight {
		return 0, nil, fmt.Errorf("tracker: %s offset %d token %d: %w", op, offset, token, ErrNotInFlight)
	}
	return seq, e, nil
}

func (t *Tracker[T]) endLease(seq int64) {
	t.timerRemove(seq)
	t.inFlight--
}

// Ack completes a delivered message. A late Ack (the lease expired but the
// message was not redelivered yet) is accepted too: the work was done.
func (t *Tracker[T]) Ack(now time.Time, offset int64, token uint64) error {
	seq, e, err := t.lookup("ack", offset, token)
	if err != nil {
		return err
	}
	switch {
	case e.state == stInFlight:
		t.endLease(seq)
	case e.state == stBackoff && e.expired:
		t.timerRemove(seq)
		t.pending--
		if e.ordered {
			t.parked--
		}
	default:
		return fmt.Errorf("tracker: ack offset %d token %d: %w", offset, token, ErrNotInFlight)
	}
	t.leaveLane(now, seq, e)
	t.complete(seq, e)
	return nil
}

// Retry ends a delivery as failed: the next attempt is due after
// max(after, backoff) — or the message goes to the dead-letter output when
// MaxAttempts is used up. after is capped at MaxRetryAfter.
func (t *Tracker[T]) Retry(now time.Time, offset int64, token uint64, after time.Duration, errText string) error {
	seq, e, err := t.takeInFlight("retry", offset, token)
	if err != nil {
		return err
	}
	t.endLease(seq)
	t.fail(now, seq, e, min(max(after, 0), t.cfg.MaxRetryAfter), errText, false)
	return nil
}

// DeadLetter hands a delivered message to the dead-letter output at once.
func (t *Tracker[T]) DeadLetter(now time.Time, offset int64, token uint64, reason string) error {
	seq, e, err := t.takeInFlight("dead-letter", offset, token)
	if err != nil {
		return err
	}
	t.endLease(seq)
	t.toDeadLetter(now, seq, e, reason)
	return nil
}

// Extend moves the lease deadline of a delivery, capped at now+MaxLease, and
// returns the deadline granted.
func (t *Tracker[T]) Extend(now time.Time, offset int64, token uint64, deadline time.Time) (time.Time, error) {
	seq, _, err := t.takeInFlight("extend", offset, token)
	if err != nil {
		return time.Time{}, err
	}
	if !deadline.After(now) {
		return time.Time{}, fmt.Errorf("tracker: extend offset %d token %d to %v: %w", offset, token, deadline, ErrBadDeadline)
	}
	if limit := now.Add(t.cfg.MaxLease); deadline.After(limit) {
		deadline = limit
	}
	t.timerMove(seq, deadline)
	return deadline, nil
}

// Release gives a delivery back. Without countAttempt (a prefetched message
// the app never started) it keeps its attempt number; with countAttempt (the
// consumer's stream closed) the attempt counts and it is redelivered without
// backoff, or dead-lettered if MaxAttempts is used up.
func (t *Tracker[T]) Release(now time.Time, offset int64, token uint64, countAttempt bool) error {
	seq, e, err := t.takeInFlight("release", offset, token)
	if err != nil {
		return err
	}
	t.endLease(seq)
	if countAttempt {
		t.fail(now, seq, e, 0, ErrTextReleased, true)
		return nil
	}
	e.state = stReady
	t.pending++
	t.ready.push(seq) // it heads its lane: only heads are ever delivered
	return nil
}

// fail ends an attempt of an entry that was in flight (lease already ended).
// Defer gives a delivery back without counting an attempt, to be delivered
// again no sooner than until: the message is held elsewhere (the ledger says
// another consumer has it), or the ledger or a downstream is unavailable.
// An ordered key stays parked until then; an until not after now makes the
// message ready at once.
func (t *Tracker[T]) Defer(now time.Time, offset int64, token uint64, until time.Time) error {
	seq, e, err := t.takeInFlight("defer", offset, token)
	if err != nil {
		return err
	}
	t.endLease(seq)
	t.pending++
	if !until.After(now) {
		e.state = stReady
		t.ready.push(seq)
		return nil
	}
	e.state = stBackoff
	e.expired = false
	if e.ordered {
		t.parked++
	}
	t.timerPush(seq, until)
	return nil
}

func (t *Tracker[T]) fail(now time.Time, seq int64, e *entry[T], after time.Duration, errText string, immediate bool) {
	e.lastError = errText
	if int(e.attempt) >= t.cfg.MaxAttempts {
		t.toDeadLetter(now, seq, e, ReasonMaxAttempts)
		return
	}
	failed := int(e.attempt)
	e.attempt++
	t.pending++
	if immediate {
		e.state = stReady
		t.ready.push(seq)
		return
	}
	d := max(after, t.cfg.Backoff.Delay(failed, t.cfg.Rand()))
	e.state = stBackoff
	if e.ordered {
		t.parked++
	}
	t.timerPush(seq, now.Add(d))
}

// toDeadLetter queues an entry (not in flight, not pending) for the
// dead-letter output and lets its lane move on.
func (t *Tracker[T]) toDeadLetter(now time.Time, seq int64, e *entry[T], reason string) {
	t.leaveLane(now, seq, e)
	e.state = stDLQueued
	e.reason = reason
	e.deadLettered = now
	t.dead++
	t.dlq.push(seq)
}

// leaveLane removes the head of a lane; the next message, if any, becomes
// deliverable.
func (t *Tracker[T]) leaveLane(now time.Time, seq int64, e *entry[T]) {
	if !e.ordered {
		return
	}
	e.ordered = false
	k, _ := t.laneKey(e.key)
	l := t.lanes[k]
	if e.nextInLane == none {
		delete(t.lanes, k)
		return
	}
	l.head = e.nextInLane
	t.lanes[k] = l
	t.toHead(now, l.head, t.win.at(l.head))
}

// complete marks an entry done and slides the window past done entries.
func (t *Tracker[T]) complete(seq int64, e *entry[T]) {
	e.state = stDone
	t.done++
	for t.win.n > 0 {
		h := t.win.at(t.win.head)
		if h.state != stDone {
			break
		}
		t.recBytes -= h.bytes
		t.win.popFront()
		t.done--
	}
}

// Tick advances time: expired leases end their attempt (reported as events
// appended to dst), due retries become deliverable and failed dead-letter
// publishes are offered again.
func (t *Tracker[T]) Tick(now time.Time, dst []Event) []Event {
	if len(t.timers) == 0 {
		return dst
	}
	limit := t.since(now)
	for len(t.timers) > 0 && t.timers[0].at <= limit {
		seq := t.timers[0].seq
		t.timerRemove(seq)
		e := t.win.at(seq)
		switch e.state {
		case stInFlight:
			t.inFlight--
			dst = append(dst, Event{
				Kind: EventLeaseExpired, Offset: e.offset, Key: e.key,
				Attempt: int(e.attempt), Token: e.token,
				DeadLettered: int(e.attempt) >= t.cfg.MaxAttempts,
			})
			t.fail(now, seq, e, 0, ErrTextLeaseExpired, false)
			e.expired = e.state == stBackoff
		case stBackoff:
			e.state = stReady
			e.expired = false
			if e.scheduled {
				e.scheduled = false
				t.scheduled--
			}
			if e.ordered {
				t.parked--
			}
			t.ready.push(seq)
		case stDLWait:
			e.state = stDLQueued
			t.dlq.push(seq)
		default:
			panic(fmt.Sprintf("tracker: timer for offset %d in state %d", e.offset, e.state))
		}
	}
	return dst
}

// TakeDeadLetters appends the messages to publish to the dead-letter output.
// Each must be answered with DeadLettered or DeadLetterFailed.
func (t *Tracker[T]) TakeDeadLetters(dst []DeadLetter[T]) []DeadLetter[T] {
	for t.dlq.n > 0 {
		e := t.win.at(t.dlq.pop())
		e.state = stDLTaken
		dst = append(dst, DeadLetter[T]{
			Offset:         e.offset,
			Key:            e.key,
			Attempts:       int(e.attempt),
			Reason:         e.reason,
			LastError:      e.lastError,
			FirstDelivered: e.firstDelivered,
			DeadLettered:   e.deadLettered,
			Value:          e.value,
		})
	}
	return dst
}

func (t *Tracker[T]) takenDeadLetter(op string, offset int64) (int64, *entry[T], error) {
	seq, ok := t.win.find(offset)
	if !ok {
		return 0, nil, fmt.Errorf("tracker: %s offset %d: %w", op, offset, ErrUnknownOffset)
	}
	e := t.win.at(seq)
	if e.state != stDLTaken {
		return 0, nil, fmt.Errorf("tracker: %s offset %d: %w", op, offset, ErrNotDeadLettering)
	}
	return seq, e, nil
}

// DeadLettered confirms the dead-letter publish of a message: it is complete.
func (t *Tracker[T]) DeadLettered(offset int64) error {
	seq, e, err := t.takenDeadLetter("dead-lettered", offset)
	if err != nil {
		return err
	}
	t.dead--
	t.complete(seq, e)
	return nil
}

// DeadLetterFailed reports a failed dead-letter publish: the message is
// offered again by TakeDeadLetters after a backoff.
func (t *Tracker[T]) DeadLetterFailed(now time.Time, offset int64) error {
	seq, e, err := t.takenDeadLetter("dead-letter-failed", offset)
	if err != nil {
		return err
	}
	e.dlFailures++
	e.state = stDLWait
	t.timerPush(seq, now.Add(t.cfg.Backoff.Delay(int(e.dlFailures), t.cfg.Rand())))
	return nil
}

// Committed appends to dst the offsets above next that are complete, in
// increasing order, and returns next: the lowest offset not yet complete (or
// the offset after the last record added when all are complete).
func (t *Tracker[T]) Committed(dst []int64) (next int64, doneAbove []int64) {
	if t.win.n == 0 {
		return t.nextOffset, dst
	}
	left := t.done
	for s := t.win.head; left > 0; s++ {
		if e := t.win.at(s); e.state == stDone {
			dst = append(dst, e.offset)
			left--
		}
	}
	return t.win.at(t.win.head).offset, dst
}

// NextDeadline returns the earliest time at which Tick has work to do.
func (t *Tracker[T]) NextDeadline() (time.Time, bool) {
	if len(t.timers) == 0 {
		return time.Time{}, false
	}
	return t.win.at(t.timers[0].seq).deadline, true
}

// Pause stops (true) or resumes (false) handing out deliveries; in-flight
// deliveries, leases and retries are not affected.
func (t *Tracker[T]) Pause(paused bool) { t.paused = paused }

// Paused reports whether delivery is paused.
func (t *Tracker[T]) Paused() bool { return t.paused }

// InFlight returns the number of deliveries outstanding at the app.
func (t *Tracker[T]) InFlight() int { return t.inFlight }

// Parked returns the number of ordered keys (lanes) waiting for a retry.
func (t *Tracker[T]) Parked() int { return t.parked }

// Pending returns the number of messages waiting to be delivered (including
// those waiting for a retry or behind their key).
func (t *Tracker[T]) Pending() int { return t.pending }

// CancelScheduled finishes, without delivering them, the scheduled messages
// still waiting for their time whose value match accepts (also those kept
// in their key's order and waiting behind the key's earlier messages), and
// appends their offsets to dst. A message already due (ready, delivered,
// retrying) is not touched: its cancel came too late.
func (t *Tracker[T]) CancelScheduled(now time.Time, match func(v *T) bool, dst []int64) []int64 {
	var seqs []int64
	for s := t.win.head; s < t.win.head+int64(t.win.n); s++ {
		if e := t.win.at(s); (e.scheduled || e.held) && match(&e.value) {
			seqs = append(seqs, s)
		}
	}
	for _, s := range seqs {
		e := t.win.at(s)
		if e.scheduled { // waiting for its time, heading its lane if in one
			t.timerRemove(s)
			e.scheduled = false
			t.scheduled--
			if e.ordered {
				t.parked--
			}
			t.leaveLane(now, s, e)
		} else { // in its lane behind the key's earlier messages
			e.held = false
			t.unlink(s, e)
		}
		t.pending--
		dst = append(dst, e.offset)
		t.complete(s, e)
	}
	return dst
}

// unlink takes a lane member that does not head its lane out of the lane.
func (t *Tracker[T]) unlink(seq int64, e *entry[T]) {
	e.ordered = false
	k, _ := t.laneKey(e.key)
	l := t.lanes[k]
	prev := l.head
	for t.win.at(prev).nextInLane != seq {
		prev = t.win.at(prev).nextInLane
	}
	t.win.at(prev).nextInLane = e.nextInLane
	if l.tail == seq {
		l.tail = prev
		t.lanes[k] = l
	}
	e.nextInLane = none
}

// Scheduled returns the number of scheduled messages waiting for their
// time (Record.NotBefore); they count in Pending too.
func (t *Tracker[T]) Scheduled() int { return t.scheduled }

// DeadLetters returns the number of messages handed to the dead-letter
// output and not yet confirmed.
func (t *Tracker[T]) DeadLetters() int { return t.dead }

// Window returns the number of records held (added and not below the
// committed offset).
func (t *Tracker[T]) Window() int { return t.win.n }

// HeldBytes returns what the window holds in bytes: the Bytes of every
// record in it (finished ones too, until the window slides past them, as
// Window counts them) plus the window's own ring of entries, sized to its
// capacity. The caller's memory budget compares this with its limit; the
// tracker itself never refuses records for their bytes (Wants counts
// messages only).
func (t *Tracker[T]) HeldBytes() int64 {
	return t.recBytes + int64(len(t.win.buf))*int64(unsafe.Sizeof(entry[T]{}))
}

// EntryBytes is what one more record costs in the window's ring, beyond its
// Bytes (the ring grows by doubling, so a caller estimating the cost of
// records to add may count twice this).
func (t *Tracker[T]) EntryBytes() int64 { return int64(unsafe.Sizeof(entry[T]{})) }
