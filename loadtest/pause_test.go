package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func ms(x int) time.Duration { return time.Duration(x) * time.Millisecond }

// events builds hand-made timelines: each message is acknowledged at one
// time and delivered (or not) at another, by one node.
type events struct {
	acks []ackEvent
	dels []deliveryEvent
	seq  uint64
}

// msg adds a message of part acknowledged at ack and delivered at del by
// node (del < 0: never delivered).
func (e *events) msg(part int32, ack, del, node int) uint64 {
	s := e.seq
	e.seq++
	e.acks = append(e.acks, ackEvent{seq: s, part: part, at: ms(ack)})
	if del >= 0 {
		e.dels = append(e.dels, deliveryEvent{seq: s, part: part, node: node, at: ms(del)})
	}
	return s
}

// stream adds messages of part acknowledged every `every` ms in [from, to),
// each delivered lag ms later by node.
func (e *events) stream(part int32, from, to, every, lag, node int) {
	for t := from; t < to; t += every {
		e.msg(part, t, t+lag, node)
	}
}

func TestPausesSteadyAndMoved(t *testing.T) {
	var e events
	// Partition 0: node 1 throughout, 2 ms after each ack: never moves.
	e.stream(0, 0, 3000, 10, 2, 1)
	// Partition 1: node 0 (restarted at 1000) until its SIGTERM; what was
	// acknowledged from 1000 on waits until node 2 takes over at 1800.
	e.stream(1, 0, 1000, 10, 3, 0)
	for ack := 1000; ack < 1800; ack += 10 {
		e.msg(1, ack, 1800+(ack-1000)/100, 2) // the backlog, drained quickly
	}
	e.stream(1, 1800, 3000, 10, 2, 2)
	// Partition 2: node 2 throughout, but one delivery came 400 ms late.
	e.stream(2, 0, 1500, 10, 1, 2)
	e.msg(2, 1500, 1900, 2)
	e.stream(2, 1510, 3000, 10, 1, 2)

	w := []pauseWindow{{node: -1, from: ms(0), to: ms(1000)}, {node: 0, from: ms(1000), to: ms(3000)}}
	got := accountPauses(3, e.acks, e.dels, w, ms(4000))
	steady, restart := got[0], got[1]
	if len(steady.moved) != 0 || steady.maxMoved.part != -1 {
		t.Errorf("steady window: moved %v, max moved %+v; want nothing moved", steady.moved, steady.maxMoved)
	}
	if steady.maxUnmoved.pause != ms(3) || steady.maxUnmoved.part != 1 {
		t.Errorf("steady window: max unmoved %+v, want partition 1, 3 ms (its lag)", steady.maxUnmoved)
	}
	if !slices.Equal(restart.moved, []int32{1}) {
		t.Errorf("restart window: moved %v, want [1]", restart.moved)
	}
	// Partition 1: its last delivery by node 0 was at 993 (ack 990); the
	// message acknowledged at 1000 waited until 1800.
	if restart.maxMoved.part != 1 || restart.maxMoved.pause != ms(800) {
		t.Errorf("restart window: max moved %+v, want partition 1, 800 ms", restart.maxMoved)
	}
	// Partition 2: the message acknowledged at 1500 waited until 1900, but
	// the ones behind it were delivered 1 ms after their acks, so the
	// partition's gaps while it waited were 10 ms, the first one 11 ms
	// (1500 → 1511). The 400 ms are one message's latency, not a pause:
	// deliveries of the partition went on.
	if restart.maxUnmoved.part != 2 || restart.maxUnmoved.pause != ms(11) {
		t.Errorf("restart window: max unmoved %+v, want partition 2, 11 ms", restart.maxUnmoved)
	}
	if len(restart.stuck) != 0 || len(steady.stuck) != 0 {
		t.Errorf("stuck %v / %v, want none", steady.stuck, restart.stuck)
	}
}

func TestPausesUnmovedStall(t *testing.T) {
	var e events
	// Partition 0, node 1 throughout: deliveries stop from 1200 to 1900
	// while messages keep being acknowledged (a stall of a partition that
	// did not move: a raft leader change, say).
	e.stream(0, 0, 1200, 10, 1, 1)
	for ack := 1200; ack < 1900; ack += 10 {
		e.msg(0, ack, 1900, 1)
	}
	e.stream(0, 1900, 2500, 10, 1, 1)
	got := accountPauses(1, e.acks, e.dels, []pauseWindow{{node: 0, from: ms(1000), to: ms(2500)}}, ms(3000))[0]
	if len(got.moved) != 0 {
		t.Errorf("moved %v, want none (node 1 kept delivering)", got.moved)
	}
	if got.maxUnmoved.part != 0 || got.maxUnmoved.pause != ms(700) {
		t.Errorf("max unmoved %+v, want partition 0, 700 ms", got.maxUnmoved)
	}
}

func TestPausesIdlePartitionIsNotPaused(t *testing.T) {
	var e events
	e.msg(0, 0, 1, 1)
	e.msg(0, 5000, 5002, 2) // nothing waited in between
	got := accountPauses(1, e.acks, e.dels, []pauseWindow{{node: 0, from: ms(1000), to: ms(4000)}}, ms(6000))[0]
	if got.maxMoved.pause != 0 || got.maxUnmoved.pause != 0 {
		t.Errorf("pauses %+v / %+v, want none: nothing was waiting in the gap", got.maxUnmoved, got.maxMoved)
	}
	// Node 2's delivery ends no pause of the window: the change of node is
	// the next window's.
	if len(got.moved) != 0 {
		t.Errorf("moved %v, want none", got.moved)
	}
}

func TestPausesMoveRule(t *testing.T) {
	w := pauseWindow{node: 0, from: ms(1000), to: ms(2000)}
	cases := []struct {
		name  string
		nodes []int // deliveries at 500 (before the window), 1300, 1700 (in it)
		moved bool
	}{
		{"one surviving node", []int{1, 1, 1}, false},
		{"the restarted node before and after (interrupted)", []int{0, 0, 0}, true},
		{"away from the restarted node", []int{0, 1, 1}, true},
		{"back to the restarted node", []int{1, 1, 0}, true},
		{"between two survivors", []int{1, 2, 2}, true},
		{"to another node late in the window", []int{1, 1, 2}, true},
	}
	for _, c := range cases {
		var e events
		e.msg(0, 499, 500, c.nodes[0])
		e.msg(0, 1299, 1300, c.nodes[1])
		e.msg(0, 1699, 1700, c.nodes[2])
		got := accountPauses(1, e.acks, e.dels, []pauseWindow{w}, ms(3000))[0]
		if moved := len(got.moved) == 1; moved != c.moved {
			t.Errorf("%s (%v): moved %v, want %v", c.name, c.nodes, moved, c.moved)
		}
	}
	// Deliveries before the last one before the window, and from its end
	// on, do not count — also when the pause that the first of them ends
	// began in the window (it is the next window's).
	var e events
	e.msg(0, 0, 1, 2)
	e.msg(0, 499, 500, 1)
	e.msg(0, 1499, 1500, 1)
	e.msg(0, 1900, 2500, 2)
	e.msg(0, 2999, 3000, 2)
	got := accountPauses(1, e.acks, e.dels, []pauseWindow{w, {node: 1, from: ms(2000), to: ms(4000)}}, ms(4000))
	if len(got[0].moved) != 0 || got[0].maxUnmoved.pause != ms(1) {
		t.Errorf("window 1: moved %v, max unmoved %+v; want none moved, 1 ms", got[0].moved, got[0].maxUnmoved)
	}
	if !slices.Equal(got[1].moved, []int32{0}) || got[1].maxMoved.pause != ms(600) {
		t.Errorf("window 2: moved %v, max moved %+v; want partition 0 moved, paused 600 ms (1900 → 2500)", got[1].moved, got[1].maxMoved)
	}
	// The steady window (node -1) moves only on a change of node.
	if got := accountPauses(1, e.acks, e.dels, []pauseWindow{{node: -1, from: ms(1000), to: ms(2000)}}, ms(4000))[0]; len(got.moved) != 0 {
		t.Errorf("steady window: moved %v, want none", got.moved)
	}
}

func TestPausesDeliveredBeforeAckIsNotWaiting(t *testing.T) {
	var e events
	e.msg(0, 0, 1, 1)
	e.msg(0, 900, 100, 1) // the delivery came before the producer saw the ack
	e.msg(0, 950, 960, 1)
	got := accountPauses(1, e.acks, e.dels, []pauseWindow{{node: -1, from: 0, to: ms(1000)}}, ms(1000))[0]
	if got.maxUnmoved.pause != ms(10) {
		t.Errorf("max pause %+v, want 10 ms (950 → 960): the message delivered at 100 never waited", got.maxUnmoved)
	}
}

func TestPausesStuckPartition(t *testing.T) {
	var e events
	e.stream(0, 0, 1000, 10, 1, 1)
	e.msg(0, 1000, -1, 0) // never delivered
	e.msg(0, 1010, -1, 0)
	e.stream(1, 0, 3000, 10, 1, 2)
	// A stuck pause ends at the end of the observation: in the last window,
	// which runs past it.
	w := []pauseWindow{{node: 0, from: ms(0), to: ms(1500)}, {node: 1, from: ms(1500), to: maxDur}}
	all := accountPauses(2, e.acks, e.dels, w, ms(5000))
	if len(all[0].stuck) != 0 {
		t.Errorf("window 1: stuck %v, want none", all[0].stuck)
	}
	got := all[1]
	if !slices.Equal(got.stuck, []int32{0}) {
		t.Errorf("stuck %v, want [0]", got.stuck)
	}
	// Partition 0's last delivery was by the restarted node 1 before the window: moved.
	if got.maxMoved.part != 0 || got.maxMoved.pause != ms(4000) || !got.maxMoved.stuck {
		t.Errorf("max moved %+v, want partition 0 stuck for 4000 ms (1000 → the end)", got.maxMoved)
	}
}

func TestPausesBelongWhereTheyEnd(t *testing.T) {
	var e events
	e.msg(0, 0, 1, 1)
	e.msg(0, 100, 600, 1)  // paused 100..600: before the window
	e.msg(0, 900, 1300, 1) // paused 900..1300: ends in it
	e.msg(0, 1400, 1401, 1)
	e.msg(0, 1500, 2200, 1) // paused 1500..2200: ends after it
	e.msg(0, 2500, 2800, 1)
	e.msg(0, 3000, 3001, 1)
	got := accountPauses(1, e.acks, e.dels, []pauseWindow{{node: 0, from: ms(1000), to: ms(2000)}}, ms(4000))[0]
	if got.maxUnmoved.pause != ms(400) {
		t.Errorf("max pause %+v, want 400 ms (the pause that ends in the window)", got.maxUnmoved)
	}
}

func TestPausesRedeliveryAndOrder(t *testing.T) {
	var e events
	e.stream(0, 0, 1000, 10, 1, 1)
	s := e.msg(0, 1000, 1002, 1)
	e.dels = append(e.dels, deliveryEvent{seq: s, part: 0, node: 2, at: ms(1500)})  // delivered again elsewhere
	e.stream(0, 1010, 2000, 10, 600, 2)                                             // 1010 waits until 1610
	e.dels = append(e.dels, deliveryEvent{seq: 99999, part: 7, node: 1, at: ms(5)}) // a partition out of range: ignored
	w := []pauseWindow{{node: 1, from: ms(1000), to: ms(2000)}}
	want := accountPauses(1, e.acks, e.dels, w, ms(3000))
	// The redelivery at 1500 ends the gap: 1010 → 1500 is 490 ms, then 1500 → 1610 (acks from 1010 still waiting) 110 ms.
	if want[0].maxMoved.pause != ms(490) || !slices.Equal(want[0].moved, []int32{0}) {
		t.Errorf("max moved %+v, moved %v; want partition 0 paused 490 ms and moved", want[0].maxMoved, want[0].moved)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		r.Shuffle(len(e.acks), func(i, j int) { e.acks[i], e.acks[j] = e.acks[j], e.acks[i] })
		r.Shuffle(len(e.dels), func(i, j int) { e.dels[i], e.dels[j] = e.dels[j], e.dels[i] })
		got := accountPauses(1, e.acks, e.dels, w, ms(3000))
		if got[0].maxMoved != want[0].maxMoved || !slices.Equal(got[0].moved, want[0].moved) {
			t.Fatalf("events in another order: %+v, want %+v", got[0], want[0])
		}
	}
}

// The SIGTERM'd sidecar stops delivering with messages acknowledged but not
// delivered: the pause starts before the SIGTERM and is the restart's.
func TestPausesStartingBeforeTheSIGTERM(t *testing.T) {
	var e events
	e.stream(0, 0, 990, 10, 2, 0)
	e.msg(0, 995, 1800, 1)
	e.stream(0, 1810, 2500, 10, 2, 1)
	w := []pauseWindow{{node: -1, from: 0, to: ms(1000)}, {node: 0, from: ms(1000), to: maxDur}}
	got := accountPauses(1, e.acks, e.dels, w, ms(3000))
	if got[0].maxUnmoved.pause != ms(2) || len(got[0].moved) != 0 {
		t.Errorf("steady window: max unmoved %+v, moved %v; want 2 ms, none", got[0].maxUnmoved, got[0].moved)
	}
	if got[1].maxMoved.pause != ms(805) || !slices.Equal(got[1].moved, []int32{0}) {
		t.Errorf("restart window: max moved %+v, moved %v; want 805 ms (995 → 1800), [0]", got[1].maxMoved, got[1].moved)
	}
}
