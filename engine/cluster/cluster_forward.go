package cluster

import (
	"context"
	"fmt"
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
type forwarder struct {
	// pid and seq identify this forwarder's batches to the leader
	// (producer deduplication): the producer id is drawn at the first batch
	// and belongs to this partition value only — a replica move replaces
	// the value, and a new value's batches must not be taken for resends
	// (or stale copies) of the old one's, which may still be in flight.
	pid     int64
	seq     int32 // the base sequence of the next batch
	queue   []fwdCall
	bytes   int
	running bool // a drain goroutine runs; it will see queue
}

type fwdCall struct {
	recs []log.Record
	size int
	acks engine.Acks
	done func(int64, error)
}

// forward queues recs for the partition's leader. Calls with different
// acks go in different batches (one answer per batch), in call order.
func (c *cluster) forward(part *partition, recs []log.Record, acks engine.Acks, done func(int64, error)) {
	size := log.EncodedBatchSize(recs)
	part.X.fwdMu.Lock()
	f := &part.X.fwd
	if f.bytes+size > maxForwardQueueBytes && f.bytes > 0 {
		part.X.fwdMu.Unlock()
		part.Compl.Add(done, 0, fmt.Errorf("%w: %s/%d: %d MiB of records already wait for the partition's leader (maxForwardQueueBytes): retry shortly",
			engine.ErrNoLeader, part.Topic.Name, part.Num, maxForwardQueueBytes>>20))
		return
	}
	f.queue = append(f.queue, fwdCall{recs: recs, size: size, acks: acks, done: done})
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
	var batch []fwdCall
	var recs []log.Record
	for {
		part.X.fwdMu.Lock()
		f := &part.X.fwd
		n, size := 0, 0
		for n < len(f.queue) && (n == 0 || size+f.queue[n].size <= limit && f.queue[n].acks == f.queue[0].acks) {
			size += f.queue[n].size
			n++
		}
		if n == 0 {
			f.running = false
			part.X.fwdMu.Unlock()
			return
		}
		batch = append(batch[:0], f.queue[:n]...)
		f.queue = append(f.queue[:0], f.queue[n:]...)
		f.bytes -= size
		if f.pid == 0 {
			f.pid = newProducerID()
		}
		pid, seq, acks := f.pid, f.seq, batch[0].acks
		f.seq++
		part.X.fwdMu.Unlock()

		recs = recs[:0]
		for _, call := range batch {
			recs = append(recs, call.recs...)
		}
		// The producer id and sequence let the leader recognise this batch
		// when it is sent again (cluster_dedupe.go).
		data := log.EncodeRecords(nil, log.BatchHeader{ProducerID: pid, BaseSequence: seq}, recs, time.Now().UnixMilli())
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ProduceTimeout)
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
