package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Defaults and limits of a Publisher.
const (
	DefaultMaxInFlight  = 1024             // messages published and not yet answered
	DefaultCloseTimeout = 30 * time.Second // how long Close waits for unconfirmed messages
	maxBatchMessages    = 1000             // messages per PublishStream request (sidecar limit: 10,000)
	maxBatchBytes       = 1 << 20          // key+payload bytes per request, below gRPC's 4 MiB default
)

// PublisherOption configures a Publisher.
type PublisherOption func(*publisherConfig)

type publisherConfig struct {
	maxInFlight  int
	closeTimeout time.Duration
}

// WithMaxInFlight bounds the messages published but not yet confirmed
// durable (default 1024). Publish blocks while the window is full.
func WithMaxInFlight(n int) PublisherOption {
	return func(c *publisherConfig) { c.maxInFlight = n }
}

// WithCloseTimeout bounds how long Close waits for unconfirmed messages
// (default 30 s); when it passes, they fail (they may or may not be stored)
// and Close returns an error saying how many. 0 fails them at once.
func WithCloseTimeout(d time.Duration) PublisherOption {
	return func(c *publisherConfig) { c.closeTimeout = max(d, 0) }
}

// Publisher pipelines publishes to one topic over a PublishStream: Publish
// returns at once with a Future, and messages queued meanwhile are sent
// together in one request. The number of unconfirmed messages is bounded.
// A Publisher is safe for concurrent use. Close it when done.
//
// If the stream breaks, the unconfirmed messages fail (they may or may not
// be stored: publish them again with the same WithID) and the next Publish
// opens a new stream.
type Publisher struct {
	client *Client
	topic  string
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{} // in-flight window: one token per unconfirmed message
	g      sync.WaitGroup
	cfg    publisherConfig

	mu     sync.Mutex
	queue  []pubItem
	wake   chan struct{}
	closed bool
	stream *pubStream
	seq    uint64
}

type pubItem struct {
	m    *spoolv1.PublishMessage
	acks Acks
	f    *Future
}

// pubStream is one PublishStream with the requests awaiting an answer.
// Only its recvLoop calls Recv: gRPC forbids two goroutines in Recv on one
// stream (they race for the final status and one can then wait forever).
type pubStream struct {
	s        grpc.BidiStreamingClient[spoolv1.PublishStreamRequest, spoolv1.PublishStreamResponse]
	cancel   context.CancelFunc
	recvDone chan struct{}        // closed when recvLoop has returned, the stream broken with its status
	waiting  map[uint64][]*Future // guarded by Publisher.mu
	broken   bool
}

// Future is the result of a pipelined publish.
type Future struct {
	done chan struct{}
	res  PublishResult
	err  error
	cb   func(PublishResult, error)
}

// Done is closed when the result is known.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait returns the result once the message is durable, or the error.
func (f *Future) Wait(ctx context.Context) (PublishResult, error) {
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return PublishResult{}, fmt.Errorf("spool: waiting for a publish: %w (the message may still be stored)", ctx.Err())
	}
}

// Publisher returns a pipelined publisher to topic. ctx bounds its life:
// when ctx ends, unconfirmed messages fail.
func (c *Client) Publisher(ctx context.Context, topic string, opts ...PublisherOption) *Publisher {
	cfg := publisherConfig{maxInFlight: DefaultMaxInFlight, closeTimeout: DefaultCloseTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxInFlight < 1 {
		cfg.maxInFlight = 1
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &Publisher{
		client: c, topic: topic, ctx: pctx, cancel: cancel, cfg: cfg,
		slots: make(chan struct{}, cfg.maxInFlight),
		wake:  make(chan struct{}, 1),
	}
	p.g.Go(p.sendLoop)
	return p
}

// Publish queues a message and returns its Future. It blocks while the
// in-flight window is full.
func (p *Publisher) Publish(key, payload []byte, opts ...PublishOption) *Future {
	f := &Future{done: make(chan struct{})}
	p.enqueue(buildMessage(key, payload, opts), f)
	return f
}

// PublishFunc is Publish with a callback instead of a Future. Callbacks run
// one at a time on the Publisher's receiving goroutine: keep them short.
func (p *Publisher) PublishFunc(key, payload []byte, cb func(PublishResult, error), opts ...PublishOption) {
	f := &Future{done: make(chan struct{}), cb: cb}
	p.enqueue(buildMessage(key, payload, opts), f)
}

func (p *Publisher) enqueue(o outgoing, f *Future) {
	if p.topic == "" {
		p.complete(f, PublishResult{}, errors.New("spool: publisher: topic is empty: name the topic to publish to"), false)
		return
	}
	select {
	case p.slots <- struct{}{}:
	case <-p.ctx.Done():
		p.complete(f, PublishResult{}, fmt.Errorf("spool: publish to %q: publisher closed: %w", p.topic, p.ctx.Err()), false)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.complete(f, PublishResult{}, fmt.Errorf("spool: publish to %q: publisher closed", p.topic), true)
		return
	}
	p.queue = append(p.queue, pubItem{m: o.m, acks: o.acks, f: f})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// complete settles a future, frees its window slot if it holds one, and
// runs its callback.
func (p *Publisher) complete(f *Future, res PublishResult, err error, holdsSlot bool) {
	f.res, f.err = res, err
	close(f.done)
	if holdsSlot {
		<-p.slots
	}
	if f.cb != nil {
		f.cb(res, err)
	}
}

// Close waits for unconfirmed messages (until the Publisher's ctx ends or
// the close timeout passes, see WithCloseTimeout), then closes the stream.
// Messages still unconfirmed then fail; Close returns an error if the
// timeout cut them off. Close returns within the close timeout plus the time
// the Publisher's goroutines need to see the stream cancelled (and any
// PublishFunc callback running then to return).
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	// Wait for the window to empty: every slot back.
	timeout := time.NewTimer(p.cfg.closeTimeout)
	defer timeout.Stop()
	held, timedOut := 0, false
wait:
	for held < cap(p.slots) {
		select {
		case p.slots <- struct{}{}:
			held++
		case <-p.ctx.Done():
			break wait
		case <-timeout.C:
			timedOut = true
			break wait
		}
	}
	p.cancel()
	p.g.Wait()
	if timedOut {
		return fmt.Errorf("spool: publisher to %q: %d messages unconfirmed after the close timeout (%s); they failed and may or may not be stored: publish them again with the same WithID, or raise WithCloseTimeout", p.topic, cap(p.slots)-held, p.cfg.closeTimeout)
	}
	return nil
}

// sendLoop sends whatever is queued as one request per topic batch, opening
// a stream when needed.
func (p *Publisher) sendLoop() {
	defer p.failAll(fmt.Errorf("spool: publish to %q: publisher closed before the sidecar answered; the message may or may not be stored", p.topic))
	for {
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return
		}
		for {
			p.mu.Lock()
			n, size := 0, 0
			for n < len(p.queue) && n < maxBatchMessages {
				sz := len(p.queue[n].m.Key) + len(p.queue[n].m.Payload)
				if n > 0 && (size+sz > maxBatchBytes || p.queue[n].acks != p.queue[0].acks) {
					break // one acks per request
				}
				size += sz
				n++
			}
			if n == 0 {
				p.mu.Unlock()
				break
			}
			batch := make([]pubItem, n)
			copy(batch, p.queue)
			p.queue = append(p.queue[:0], p.queue[n:]...)
			st := p.stream
			p.mu.Unlock()
			p.sendBatch(st, batch)
		}
	}
}

func (p *Publisher) sendBatch(st *pubStream, batch []pubItem) {
	if st == nil {
		var err error
		st, err = p.openStream()
		if err != nil {
			for _, it := range batch {
				p.complete(it.f, PublishResult{}, err, true)
			}
			return
		}
	}
	msgs := make([]*spoolv1.PublishMessage, len(batch))
	futs := make([]*Future, len(batch))
	for i, it := range batch {
		msgs[i], futs[i] = it.m, it.f
	}
	p.mu.Lock()
	if st.broken {
		p.mu.Unlock()
		p.sendBatch(nil, batch)
		return
	}
	p.seq++
	seq := p.seq
	st.waiting[seq] = futs
	p.mu.Unlock()
	if err := st.s.Send(&spoolv1.PublishStreamRequest{Sequence: seq, Topic: p.topic, Messages: msgs, Acks: batch[0].acks.proto()}); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream has ended; its status (why) is for Recv, which only
			// recvLoop calls. It fails this batch with that status too, as
			// the batch is registered in st.waiting. Recv returns at once on
			// an ended stream, so this wait is short.
			<-st.recvDone
			return
		}
		p.breakStream(st, err) // other Send errors abort the stream and are its status
	}
}

func (p *Publisher) openStream() (*pubStream, error) {
	sctx, cancel := context.WithCancel(p.ctx)
	s, err := p.client.pub.PublishStream(sctx)
	if err != nil {
		cancel()
		return nil, p.client.publishError(p.topic, err)
	}
	st := &pubStream{s: s, cancel: cancel, recvDone: make(chan struct{}), waiting: make(map[uint64][]*Future)}
	p.mu.Lock()
	p.stream = st
	p.mu.Unlock()
	p.g.Go(func() { p.recvLoop(st) })
	return st, nil
}

func (p *Publisher) recvLoop(st *pubStream) {
	defer close(st.recvDone)
	for {
		resp, err := st.s.Recv()
		if err != nil {
			p.breakStream(st, err)
			return
		}
		p.mu.Lock()
		futs := st.waiting[resp.GetSequence()]
		delete(st.waiting, resp.GetSequence())
		p.mu.Unlock()
		if futs == nil {
			continue
		}
		if e := resp.GetError(); e != nil {
			err := fmt.Errorf("spool: publish to %q: %s: %s", p.topic, e.GetReason(), e.GetMessage())
			if e.GetReason() == "OUTCOME_UNKNOWN" {
				err = fmt.Errorf("spool: publish to %q: %w (OUTCOME_UNKNOWN: %s): the messages may or may not be stored; publish them again with the same message ids (consumers dedupe on them)", p.topic, ErrOutcomeUnknown, e.GetMessage())
			}
			for _, f := range futs {
				p.complete(f, PublishResult{}, err, true)
			}
			continue
		}
		rs := resp.GetResults()
		for i, f := range futs {
			if i >= len(rs) {
				p.complete(f, PublishResult{}, fmt.Errorf("spool: publish to %q: sidecar answered %d results for %d messages: upgrade the sidecar and SDK together", p.topic, len(rs), len(futs)), true)
				continue
			}
			p.complete(f, PublishResult{ID: rs[i].GetId(), Partition: rs[i].GetPartition(), Offset: rs[i].GetOffset()}, nil, true)
		}
	}
}

// breakStream fails every request waiting on st; the next batch opens a new stream.
func (p *Publisher) breakStream(st *pubStream, err error) {
	p.mu.Lock()
	if st.broken {
		p.mu.Unlock()
		return
	}
	st.broken = true
	if p.stream == st {
		p.stream = nil
	}
	waiting := st.waiting
	st.waiting = nil
	p.mu.Unlock()
	st.cancel()
	e := fmt.Errorf("spool: publish to %q: stream to the sidecar broke: %w: the message may or may not be stored; publish it again with the same WithID", p.topic, err)
	if p.ctx.Err() != nil {
		e = fmt.Errorf("spool: publish to %q: publisher closed before the sidecar answered; the message may or may not be stored", p.topic)
	}
	for _, futs := range waiting {
		for _, f := range futs {
			p.complete(f, PublishResult{}, e, true)
		}
	}
}

func (p *Publisher) failAll(err error) {
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.closed = true
	st := p.stream
	p.mu.Unlock()
	for _, it := range q {
		p.complete(it.f, PublishResult{}, err, true)
	}
	if st != nil {
		p.breakStream(st, err)
	}
}
