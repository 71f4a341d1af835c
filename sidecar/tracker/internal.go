package tracker

import "time"

// state of one message held in the window.
type state uint8

const (
	stReady    state = iota // waiting for delivery (eligible once it heads its lane)
	stInFlight              // delivered, lease running (timer = lease deadline)
	stBackoff               // failed, waiting for its retry (timer = due time)
	stDLQueued              // waiting to be taken by TakeDeadLetters
	stDLTaken               // taken, waiting for DeadLettered/DeadLetterFailed
	stDLWait                // dead-letter publish failed, waiting to be offered again (timer)
	stDone                  // acked or dead-lettered and confirmed
)

const none = -1

// entry is one message of the window. Entries live by value in a ring indexed
// by seq (the number of records added before it), so heaps and lanes refer to
// them by seq, which never changes and is never reused.
type entry[T any] struct {
	offset         int64
	key            string
	value          T
	bytes          int64 // Record.Bytes
	lastError      string
	reason         string
	firstDelivered time.Time
	deadLettered   time.Time
	deadline       time.Time // lease deadline (stInFlight) or due time (stBackoff, stDLWait)
	token          uint64
	nextInLane     int64 // seq of the next message of the same lane, or none
	timerIdx       int32 // position in the timer heap, or none
	attempt        int32 // attempt number of the current (or next) delivery
	dlFailures     int32
	state          state
	ordered        bool // member of a lane (key or partition ordering)
	expired        bool // in stBackoff because its lease expired: a late Ack is accepted
	scheduled      bool // in stBackoff waiting for Record.NotBefore (never delivered yet)
	outside        bool // a scheduled message (Record.NotBefore set) outside its key's order: in no lane, ever
	held           bool // a scheduled message kept in its key's order, in its lane behind the key's earlier messages, not yet due when added (deadline: its time)
}

// ring holds the window's entries in offset order.
type ring[T any] struct {
	buf  []entry[T] // length is a power of two
	head int64      // seq of the first entry
	n    int
}

func (r *ring[T]) at(seq int64) *entry[T] { return &r.buf[int(seq)&(len(r.buf)-1)] }

func (r *ring[T]) push(e entry[T]) int64 {
	if r.n == len(r.buf) {
		r.resize(max(minRing, 2*len(r.buf)))
	}
	seq := r.head + int64(r.n)
	*r.at(seq) = e
	r.n++
	return seq
}

func (r *ring[T]) popFront() {
	*r.at(r.head) = entry[T]{} // drop references (value, strings) for the GC
	r.head++
	r.n--
	// Shrink when a quarter full, so that a window that was once large does
	// not keep its ring: with many partitions the rings would otherwise stay
	// at their largest size each (the memory budget counts their capacity).
	if len(r.buf) > minRing && r.n <= len(r.buf)/4 {
		r.resize(len(r.buf) / 2)
	}
}

// minRing is the smallest ring kept.
const minRing = 16

func (r *ring[T]) resize(size int) {
	nb := make([]entry[T], size)
	for s := r.head; s < r.head+int64(r.n); s++ {
		nb[int(s)&(size-1)] = *r.at(s)
	}
	r.buf = nb
}

// find returns the seq of the entry with the given offset.
func (r *ring[T]) find(offset int64) (int64, bool) {
	if r.n == 0 {
		return 0, false
	}
	first := r.at(r.head).offset
	if offset < first {
		return 0, false
	}
	// Fast path: no gaps between first and offset.
	if d := offset - first; d < int64(r.n) && r.at(r.head+d).offset == offset {
		return r.head + d, true
	}
	lo, hi := r.head, r.head+int64(r.n) // binary search in [lo, hi)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if r.at(mid).offset < offset {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < r.head+int64(r.n) && r.at(lo).offset == offset {
		return lo, true
	}
	return 0, false
}

// seqQueue is a FIFO of seqs (a growable ring).
type seqQueue struct {
	buf  []int64
	head int
	n    int
}

func (q *seqQueue) push(s int64) {
	if q.n == len(q.buf) {
		nb := make([]int64, max(16, 2*len(q.buf)))
		for i := 0; i < q.n; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = s
	q.n++
}

func (q *seqQueue) pop() int64 {
	s := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return s
}

// readyHeap is a min-heap of seqs (lowest offset first).
type readyHeap []int64

func (h *readyHeap) push(s int64) {
	*h = append(*h, s)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *readyHeap) pop() int64 {
	a := *h
	s := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(a) {
			break
		}
		m := l
		if r := l + 1; r < len(a) && a[r] < a[l] {
			m = r
		}
		if a[i] <= a[m] {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return s
}

// timerItem is a deadline in nanoseconds since the tracker's epoch (its
// first deadline), so that comparisons are integer compares; times are
// subtracted with time.Time.Sub, which uses the monotonic clock reading when
// the driver's times carry one.
type timerItem struct {
	at  int64
	seq int64
}

func (a timerItem) less(b timerItem) bool {
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

// since returns the time as nanoseconds since the epoch, setting the epoch
// on first use.
func (t *Tracker[T]) since(at time.Time) int64 {
	if !t.hasEpoch {
		t.epoch, t.hasEpoch = at, true
	}
	return int64(at.Sub(t.epoch))
}

// Timer heap: a min-heap by time of the entries with a deadline; each entry
// knows its position (timerIdx) so it can be removed or moved in O(log n).

func (t *Tracker[T]) timerSwap(i, j int) {
	h := t.timers
	h[i], h[j] = h[j], h[i]
	t.win.at(h[i].seq).timerIdx = int32(i)
	t.win.at(h[j].seq).timerIdx = int32(j)
}

func (t *Tracker[T]) timerUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.timers[i].less(t.timers[p]) {
			break
		}
		t.timerSwap(i, p)
		i = p
	}
}

func (t *Tracker[T]) timerDown(i int) bool {
	start := i
	n := len(t.timers)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && t.timers[r].less(t.timers[l]) {
			m = r
		}
		if !t.timers[m].less(t.timers[i]) {
			break
		}
		t.timerSwap(i, m)
		i = m
	}
	return i > start
}

func (t *Tracker[T]) timerPush(seq int64, at time.Time) {
	e := t.win.at(seq)
	e.deadline = at
	e.timerIdx = int32(len(t.timers))
	t.timers = append(t.timers, timerItem{t.since(at), seq})
	t.timerUp(len(t.timers) - 1)
}

func (t *Tracker[T]) timerRemove(seq int64) {
	e := t.win.at(seq)
	i := int(e.timerIdx)
	last := len(t.timers) - 1
	if i != last {
		t.timerSwap(i, last)
	}
	t.timers[last] = timerItem{}
	t.timers = t.timers[:last]
	if i != last {
		if !t.timerDown(i) {
			t.timerUp(i)
		}
	}
	e.timerIdx = none
}

func (t *Tracker[T]) timerMove(seq int64, at time.Time) {
	e := t.win.at(seq)
	e.deadline = at
	i := int(e.timerIdx)
	t.timers[i].at = t.since(at)
	if !t.timerDown(i) {
		t.timerUp(i)
	}
}
