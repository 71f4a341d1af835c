package table

import (
	"sync"
)

// completion is one Produce result waiting to be handed to its caller.
type completion struct {
	done func(base int64, err error)
	base int64
	err  error
}

// Completer runs the done callbacks of one partition's appends, in append
// order, on a goroutine of its own that exists only while it has work. The
// log's appender only queues here (a slice append under a leaf lock), so a
// done that blocks delays the later completions of its own partition and
// nothing else: not other partitions, not the appender, not Close.
type Completer struct {
	mu      sync.Mutex // a leaf: guards queue and running
	queue   []completion
	running bool // a drain goroutine is running; it will see queue
}

// Add queues one completion and starts a drain goroutine if none runs.
func (c *Completer) Add(done func(int64, error), base int64, err error) {
	c.mu.Lock()
	c.queue = append(c.queue, completion{done: done, base: base, err: err})
	if c.running {
		c.mu.Unlock()
		return
	}
	c.running = true
	c.mu.Unlock()
	go c.drain() // owned by c: ends as soon as the queue is empty
}

// drain calls queued callbacks until the queue stays empty. Two slices take
// turns as the queue, so a steady flow allocates nothing.
func (c *Completer) drain() {
	var work []completion
	for {
		c.mu.Lock()
		work, c.queue = c.queue, work[:0]
		if len(work) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		for i := range work {
			work[i].done(work[i].base, work[i].err)
			work[i] = completion{}
		}
	}
}
