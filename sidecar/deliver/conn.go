package deliver

import spoolv1 "github.com/spoolmq/spool/proto/spool/v1"

// conn is the driver's side of a consumer: the queue of frames its sender
// (a Subscribe stream's send goroutine, the callback dispatcher) takes
// from. The machine decides what to send (actSend); the driver queues it.
type conn struct {
	// out carries frames to the consumer's sender. Its capacity exceeds
	// maxInFlight, and every delivery frame uses credit, so the loop never
	// blocks on it; settle-error frames are dropped (and counted) when full.
	out chan *spoolv1.SubscribeResponse
}

// newConsumer returns a consumer with its queue of frames.
func newConsumer(name string, mode Mode, topics []string, maxInFlight int) *consumer {
	c := &consumer{conn: conn{out: make(chan *spoolv1.SubscribeResponse, maxInFlight+16)},
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
func (c *conn) send(f *spoolv1.SubscribeResponse) bool {
	select {
	case c.out <- f:
		return true
	default:
		return false
	}
}
