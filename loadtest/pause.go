package main

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"
)

// Pause accounting of the rebalance scenario: a pure function from what
// happened (acknowledged publishes, deliveries to the apps, restart
// windows) to the figures. No clock, no goroutines, no I/O: the driver
// (rebalance.go) records the events and calls accountPauses once at the end.
//
// Definitions (docs/benchmarks/consumer-groups.md, "What rebalance reports"):
//
//   - A message of partition p is **waiting** at time t when it was
//     acknowledged to its producer at or before t (it was committed and
//     could be delivered) and had not been delivered to any app yet: its
//     first delivery is after t (or never). A message delivered before its
//     acknowledgement reached the producer is never waiting; a message
//     whose publish failed (no acknowledgement) is not counted.
//   - A **gap** of p runs from one delivery of p (to any app) to the next
//     one of p; the first gap starts at the beginning of time, and when
//     messages of p are still waiting after its last delivery, a last gap
//     runs to the end of the observation (the partition is **stuck**).
//   - A gap's **pause** is the part of it during which some message of p
//     was waiting: from the earliest time in the gap a message of p was
//     waiting to the gap's end. No delivery of p happens inside a gap, so a
//     message waiting at some point of it waits until its end; a gap with
//     nothing waiting has no pause (an idle partition is not paused).
//   - A pause belongs to the window [from, to) in which it ends: from ≤
//     end < to (a stuck partition's pause ends at the end of the
//     observation). The pause of p in a window is the longest of its
//     pauses there (0 if none). Each pause belongs to one window: the
//     pause of a partition the SIGTERM'd sidecar stopped delivering
//     usually starts a little before the SIGTERM (messages acknowledged
//     but not yet delivered then) and is its restart's, not the window's
//     before.
//   - p **moved** in a restart window when, among its deliveries from the
//     last one before the window through the last one in it, some came
//     from the restarted node or from two different nodes. A partition
//     that kept being delivered by one surviving node did not move.
//
// Times are offsets from one origin (monotonic).

// ackEvent is one message acknowledged to its producer.
type ackEvent struct {
	seq  uint64
	part int32
	at   time.Duration
}

// deliveryEvent is one message handed to an app, whose handler completed it.
type deliveryEvent struct {
	seq  uint64
	part int32
	node int // index of the sidecar whose app got it
	at   time.Duration
}

// pauseWindow is a stretch of the run to account pauses in: a restart of
// node (from: its SIGTERM, to: the next restart's SIGTERM, or for the last
// one past the end of the observation), or the steady state before the
// first restart (node -1: no node was restarted, so only a change of node
// makes a move).
type pauseWindow struct {
	node     int
	from, to time.Duration
}

// partitionPause is one partition's longest pause in a window.
type partitionPause struct {
	part  int32
	pause time.Duration
	stuck bool // still waiting at the end of the observation
}

// windowPauses is what one window's accounting found.
type windowPauses struct {
	window     pauseWindow
	moved      []int32        // partitions that moved, ascending
	maxUnmoved partitionPause // the longest pause of a partition that did not move (part -1: none paused)
	maxMoved   partitionPause // the longest pause of a moved partition (part -1: none)
	stuck      []int32        // partitions with messages waiting at the end, never delivered again
}

// accountPauses applies the definitions above to partitions 0..parts-1.
// end is when the observation ended (after the last delivery looked for).
// Events may come in any order; deliveries of unknown or out-of-range
// partitions are ignored.
func accountPauses(parts int, acks []ackEvent, dels []deliveryEvent, windows []pauseWindow, end time.Duration) []windowPauses {
	// First delivery of each message.
	first := make(map[uint64]time.Duration, len(acks))
	byPart := make([][]deliveryEvent, parts)
	for _, d := range dels {
		if d.part < 0 || int(d.part) >= parts {
			continue
		}
		if t, ok := first[d.seq]; !ok || d.at < t {
			first[d.seq] = d.at
		}
		byPart[d.part] = append(byPart[d.part], d)
	}
	gaps := make([][]gap, parts)
	for p := range parts {
		ds := byPart[p]
		slices.SortStableFunc(ds, func(a, b deliveryEvent) int { return cmp.Compare(a.at, b.at) })
		gaps[p] = gapsOf(newWaiting(int32(p), acks, first), ds, end)
	}
	out := make([]windowPauses, 0, len(windows))
	for _, w := range windows {
		wp := windowPauses{window: w, maxUnmoved: partitionPause{part: -1}, maxMoved: partitionPause{part: -1}}
		for p := range parts {
			part := int32(p)
			pp := partitionPause{part: part}
			stuck := false
			for _, g := range gaps[p] {
				if g.to < w.from || g.to >= w.to {
					continue
				}
				stuck = stuck || g.stuck
				if g.to-g.from > pp.pause {
					pp.pause, pp.stuck = g.to-g.from, g.stuck
				}
			}
			if stuck {
				wp.stuck = append(wp.stuck, part)
			}
			best := &wp.maxUnmoved
			if movedIn(byPart[p], w) {
				wp.moved = append(wp.moved, part)
				best = &wp.maxMoved
			}
			if pp.pause > best.pause {
				*best = pp
			}
		}
		out = append(out, wp)
	}
	return out
}

// gap is the paused part of one gap of a partition: [from, to).
type gap struct {
	from, to time.Duration
	stuck    bool
}

// waiting answers, for one partition, when the oldest message not yet
// delivered by a time was acknowledged.
type waiting struct {
	firstDel []time.Duration // ascending; never delivered = maxDur
	minAck   []time.Duration // minAck[i]: earliest ack among messages firstDel[i:]
}

const maxDur = time.Duration(math.MaxInt64)

func newWaiting(part int32, acks []ackEvent, first map[uint64]time.Duration) waiting {
	type msg struct{ ack, del time.Duration }
	var ms []msg
	for _, a := range acks {
		if a.part != part {
			continue
		}
		del, ok := first[a.seq]
		if !ok {
			del = maxDur
		}
		ms = append(ms, msg{a.at, del})
	}
	slices.SortFunc(ms, func(a, b msg) int { return cmp.Compare(a.del, b.del) })
	w := waiting{firstDel: make([]time.Duration, len(ms)), minAck: make([]time.Duration, len(ms)+1)}
	w.minAck[len(ms)] = maxDur
	for i := len(ms) - 1; i >= 0; i-- {
		w.firstDel[i] = ms[i].del
		w.minAck[i] = min(ms[i].ack, w.minAck[i+1])
	}
	return w
}

// oldestAfter is the earliest acknowledgement of a message not delivered
// at t (first delivery after t, or never); maxDur if there is none.
func (w waiting) oldestAfter(t time.Duration) time.Duration {
	i := sort.Search(len(w.firstDel), func(i int) bool { return w.firstDel[i] > t })
	return w.minAck[i]
}

// stillWaiting reports whether a message acknowledged by end was never delivered.
func (w waiting) stillWaiting(end time.Duration) bool {
	n := len(w.firstDel)
	i := sort.Search(n, func(i int) bool { return w.firstDel[i] == maxDur })
	return i < n && w.minAck[i] <= end
}

// gapsOf lists the pauses of one partition, its deliveries ds sorted by time.
func gapsOf(w waiting, ds []deliveryEvent, end time.Duration) []gap {
	var out []gap
	prev := time.Duration(math.MinInt64)
	for _, d := range ds {
		if start := max(prev, w.oldestAfter(prev)); start < d.at {
			out = append(out, gap{from: start, to: d.at})
		}
		prev = d.at
	}
	if w.stillWaiting(end) {
		if start := max(prev, w.oldestAfter(prev)); start < end {
			out = append(out, gap{from: start, to: end, stuck: true})
		}
	}
	return out
}

// movedIn applies the move rule to one partition's deliveries (sorted by
// time) in window w.
func movedIn(ds []deliveryEvent, w pauseWindow) bool {
	lo := max(sort.Search(len(ds), func(i int) bool { return ds[i].at >= w.from })-1, 0) // the last before from
	hi := sort.Search(len(ds), func(i int) bool { return ds[i].at >= w.to }) - 1         // the last before to
	for i := lo; i <= hi; i++ {
		if ds[i].node == w.node || ds[i].node != ds[lo].node {
			return true
		}
	}
	return false
}
