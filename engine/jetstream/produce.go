package jetstream

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolmq/spool/engine"
)

// Produce publishes recs to the partition's stream (see ProduceWith).
func (b *Backend) Produce(topic string, p int32, recs []engine.Record, done func(base int64, err error)) {
	b.ProduceWith(topic, p, recs, engine.ProduceOptions{}, done)
}

// ProduceWith publishes recs, in order, to the partition's stream and
// calls done once the stream has acked every one (stored; on a replicated
// stream, on a quorum), with the offset of the first. opts.Acks is not
// used: JetStream acks only what its stream stored.
//
// The calls of one partition are sent in call order and their done
// callbacks run in that order, on a goroutine of the backend. A record
// whose id and content the stream has seen within its duplicate window
// (see msgID) is not stored again; its ack names the stored copy. Several sidecars publishing to one
// partition at once may interleave their records: each is stored once and
// in its publisher's order, but a call's records are then not contiguous
// and the offsets after the first that done implies are not theirs.
func (b *Backend) ProduceWith(topic string, p int32, recs []engine.Record, _ engine.ProduceOptions, done func(base int64, err error)) {
	part, err := b.partition(topic, p)
	if err != nil {
		go done(0, err) // never on the caller's goroutine
		return
	}
	futures := make([]jetstream.PubAckFuture, 0, len(recs))
	part.pubMu.Lock()
	prev := part.last
	mine := make(chan struct{})
	part.last = mine
	for i := range recs {
		m := &nats.Msg{Subject: part.subject, Data: encodeRecord(&recs[i])}
		f, perr := b.js.PublishMsgAsync(m, jetstream.WithMsgID(msgID(recs[i].ID, m.Data)), jetstream.WithExpectStream(part.stream), jetstream.WithStallWait(b.cfg.PublishTimeout))
		if perr != nil {
			err = perr
			break
		}
		futures = append(futures, f)
	}
	part.pubMu.Unlock()
	b.wg.Add(1)
	go func() { // owned: Close waits for it; ends when every ack or error is in
		defer b.wg.Done()
		defer close(mine)
		base, werr := int64(-1), err
		for i, f := range futures {
			select {
			case ack := <-f.Ok():
				if i == 0 {
					base = int64(ack.Sequence) - 1
				}
			case ferr := <-f.Err():
				werr = errors.Join(werr, ferr)
			}
		}
		if prev != nil {
			<-prev // done callbacks in call order
		}
		done(base, classify(topic, p, werr))
	}()
}

// classify wraps a publish error in the engine's sentinels: the sidecar
// answers OUTCOME_UNKNOWN (retry with the same ids; the stream drops
// duplicates) for anything that may have been stored, MESSAGE_TOO_LARGE
// for a message over the server's max_payload.
func classify(topic string, p int32, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %s/%d: a message is larger than the NATS server's max_payload (raise it in nats-server's config, or lower limits.max_message_bytes): %w", engine.ErrBatchTooLarge, topic, p, err)
	case errors.Is(err, nats.ErrConnectionClosed):
		return fmt.Errorf("%w: %s/%d: %w", engine.ErrClosed, topic, p, err)
	}
	return fmt.Errorf("%w: %s/%d: publishing to JetStream: %w", engine.ErrOutcomeUnknown, topic, p, err)
}

// msgID is the Nats-Msg-Id of a record: its id (when printable ASCII
// without spaces, else "hex:" and its bytes in hex), then "~" and a hash
// of the whole payload. A publish retried with the same id and content is
// a duplicate the stream drops; the same id with other content is not:
// a redrive appends a dead letter again under its id, marked for its
// group, and must be stored.
func msgID(id, payload []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(payload)
	sum := strconv.FormatUint(h.Sum64(), 16)
	for _, c := range string(id) {
		if c > unicode.MaxASCII || !unicode.IsPrint(c) || c == ' ' {
			return "hex:" + hex.EncodeToString(id) + "~" + sum
		}
	}
	return string(id) + "~" + sum
}
