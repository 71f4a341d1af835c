package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// maxForwardQueueBytes bounds the records of one partition waiting to be
// forwarded to its leader (encoded size); a Produce beyond it fails at once
// with ErrNoLeader rather than piling up while no leader answers.
const maxForwardQueueBytes = 64 << 20

// forwarder sends the records of one partition that this node does not
// lead to the partition's leader, in call order: one request in flight at a
// time, and the calls that arrive meanwhile go together in the next one (a
// single raft entry). Unary calls made concurrently could reach the leader
// in any order and reorder a producer's pipelined messages; this keeps them
// in order while the leadership is stable, and batches them under load.
//
// A call whose caller has gone (its ProduceOptions.Context ended) before
// it is sent is not sent: its caller was told the outcome is unknown, and
// storing it now would put it after what the app published since (its
// retry included). A request whose every caller has gone ends too: the
// leader does not propose a request that has ended (proposeOnce).
type forwarder struct {
	// pid and seq identify this node's batches to the leader (producer
	// deduplication): the producer id is drawn at the first call and
	// belongs to this partition value only — a replica move replaces the
	// value, and a new value's batches must not be taken for resends (or
	// stale copies) of the old one's, which may still be in flight. Each
	// call takes the next sequence when it is made (next), whether it is
	// proposed here (this node leads) or forwarded; a batch's base
	// sequence is its first call's.
	pid     int64
	seq     int32 // the sequence of the next call
	queue   []fwdCall
	bytes   int
	running bool // a drain goroutine runs; it will see queue
}

// next draws the producer id (once) and the next sequence. fwdMu held.
func (f *forwarder) next() (int64, int32) {
	if f.pid == 0 {
		f.pid = newProducerID()
	}
	seq := f.seq
	f.seq++
	return f.pid, seq
}

type fwdCall struct {
	recs []log.Record
	size int
	acks engine.Acks
	ctx  context.Context // the caller's; nil: none
	seq  int32
	done func(int64, error)
}

// forward queues recs for the partition's leader. Calls with different
// acks go in different batches (one answer per batch), in call order.
func (c *cluster) forward(part *partition, recs []log.Record, opts engine.ProduceOptions, done func(int64, error)) {
	size := log.EncodedBatchSize(recs)
	part.X.fwdMu.Lock()
	f := &part.X.fwd
	if f.bytes+size > maxForwardQueueBytes && f.bytes > 0 {
		part.X.fwdMu.Unlock()
		part.Compl.Add(done, 0, fmt.Errorf("%w: %s/%d: %d MiB of records already wait for the partition's leader (maxForwardQueueBytes): retry shortly",
			engine.ErrNoLeader, part.Topic.Name, part.Num, maxForwardQueueBytes>>20))
		return
	}
	_, seq := f.next()
	f.queue = append(f.queue, fwdCall{recs: recs, size: size, acks: opts.Acks, ctx: opts.Context, seq: seq, done: done})
	f.bytes += size
	if f.running {
		part.X.fwdMu.Unlock()
		return
	}
	f.running = true
	part.X.fwdMu.Unlock()
	go c.drainForward(part) // owned by the partition's forwarder: ends when its queue is empty
}

// drainForward sends queued calls until the queue stays empty.
func (c *cluster) drainForward(part *partition) {
	limit := c.conf.Log.MaxBatchBytes - log.BatchHeaderSize
	var batch, gone []fwdCall
	var recs []log.Record
	for {
		part.X.fwdMu.Lock()
		f := &part.X.fwd
		gone = f.dropGone(gone[:0])
		n, size := 0, 0
		for n < len(f.queue) && (n == 0 || size+f.queue[n].size <= limit && f.queue[n].acks == f.queue[0].acks) {
			size += f.queue[n].size
			n++
		}
		if n == 0 {
			f.running = false
		}
		batch = append(batch[:0], f.queue[:n]...)
		f.queue = append(f.queue[:0], f.queue[n:]...)
		f.bytes -= size
		pid := f.pid
		part.X.fwdMu.Unlock()
		for i, call := range gone {
			part.Compl.Add(call.done, 0, callerGone(part, call.ctx))
			gone[i] = fwdCall{}
		}
		if n == 0 {
			return
		}
		acks := batch[0].acks
		recs = recs[:0]
		for _, call := range batch {
			recs = append(recs, call.recs...)
		}
		// The producer id and sequence let the leader recognise this batch
		// when it is sent again (cluster_dedupe.go).
		data := log.EncodeRecords(nil, log.BatchHeader{ProducerID: pid, BaseSequence: batch[0].seq}, recs, time.Now().UnixMilli())
		ctx, cancel := callersContext(c.cfg.ProduceTimeout, batch)
		base, err := c.produceAtLeader(ctx, part.X.raftGroup, part.Topic.Name, part.Num, part.X.holders(), data, acks)
		cancel()
		err = c.produceError(part, err)
		for i, call := range batch {
			part.Compl.Add(call.done, base, err)
			base += int64(len(call.recs))
			batch[i] = fwdCall{}
		}
		clear(recs)
	}
}

// dropGone takes the queued calls whose caller has gone out of the queue,
// appending them to gone. fwdMu held.
func (f *forwarder) dropGone(gone []fwdCall) []fwdCall {
	keep := f.queue[:0]
	for _, call := range f.queue {
		if call.ctx != nil && call.ctx.Err() != nil {
			gone = append(gone, call)
			f.bytes -= call.size
			continue
		}
		keep = append(keep, call)
	}
	clear(f.queue[len(keep):])
	f.queue = keep
	return gone
}

// callersContext is a batch's request context: it ends after timeout, or
// once every call of the batch has a context and all of them have ended
// (nobody waits for the answer; the leader then proposes nothing more of
// it). cancel releases it.
func callersContext(timeout time.Duration, batch []fwdCall) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	for _, call := range batch {
		if call.ctx == nil {
			return ctx, cancel
		}
	}
	var left atomic.Int32
	left.Store(int32(len(batch)))
	stops := make([]func() bool, 0, len(batch))
	for _, call := range batch {
		stops = append(stops, context.AfterFunc(call.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
