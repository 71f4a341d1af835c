package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// Payload layout: bytes 0..7 the sequence number, 8..15 the send time
// (Unix ns, little endian), the rest filler. The message id is the sequence
// number in decimal, so the consumers' bookkeeping is one bit per message.

// pubStats is what the producers of one phase did.
type pubStats struct {
	acked    *idSet // sequence numbers acknowledged durable
	ackedN   atomic.Int64
	failed   atomic.Int64 // messages whose request failed (may or may not be stored)
	sent     atomic.Int64
	lat      *histogram // publish → durable ack, per message
	done     chan struct{}
	firstErr atomic.Pointer[error]

	// reopen (rebalance): a producer whose stream breaks (its sidecar is
	// restarting) opens a new one after reopenAfter, and failed requests
	// are counted in failed, not reported as errors.
	reopen   bool
	reopened atomic.Int64 // streams opened again after a failure
	// tl, when set, records each acknowledgement (rebalance).
	tl *timeline
	// sentNs, when set, holds each message's send time (Unix ns), for the
	// latency of consumer programs, which report ids only.
	sentNs []atomic.Int64
}

// reopenAfter is how long a producer waits before opening a new stream
// after one broke.
const reopenAfter = 100 * time.Millisecond

func (ps *pubStats) fail(n int, err error) {
	ps.failed.Add(int64(n))
	if !ps.reopen {
		ps.firstErr.CompareAndSwap(nil, &err)
	}
}

// publishAll publishes messages 0..sc.Messages-1 over sc.Producers
// PublishStreams until done or ctx ends; producer i talks to addrs[i %
// len(addrs)] (each node's app talks to its own sidecar). It returns when
// every producer has its answers (or gave up on them).
func publishAll(ctx context.Context, addrs []string, sc *Scenario, ps *pubStats) {
	defer close(ps.done)
	var next atomic.Int64 // next sequence number to hand out, in batches
	var wg sync.WaitGroup
	start := time.Now()
	for p := range sc.Producers {
		wg.Go(func() {
			if err := produce(ctx, addrs[p%len(addrs)], sc, ps, &next, p, start); err != nil {
				ps.firstErr.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
}

type inflight struct {
	first, n int64
	sentAt   time.Time
}

// owed is the requests of one stream not answered yet, by sequence: the
// sender puts, the receiver takes.
type owed struct {
	mu sync.Mutex
	m  map[uint64]inflight
}

func (o *owed) put(seq uint64, f inflight) {
	o.mu.Lock()
	o.m[seq] = f
	o.mu.Unlock()
}

func (o *owed) take(seq uint64) (inflight, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f, ok := o.m[seq]
	delete(o.m, seq)
	return f, ok
}

func (o *owed) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// failAll counts every request still owed as failed with err.
func (o *owed) failAll(ps *pubStats, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.m {
		ps.fail(int(f.n), err)
	}
	clear(o.m)
}

// produce runs producer id's streams: one, or with ps.reopen a new one
// after each that broke, until the ids run out or ctx ends.
func produce(ctx context.Context, addr string, sc *Scenario, ps *pubStats, next *atomic.Int64, id int, start time.Time) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := spoolv1.NewPublisherServiceClient(conn)
	var perBatch time.Duration
	if sc.RatePerS > 0 {
		perBatch = time.Duration(float64(time.Second) * float64(sc.BatchMessages) * float64(sc.Producers) / float64(sc.RatePerS))
	}
	due := start.Add(time.Duration(id) * perBatch / time.Duration(sc.Producers))
	for {
		err := produceStream(ctx, client, sc, ps, next, id, perBatch, &due)
		if err == nil || !ps.reopen || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(reopenAfter):
		}
		ps.reopened.Add(1)
		due = time.Now() // no burst to catch up: the rate resumes from now
	}
}

// newBatch returns the messages a producer reuses for each request: a
// payload of sc.MessageBytes whose first 16 bytes fillBatch sets.
func newBatch(sc *Scenario) []*spoolv1.PublishMessage {
	msgs := make([]*spoolv1.PublishMessage, sc.BatchMessages)
	for i := range msgs {
		msgs[i] = &spoolv1.PublishMessage{Payload: make([]byte, sc.MessageBytes)}
		for j := 16; j < sc.MessageBytes; j++ {
			msgs[i].Payload[j] = byte('a' + j%26)
		}
	}
	return msgs
}

// fillBatch makes msgs the messages of ids first, first+1, ...: the id and
// the send time in the payload's first 16 bytes, the id, the key.
func (ps *pubStats) fillBatch(sc *Scenario, msgs []*spoolv1.PublishMessage, first int64, now time.Time) {
	for i, m := range msgs {
		s := first + int64(i)
		binary.LittleEndian.PutUint64(m.Payload[0:8], uint64(s))
		binary.LittleEndian.PutUint64(m.Payload[8:16], uint64(now.UnixNano()))
		m.Id = strconv.FormatInt(s, 10)
		if s < int64(len(ps.sentNs)) {
			ps.sentNs[s].Store(now.UnixNano())
		}
		if sc.Keys > 0 {
			m.Key = strconv.AppendInt(m.Key[:0], s%int64(sc.Keys), 10)
		}
	}
}

// answered counts the sidecar's answer to request f, received at now.
func (ps *pubStats) answered(f inflight, resp *spoolv1.PublishStreamResponse, now time.Time) {
	if e := resp.GetError(); e != nil || len(resp.GetResults()) != int(f.n) {
		ps.fail(int(f.n), fmt.Errorf("publish refused: %v (%d results for %d messages)", e, len(resp.GetResults()), f.n))
		return
	}
	for s := f.first; s < f.first+f.n; s++ {
		ps.acked.add(uint64(s))
	}
	ps.ackedN.Add(f.n)
	d := now.Sub(f.sentAt)
	for range f.n {
		ps.lat.record(d)
	}
	if ps.tl != nil {
		ps.tl.acked(f.first, resp.GetResults(), now)
	}
}

// produceStream publishes over one PublishStream until the ids run out or
// ctx ends (nil), or the stream breaks. Every request it sent is answered
// or counted as failed when it returns.
func produceStream(ctx context.Context, client spoolv1.PublisherServiceClient, sc *Scenario, ps *pubStats, next *atomic.Int64, id int, perBatch time.Duration, due *time.Time) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stream, err := client.PublishStream(sctx)
	if err != nil {
		return fmt.Errorf("producer %d: open PublishStream: %w", id, err)
	}
	var (
		waiting  = &owed{m: map[uint64]inflight{}}
		slots    = make(chan struct{}, sc.PipelineDepth)
		recvDone = make(chan struct{}) // closed when Recv failed; recvErr is then set
		recvErr  error
	)
	go func() {
		defer close(recvDone)
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr = err
				return
			}
			now := time.Now()
			f, ok := waiting.take(resp.GetSequence())
			if !ok {
				continue
			}
			ps.answered(f, resp, now)
			<-slots
		}
	}()

	batch := int64(sc.BatchMessages)
	total := int64(sc.Messages)
	msgs := newBatch(sc)
	req := &spoolv1.PublishStreamRequest{Topic: topicName}
	if sc.Acks == "leader" {
		req.Acks = spoolv1.Acks_ACKS_LEADER
	}
	var seq uint64
	var sendErr error
send:
	for {
		if perBatch > 0 {
			if d := time.Until(*due); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					break send
				}
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break send
		case <-recvDone:
			sendErr = recvErr
			break send
		}
		first := next.Add(batch) - batch
		if first >= total {
			<-slots
			break
		}
		n := min(batch, total-first)
		*due = due.Add(perBatch)
		now := time.Now()
		ps.fillBatch(sc, msgs[:n], first, now)
		seq++
		req.Sequence, req.Messages = seq, msgs[:n]
		waiting.put(seq, inflight{first: first, n: n, sentAt: now})
		ps.sent.Add(n)
		if err := stream.Send(req); err != nil { // Send encodes req before it returns: msgs may be reused
			sendErr = err
			break
		}
	}
	_ = stream.CloseSend()
	// Wait for the answers still owed (bounded: a stuck sidecar must not hang the run).
	deadline := time.After(10 * time.Second)
	for {
		if waiting.len() == 0 {
			break
		}
		select {
		case <-recvDone:
			err := recvErr
			waiting.failAll(ps, fmt.Errorf("producer %d: stream ended before the answer: %w", id, err))
			if !errors.Is(err, io.EOF) {
				sendErr = errors.Join(sendErr, err)
			}
			if sendErr == nil {
				return nil
			}
			return fmt.Errorf("producer %d: %w", id, sendErr)
		case <-deadline:
			waiting.failAll(ps, fmt.Errorf("producer %d: no answer within 10s", id))
			return errors.Join(sendErr, errors.New("publish answers missing after 10s"))
		case <-time.After(5 * time.Millisecond):
		}
	}
	if sendErr != nil {
		return fmt.Errorf("producer %d: %w", id, sendErr)
	}
	return nil
}

// consStats is what the consumers of one phase saw.
type consStats struct {
	seen      *idSet
	handled   atomic.Int64 // handler calls
	distinct  atomic.Int64
	lastNewNs atomic.Int64 // when a new id was last handled
	badIDs    atomic.Int64
	probes    atomic.Int64 // messages with probeIDPrefix handled
	// where holds, per sequence number, where it was first handled
	// (partition+1 << 40 | offset), so a duplicate can say whether it was
	// stored twice (two offsets) or delivered twice (one offset).
	where   []atomic.Uint64
	dupMu   sync.Mutex
	dupSeen []string   // the first maxDupSamples duplicates, described
	lat     *histogram // send time (in the payload) → handler start
	sdk     []*spool.Stats
	// node[i] is the index of the sidecar consumer i talks to; byNode[n]
	// counts the messages (not probes) the apps of node n handled.
	node   []int
	byNode []atomic.Int64
	// last holds, per partition, the latest delivery of it (probes
	// included): ns since origin << 8 | the node whose app got it.
	origin time.Time
	last   []atomic.Uint64
	// tl, when set, records every delivery (rebalance).
	tl *timeline
	// sentNs, with consumer programs, is pubStats.sentNs: their reports
	// carry ids only.
	sentNs []atomic.Int64
}

// maxDupSamples bounds the duplicates a run describes.
const maxDupSamples = 10

// newConsStats is for n message ids over parts partitions.
func newConsStats(n, parts int) *consStats {
	return &consStats{seen: newIDSet(n), lat: new(histogram), where: make([]atomic.Uint64, n), origin: time.Now(), last: make([]atomic.Uint64, parts)}
}

// lastDelivery is when partition part was last delivered and by which node
// (ok false: never).
func (cs *consStats) lastDelivery(part int) (at time.Time, node int, ok bool) {
	v := cs.last[part].Load()
	if v == 0 {
		return time.Time{}, 0, false
	}
	return cs.origin.Add(time.Duration(v >> 8)), int(v & 0xff), true
}

// sdkTotals sums what the SDK counted over the consumers.
func (cs *consStats) sdkTotals() (reconnects, settleErrors, retried int64) {
	for _, s := range cs.sdk {
		reconnects += s.Reconnects.Load()
		settleErrors += s.SettleErrors.Load()
		retried += s.Retried.Load() + s.Panics.Load()
	}
	return
}

// handle is the handler of the apps: node is the index of the sidecar the
// consumer talks to. It never fails: returning is completing the message.
func (cs *consStats) handle(node int, m *spool.Message) error {
	now := time.Now()
	if p := int(m.Partition); p >= 0 && p < len(cs.last) {
		cs.last[p].Store(uint64(now.Sub(cs.origin))<<8 | uint64(node&0xff))
	}
	if strings.HasPrefix(m.ID, probeIDPrefix) {
		cs.probes.Add(1) // warm-up and leader probes of a cluster run: not counted
		return nil
	}
	seq, err := strconv.ParseUint(m.ID, 10, 64)
	if err != nil {
		cs.handled.Add(1)
		cs.badIDs.Add(1)
		return nil
	}
	cs.record(node, seq, uint64(m.Partition+1)<<40|uint64(m.Offset)&(1<<40-1), m.Attempt, now)
	if cs.tl != nil {
		cs.tl.delivered(seq, m.Partition, node, now)
	}
	if len(m.Payload) >= 16 {
		sent := int64(binary.LittleEndian.Uint64(m.Payload[8:16]))
		cs.lat.record(now.Sub(time.Unix(0, sent)))
	}
	return nil
}

// record counts message seq handled at now by an app of node; loc is where
// it was stored (partition+1 << 40 | offset), 0 when the consumer did not
// say (a consumer program reports ids only).
func (cs *consStats) record(node int, seq, loc uint64, attempt int, now time.Time) {
	cs.handled.Add(1)
	if node < len(cs.byNode) {
		cs.byNode[node].Add(1)
	}
	if cs.seen.add(seq) {
		cs.distinct.Add(1)
		cs.lastNewNs.Store(now.UnixNano())
		if seq < uint64(len(cs.where)) {
			cs.where[seq].Store(loc)
		}
	} else if seq < uint64(len(cs.where)) {
		first := cs.where[seq].Load()
		kind := "stored twice"
		switch {
		case loc == 0:
			kind = "handled twice"
		case first == loc:
			kind = "delivered twice"
		}
		cs.dupMu.Lock()
		if len(cs.dupSeen) < maxDupSamples {
			if loc == 0 {
				cs.dupSeen = append(cs.dupSeen, fmt.Sprintf("id %d %s (the consumer program reports ids only)", seq, kind))
			} else {
				cs.dupSeen = append(cs.dupSeen, fmt.Sprintf("id %d %s: first at partition %d offset %d, again at partition %d offset %d (attempt %d)",
					seq, kind, int64(first>>40)-1, first&(1<<40-1), int64(loc>>40)-1, loc&(1<<40-1), attempt))
			}
		}
		cs.dupMu.Unlock()
	}
}

// handleID records an id a consumer program reported (consumerproc.go),
// read at now: up to report_ms after its handler ran. Its latency is the
// producer's send time (pubStats.sentNs) → now.
func (cs *consStats) handleID(node int, id []byte, now time.Time) {
	if bytes.HasPrefix(id, []byte(probeIDPrefix)) {
		cs.probes.Add(1)
		return
	}
	var seq uint64
	for _, c := range id {
		if c < '0' || c > '9' || seq > (1<<63)/10 {
			cs.handled.Add(1)
			cs.badIDs.Add(1)
			return
		}
		seq = seq*10 + uint64(c-'0')
	}
	if len(id) == 0 {
		return
	}
	cs.record(node, seq, 0, 0, now)
	if seq < uint64(len(cs.sentNs)) {
		if sent := cs.sentNs[seq].Load(); sent != 0 {
			cs.lat.record(now.Sub(time.Unix(0, sent)))
		}
	}
}

// consumeAll runs sc.Consumers SDK subscriptions until ctx ends; consumer
// i talks to addrs[i % len(addrs)] (in a cluster, each node's app consumes
// through its own sidecar).
func consumeAll(ctx context.Context, addrs []string, sc *Scenario, cs *consStats) (wait func() error) {
	var wg sync.WaitGroup
	errs := make([]error, sc.Consumers)
	cs.sdk = make([]*spool.Stats, sc.Consumers)
	cs.node = make([]int, sc.Consumers)
	cs.byNode = make([]atomic.Int64, len(addrs))
	for i := range cs.sdk {
		cs.sdk[i] = new(spool.Stats)
		cs.node[i] = i % len(addrs)
	}
	quiet := slog.New(slog.DiscardHandler)
	for i := range sc.Consumers {
		node := cs.node[i]
		wg.Go(func() {
			c, err := spool.Dial(ctx, addrs[node])
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			opts := []spool.SubscribeOption{
				spool.WithConcurrency(sc.ConsumerConcurrency),
				spool.WithDrainTimeout(5 * time.Second),
				spool.WithConsumerName(fmt.Sprintf("loadtest-%d", i)),
				spool.WithLogger(quiet), // reconnects and settle errors are counted in Stats and reported
				spool.WithStats(cs.sdk[i]),
			}
			if sc.ConsumerPrefetch >= 0 {
				opts = append(opts, spool.WithPrefetch(sc.ConsumerPrefetch))
			}
			h := func(_ context.Context, m *spool.Message) error { return cs.handle(node, m) }
			errs[i] = c.Subscribe(ctx, groupName, []string{topicName}, h, opts...)
		})
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}
