package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolmq/spool/engine"
)

// maxFetchMessages bounds one Fetch in messages (besides maxBytes): one
// batched direct get.
const maxFetchMessages = 1000

// directGet is a direct get request (ADR-31): from Seq, up to Batch
// messages and about MaxBytes; or, with StartTime, the first message
// stored at or after it.
type directGet struct {
	Seq       uint64     `json:"seq,omitempty"`
	Batch     int        `json:"batch,omitempty"`
	MaxBytes  int        `json:"max_bytes,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

// Fetch reads records of the partition from offset on (stream sequence
// offset+1), at most maxFetchMessages and about maxBytes (at least one
// when any is there), with one batched direct get. At the end it returns
// none; below the stream's first sequence (retention deleted it) an
// *engine.OffsetOutOfRangeError.
func (b *Backend) Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error) {
	part, err := b.partition(topic, p)
	if err != nil {
		return dst, err
	}
	if offset < 0 {
		return dst, &engine.OffsetOutOfRangeError{Offset: offset}
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	first := true
	err = b.directGet(ctx, part, directGet{Seq: uint64(offset) + 1, Batch: maxFetchMessages, MaxBytes: max(maxBytes, 1)}, func(m *nats.Msg) error {
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return fmt.Errorf("jetstream: %s: direct get without a sequence: %w", part.stream, err)
		}
		if first && int64(seq) != offset+1 {
			start, end, err := b.Offsets(topic, p)
			if err != nil {
				return err
			}
			if offset < start {
				return &engine.OffsetOutOfRangeError{Offset: offset, Start: start, End: end}
			}
		}
		first = false
		var r engine.Record
		if err := decodeRecord(m.Data, &r); err != nil {
			r = b.undecodable(part, int64(seq)-1, m.Data, err)
		}
		r.Offset = int64(seq) - 1
		r.Timestamp = storeTime(m)
		dst = append(dst, r)
		return nil
	})
	return dst, err
}

// undecodable is the record that stands for a message of the partition
// that is no Spool record (engine.HeaderUndecodable): its raw bytes as the
// value, the id jetstream:<partition>:<offset>, and what was wrong. The
// partition goes on past it; the first of each partition is logged once
// (delivery counts each when it dead-letters it).
func (b *Backend) undecodable(part *partition, offset int64, data []byte, err error) engine.Record {
	if part.undecodableSeen.CompareAndSwap(false, true) {
		b.cfg.Logger.Warn("jetstream: a message on a partition's subject is no Spool record; it is dead-lettered, not delivered (keep other publishers off Spool's subjects: docs/backends.md)",
			"stream", part.stream, "subject", part.subject, "offset", offset, "err", err)
	}
	return engine.Record{
		ID:      fmt.Appendf(nil, "jetstream:%d:%d", part.num, offset),
		Value:   data,
		Headers: []engine.Header{{Key: engine.HeaderUndecodable, Value: []byte(err.Error())}},
	}
}

// storeTime is a direct-get message's stream store time in Unix ms.
func storeTime(m *nats.Msg) int64 {
	t, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}

// errNoMessage: a direct get found nothing (404): past the end, or no
// message after the time asked for.
var errNoMessage = errors.New("no message")

// directGet sends one direct get request and calls each for every message
// of the answer until the end-of-batch marker. A 404 answers nothing (nil
// for a batch, errNoMessage for a single get).
func (b *Backend) directGet(ctx context.Context, part *partition, req directGet, each func(*nats.Msg) error) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	inbox := b.nc.NewRespInbox()
	sub, err := b.nc.SubscribeSync(inbox)
	if err != nil {
		return b.connErr(part, err)
	}
	defer sub.Unsubscribe()
	if err := b.nc.PublishRequest("$JS.API.DIRECT.GET."+part.stream, inbox, body); err != nil {
		return b.connErr(part, err)
	}
	for n := 0; ; n++ {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return b.connErr(part, err)
		}
		switch m.Header.Get("Status") {
		case "":
		case "204": // end of batch
			return nil
		case "404":
			if req.Batch > 0 {
				return nil
			}
			return errNoMessage
		default:
			return fmt.Errorf("jetstream: direct get from %s: status %s %s", part.stream, m.Header.Get("Status"), m.Header.Get("Description"))
		}
		if err := each(m); err != nil {
			return err
		}
		if req.Batch == 0 {
			return nil
		}
	}
}

func (b *Backend) connErr(part *partition, err error) error {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("%w: %s: %w", engine.ErrClosed, part.stream, err)
	}
	return fmt.Errorf("jetstream: reading %s: %w (is NATS reachable?)", part.stream, err)
}

// Offsets are the partition's log start and end: the stream's first
// sequence − 1 and last sequence.
func (b *Backend) Offsets(topic string, p int32) (start, end int64, err error) {
	part, err := b.partition(topic, p)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	s, err := b.js.Stream(ctx, part.stream)
	if err != nil {
		return 0, 0, fmt.Errorf("jetstream: %s/%d (stream %s): %w", topic, p, part.stream, err)
	}
	st := s.CachedInfo().State
	end = int64(st.LastSeq)
	if st.Msgs == 0 {
		return end, end, nil
	}
	return int64(st.FirstSeq) - 1, end, nil
}

// RecordTime is the store time (Unix ms) of the record at offset.
func (b *Backend) RecordTime(topic string, p int32, offset int64) (int64, error) {
	part, err := b.partition(topic, p)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	var ts int64
	err = b.directGet(ctx, part, directGet{Seq: uint64(offset) + 1}, func(m *nats.Msg) error { ts = storeTime(m); return nil })
	if errors.Is(err, errNoMessage) {
		return 0, fmt.Errorf("jetstream: %s/%d: no record at offset %d", topic, p, offset)
	}
	return ts, err
}

// OffsetForTime is the first offset stored at or after ts; the end when
// none is.
func (b *Backend) OffsetForTime(topic string, p int32, ts time.Time) (int64, error) {
	part, err := b.partition(topic, p)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	off := int64(-1)
	err = b.directGet(ctx, part, directGet{StartTime: &ts}, func(m *nats.Msg) error {
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		off = int64(seq) - 1
		return err
	})
	if errors.Is(err, errNoMessage) {
		_, end, err := b.Offsets(topic, p)
		return end, err
	}
	return off, err
}
