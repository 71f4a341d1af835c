package tracker

import (
	"fmt"
	"slices"
)

// checkInternal verifies the tracker's internal bookkeeping against a full
// scan of its window: counters, heaps, heap indexes, lanes.
func (t *Tracker[T]) checkInternal() error {
	var inFlight, pending, parked, dead, done, timed, dlQueued, scheduled int
	var wantReady []int64
	head := map[string]int64{}
	prevOff := int64(-1)
	for s := t.win.head; s < t.win.head+int64(t.win.n); s++ {
		e := t.win.at(s)
		if e.offset <= prevOff {
			return fmt.Errorf("window offsets not increasing at seq %d", s)
		}
		prevOff = e.offset
		if e.timerIdx != none {
			timed++
			if int(e.timerIdx) >= len(t.timers) || t.timers[e.timerIdx].seq != s || t.timers[e.timerIdx].at != int64(e.deadline.Sub(t.epoch)) {
				return fmt.Errorf("offset %d: timer index %d broken", e.offset, e.timerIdx)
			}
		}
		hasTimer := e.timerIdx != none
		switch e.state {
		case stReady:
			pending++
			if hasTimer {
				return fmt.Errorf("offset %d ready with timer", e.offset)
			}
		case stInFlight:
			inFlight++
		case stBackoff:
			pending++
			if e.ordered {
				parked++
			}
		case stDLQueued:
			dead++
			dlQueued++
		case stDLTaken:
			dead++
		case stDLWait:
			dead++
		case stDone:
			done++
		}
		if want := e.state == stInFlight || e.state == stBackoff || e.state == stDLWait; want != hasTimer {
			return fmt.Errorf("offset %d state %d: has timer %v", e.offset, e.state, hasTimer)
		}
		if e.held && (e.state != stReady || !e.ordered) {
			return fmt.Errorf("offset %d held in state %d (ordered %v)", e.offset, e.state, e.ordered)
		}
		if e.scheduled {
			scheduled++
			if e.state != stBackoff || !(e.outside || e.ordered) {
				return fmt.Errorf("offset %d scheduled in state %d (outside %v)", e.offset, e.state, e.outside)
			}
		}
		if e.ordered != (e.state <= stBackoff && t.isOrdered(e.key) && !e.outside) {
			return fmt.Errorf("offset %d state %d: ordered flag %v", e.offset, e.state, e.ordered)
		}
		if e.state <= stBackoff {
			k, ordered := t.laneKey(e.key)
			if ordered && !e.outside {
				if _, ok := head[k]; !ok {
					if e.held {
						return fmt.Errorf("offset %d heads lane %q but is held", e.offset, k)
					}
					head[k] = s
					l, ok := t.lanes[k]
					if !ok || l.head != s {
						return fmt.Errorf("lane %q: head %v, want seq %d", k, l, s)
					}
					if e.state == stReady {
						wantReady = append(wantReady, s)
					}
				} else if e.state != stReady {
					return fmt.Errorf("offset %d not heading lane %q but in state %d", e.offset, k, e.state)
				}
			} else if e.state == stReady {
				wantReady = append(wantReady, s)
			}
		}
	}
	if len(head) != len(t.lanes) {
		return fmt.Errorf("%d lanes, want %d", len(t.lanes), len(head))
	}
	// Walk each lane's links.
	for k, l := range t.lanes {
		var s int64
		for s = l.head; t.win.at(s).nextInLane != none; s = t.win.at(s).nextInLane {
			if lk, _ := t.laneKey(t.win.at(s).key); lk != k {
				return fmt.Errorf("lane %q links offset %d of key %q", k, t.win.at(s).offset, t.win.at(s).key)
			}
		}
		if s != l.tail {
			return fmt.Errorf("lane %q tail %d, want %d", k, l.tail, s)
		}
	}
	got := slices.Clone([]int64(t.ready))
	slices.Sort(got)
	if !slices.Equal(got, wantReady) {
		return fmt.Errorf("ready heap %v, want %v", got, wantReady)
	}
	for i := 1; i < len(t.ready); i++ {
		if t.ready[i] < t.ready[(i-1)/2] {
			return fmt.Errorf("ready heap order broken at %d", i)
		}
	}
	for i := 1; i < len(t.timers); i++ {
		if t.timers[i].less(t.timers[(i-1)/2]) {
			return fmt.Errorf("timer heap order broken at %d", i)
		}
	}
	switch {
	case timed != len(t.timers):
		return fmt.Errorf("%d timers, %d timed entries", len(t.timers), timed)
	case inFlight != t.inFlight, pending != t.pending, parked != t.parked, dead != t.dead, done != t.done:
		return fmt.Errorf("counters inFlight %d/%d pending %d/%d parked %d/%d dead %d/%d done %d/%d",
			t.inFlight, inFlight, t.pending, pending, t.parked, parked, t.dead, dead, t.done, done)
	case scheduled != t.scheduled:
		return fmt.Errorf("%d scheduled, want %d", t.scheduled, scheduled)
	case dlQueued != t.dlq.n:
		return fmt.Errorf("dead-letter queue %d, want %d", t.dlq.n, dlQueued)
	case t.win.n > 0 && t.win.at(t.win.head).state == stDone:
		return fmt.Errorf("window head done but not slid")
	}
	return nil
}

func (t *Tracker[T]) isOrdered(key string) bool { _, o := t.laneKey(key); return o }
