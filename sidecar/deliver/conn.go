package deliver

import (
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// conn is the driver's side of a consumer: the queue of frames its sender
// (a Subscribe stream's send goroutine, the callback dispatcher) takes
// from. The machine decides what to send (actSend); the driver queues it.
type conn struct {
	// out carries frames to the consumer's sender. Its capacity exceeds
	// maxInFlight, and every delivery frame uses credit, so the loop never
	// blocks on it; settle-error frames are dropped (and counted) when full.
	out chan queued
}

// queued is a frame waiting for its consumer's sender. fenceAt, when set,
// is when the member that delivers its deliveries fences itself
// (fence.go) unless the coordinator takes another heartbeat first: a
// sender that takes the frame at or after then drops it (fenced) and
// hands it back (droppedEvent) rather than send it. A frame queued before
// a pause (SIGSTOP, a stall) longer than the session timeout thus never
// leaves after it, even when the sender runs before the group's loop has
// noticed the silence.
type queued struct {
	f       *spoolv1.SubscribeResponse
	fenceAt time.Time
}

// fenced reports whether q must be dropped rather than sent now (by
// clock); the clock is read only for a frame that has a fence time.
func (q queued) fenced(clock func() time.Time) bool {
	return !q.fenceAt.IsZero() && !clock().Before(q.fenceAt)
}

// newConsumer returns a consumer with its queue of frames.
func newConsumer(name string, mode Mode, topics []string, maxInFlight int) *consumer {
	c := &consumer{conn: conn{out: make(chan queued, maxInFlight+16)},
		name: name, mode: mode, maxInFlight: maxInFlight, outstanding: map[refKey]sent{}}
	if len(topics) > 0 {
		c.topics = map[string]bool{}
		for _, t := range topics {
			c.topics[t] = true
		}
	}
	return c
}

// send queues a frame without blocking; false if the consumer's queue is
// full (the driver then tells the machine: frameUnsent).
func (c *conn) send(f *spoolv1.SubscribeResponse, fenceAt time.Time) bool {
	select {
	case c.out <- queued{f: f, fenceAt: fenceAt}:
		return true
	default:
		return false
	}
}
