package transport

import "sync"

// queue is one peer lane's bounded send queue: Send appends, the lane's
// sender goroutine drains everything at once (one flush). Bounded by
// message count and bytes; what does not fit is refused.
type queue struct {
	maxLen, maxBytes int

	mu     sync.Mutex
	msgs   []Message
	bytes  int
	signal chan struct{} // capacity 1: "there is something to drain"
}

func newQueue(l Limits) *queue {
	return &queue{maxLen: l.QueueLen, maxBytes: l.QueueBytes, signal: make(chan struct{}, 1)}
}

// push queues msgs (whose encoded sizes are sizes) together, in order, as
// far as the limits allow; it returns how many did not fit (the last ones).
func (q *queue) push(msgs []Message, sizes []int) (dropped int) {
	q.mu.Lock()
	n := 0
	for i := range msgs {
		if len(q.msgs) >= q.maxLen || q.bytes+sizes[i] > q.maxBytes {
			break
		}
		q.msgs = append(q.msgs, msgs[i])
		q.bytes += sizes[i]
		n++
	}
	q.mu.Unlock()
	if n > 0 {
		select {
		case q.signal <- struct{}{}:
		default:
		}
	}
	return len(msgs) - n
}

// drain returns every queued message and empties the queue, which takes
// buf (emptied by the caller) as its next backing array: no copying.
func (q *queue) drain(buf []Message) []Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.msgs
	q.msgs, q.bytes = buf[:0], 0
	return out
}

// release drops the backing array of an empty queue: an idle lane keeps
// no room for the last burst.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.msgs) == 0 {
		q.msgs = nil
	}
}

// clear drops everything queued and returns how many messages that was.
func (q *queue) clear() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.msgs)
	clear(q.msgs)
	q.msgs = q.msgs[:0]
	q.bytes = 0
	return n
}
