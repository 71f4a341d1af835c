package raft

import (
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/spoolmq/spool/engine/transport"
)

// The catch-up throttle (HostConfig.CatchUpBytesPerSecond): the copy a
// replica move makes — the log streamed to a learner the move added — is
// paced, so that a new replica of a large partition does not take the
// disk and network of the producers' writes. A leader's append to a
// learner of a group being reconfigured (Reconfigure called in the last
// catchUpWindow) that carries entries goes through one token bucket per
// node; what does not fit waits, in order, and is sent at the next ticks
// as the bucket refills. Nothing else waits: appends to voters, heartbeats,
// votes and the learners of groups not moving (the controller's non-voting
// members). Raft's window of appends in flight per follower bounds what
// waits (MaxInflightMsgs of at most MaxSizePerMsg each, per learner).

// catchUpWindow: a group counts as moving this long after its last
// Reconfigure (the engine calls it every second while a move lasts).
const catchUpWindow = 5 * time.Second

// throttle is a token bucket of bytes refilled at rate per second, up to
// burst, and the messages waiting for it. A message is sent once the
// bucket holds any tokens and takes its size (the bucket may go below
// zero: a message larger than the burst still goes, and the rate holds on
// average).
type throttle struct {
	rate, burst float64

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	waiting []transport.Message
	bytes   int // of waiting
	delayed uint64
}

func newThrottle(bytesPerSecond int64) *throttle {
	rate := float64(bytesPerSecond)
	return &throttle{rate: rate, burst: rate / 10, tokens: rate / 10}
}

// refill adds what the time since the last refill earned. t.mu held.
func (t *throttle) refill(now time.Time) {
	if !t.last.IsZero() && now.After(t.last) {
		t.tokens = min(t.burst, t.tokens+t.rate*now.Sub(t.last).Seconds())
	}
	if t.last.IsZero() || now.After(t.last) {
		t.last = now
	}
}

// admit returns the messages of msgs that may go now, in order; the others
// wait (behind any already waiting).
func (t *throttle) admit(now time.Time, msgs []transport.Message) []transport.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refill(now)
	var out []transport.Message
	for _, m := range msgs {
		if len(t.waiting) == 0 && t.tokens > 0 {
			t.tokens -= float64(entryBytes(m.Msg))
			out = append(out, m)
			continue
		}
		t.waiting = append(t.waiting, m)
		t.bytes += entryBytes(m.Msg)
		t.delayed++
	}
	return out
}

// release returns the waiting messages the bucket now lets go, in order.
func (t *throttle) release(now time.Time) []transport.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refill(now)
	n := 0
	for n < len(t.waiting) && t.tokens > 0 {
		b := entryBytes(t.waiting[n].Msg)
		t.tokens -= float64(b)
		t.bytes -= b
		n++
	}
	out := t.waiting[:n:n]
	t.waiting = t.waiting[n:]
	if len(t.waiting) == 0 {
		t.waiting = nil
	}
	return out
}

// stats: messages delayed so far, bytes waiting now.
func (t *throttle) stats() (uint64, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.delayed, t.bytes
}

// entryBytes is the size of m's entries' data.
func entryBytes(m raftpb.Message) int {
	n := 0
	for _, e := range m.Entries {
		n += len(e.Data)
	}
	return n
}
