package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/engine"
)

// Produce appends recs to the partition (see ProduceWith).
func (b *Backend) Produce(topic string, p int32, recs []engine.Record, done func(base int64, err error)) {
	b.ProduceWith(topic, p, recs, engine.ProduceOptions{}, done)
}

// ProduceWith produces recs, in order, to the Kafka partition p (the
// partition the sidecar chose with engine.PartitionForKey) and calls done
// once Kafka has acked every one (acks=all: on every in-sync replica)
// with the offset of the first. opts.Acks is not used: the producer is
// idempotent, which needs acks=all.
//
// The calls of one partition are buffered in call order, the idempotent
// producer keeps that order through its retries (and stores a retried
// batch once), and done callbacks run in call order on a goroutine of
// the backend. Several sidecars producing to one partition may interleave
// their records: each call's records are then not contiguous, and the
// offsets after the first that done implies are not theirs.
func (b *Backend) ProduceWith(topic string, p int32, recs []engine.Record, _ engine.ProduceOptions, done func(base int64, err error)) {
	part, err := b.partition(topic, p)
	if err != nil {
		go done(0, err) // never on the caller's goroutine
		return
	}
	var (
		mu   sync.Mutex
		base = int64(-1)
		errs error
		wg   sync.WaitGroup
	)
	part.pubMu.Lock()
	prev := part.last
	mine := make(chan struct{})
	part.last = mine
	wg.Add(len(recs))
	for i := range recs {
		first := i == 0
		b.cl.Produce(b.ctx, toKafka(part.t.kname, p, &recs[i]), func(r *kgo.Record, err error) {
			mu.Lock()
			if err != nil {
				errs = errors.Join(errs, err)
			} else if first {
				base = r.Offset
			}
			mu.Unlock()
			wg.Done()
		})
	}
	part.pubMu.Unlock()
	b.wg.Add(1)
	go func() { // owned: Close waits for it; ends when every record is acked or failed
		defer b.wg.Done()
		defer close(mine)
		wg.Wait()
		if prev != nil {
			<-prev // done callbacks in call order
		}
		mu.Lock()
		base, err := base, errs
		mu.Unlock()
		if err == nil {
			part.t.notify() // the high watermark moved: wake this sidecar's watchers now
		}
		done(base, b.classify(topic, p, err))
	}()
}

// classify wraps a produce error in the engine's sentinels: the sidecar
// answers MESSAGE_TOO_LARGE for a record over the broker's or topic's
// max.message.bytes, UNAVAILABLE while closing, and OUTCOME_UNKNOWN
// (retry with the same ids; the consumer's ledger drops a copy) for
// everything else: a timed-out or failed produce may have been stored.
func (b *Backend) classify(topic string, p int32, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return fmt.Errorf("%w: %s/%d: a message is larger than Kafka accepts (raise the topic's max.message.bytes, or lower limits.max_message_bytes): %w", engine.ErrBatchTooLarge, topic, p, err)
	case errors.Is(err, kgo.ErrClientClosed), errors.Is(err, context.Canceled) && b.ctx.Err() != nil:
		return fmt.Errorf("%w: %s/%d: %w", engine.ErrClosed, topic, p, err)
	}
	return fmt.Errorf("%w: %s/%d: producing to Kafka: %w", engine.ErrOutcomeUnknown, topic, p, b.cfg.replyErr(err))
}
