package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/spoolmq/spool/engine"
)

// leader is where a partition's fetches go: its leader and the topic's
// id (fetch v13+ names topics by id), from a metadata request, kept
// until a fetch says they changed.
type leader struct {
	broker  int32
	topicID [16]byte
}

// leaderOf is the partition's leader, asking Kafka when not known (or
// when refresh, after a fetch was refused).
func (b *Backend) leaderOf(ctx context.Context, part *partition, refresh bool) (leader, error) {
	part.leaderMu.Lock()
	defer part.leaderMu.Unlock()
	if part.leader != nil && !refresh {
		return *part.leader, nil
	}
	details, err := b.admin.ListTopics(ctx, part.t.kname)
	if err != nil {
		return leader{}, b.connErr(part, err)
	}
	d := details[part.t.kname]
	if d.Err != nil {
		return leader{}, fmt.Errorf("kafka: %s/%d (Kafka topic %s): %w", part.t.spec.Name, part.num, part.t.kname, d.Err)
	}
	pd, ok := d.Partitions[part.num]
	if !ok || pd.Leader < 0 {
		return leader{}, fmt.Errorf("kafka: %s/%d (Kafka topic %s): no leader known (Kafka is electing one, or the partition is missing): retry shortly", part.t.spec.Name, part.num, part.t.kname)
	}
	part.leader = &leader{broker: pd.Leader, topicID: d.ID}
	return *part.leader, nil
}

// maxFetchBytes caps one fetch's bytes (a fetch request's field is an
// int32; the broker caps it again with its fetch.max.bytes).
const maxFetchBytes = 64 << 20

// maxFetchRetries: a fetch refused because the leader moved is sent again
// to the new leader this many times.
const maxFetchRetries = 3

// Fetch reads records of the partition from offset on, up to the high
// watermark (what every in-sync replica has), at most about maxBytes of
// them as the caller holds them (at least one record when any is there):
// one fetch request to the leader, without a consumer group. At the end it
// returns none; outside the log an *engine.OffsetOutOfRangeError.
//
// Kafka's byte limits count batches as stored, compressed: a fetch of
// 700 KB of well-compressed 1 KiB messages returned 8,000 of them, 8 MB
// to hold, far over what delivery's memory budget granted. So the request
// asks for maxBytes divided by the partition's last compression ratio,
// and what decodes beyond maxBytes is dropped (read again next time).
func (b *Backend) Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error) {
	part, err := b.partition(topic, p)
	if err != nil {
		return dst, err
	}
	if offset < 0 {
		return dst, &engine.OffsetOutOfRangeError{Offset: offset}
	}
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	// A reply is what was asked plus at most one record batch past it.
	maxBytes = min(max(maxBytes, 1), maxFetchBytes, int(b.cfg.MaxReplyBytes/2))
	fp, wire, err := b.fetch(ctx, part, offset, max(maxBytes/int(max(part.expand.Load(), 1)), 1))
	if err != nil {
		return dst, err
	}
	decoded, kept, full := 0, 0, false
	for _, kr := range fp.Records {
		n := recordBytes(kr)
		decoded += n
		if full = full || kept > 0 && kept+n > maxBytes; full {
			continue // the rest, contiguous, is read again next time
		}
		kept += n
		var r engine.Record
		fromKafka(kr, &r)
		dst = append(dst, r)
	}
	if wire > 0 && decoded > 0 {
		part.expand.Store(int64(max(decoded/wire, 1)))
	}
	return dst, nil
}

// recordBytes is what a record holds decoded: its key, value and headers.
func recordBytes(kr *kgo.Record) int {
	n := len(kr.Key) + len(kr.Value)
	for _, h := range kr.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// fetch is one fetch request of the partition from offset, up to maxBytes
// as Kafka counts them; wire is the bytes of record batches it returned.
func (b *Backend) fetch(ctx context.Context, part *partition, offset int64, maxBytes int) (fp kgo.FetchPartition, wire int, err error) {
	refresh := false
	for attempt := 0; ; attempt++ {
		l, err := b.leaderOf(ctx, part, refresh)
		if err != nil {
			return kgo.FetchPartition{}, 0, err
		}
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MinBytes = 1
		req.MaxBytes = int32(maxBytes)
		req.SessionEpoch = -1 // a full fetch, no session
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = part.t.kname, l.topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = part.num, offset, int32(maxBytes)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, b.cl.Broker(int(l.broker)))
		if err != nil {
			if attempt < maxFetchRetries && ctx.Err() == nil {
				refresh = true // the broker may be gone: ask who leads now
				continue
			}
			return kgo.FetchPartition{}, 0, b.connErr(part, err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return kgo.FetchPartition{}, 0, fmt.Errorf("kafka: fetch %s/%d: %w", part.t.spec.Name, part.num, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return kgo.FetchPartition{}, 0, fmt.Errorf("kafka: fetch %s/%d: the broker answered for %d topics, want 1", part.t.spec.Name, part.num, len(resp.Topics))
		}
		frp := &resp.Topics[0].Partitions[0]
		wire = len(frp.RecordBatches)
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: offset, Topic: part.t.kname, Partition: part.num},
			frp, kgo.DefaultDecompressor(), nil)
		switch {
		case fp.Err == nil:
			return fp, wire, nil
		case errors.Is(fp.Err, kerr.OffsetOutOfRange):
			start, end, err := b.Offsets(part.t.spec.Name, part.num)
			if err != nil {
				return kgo.FetchPartition{}, 0, err
			}
			if offset >= start && offset <= end { // the end moved between the two requests
				continue
			}
			return kgo.FetchPartition{}, 0, &engine.OffsetOutOfRangeError{Offset: offset, Start: start, End: end}
		case retriableFetch(fp.Err) && attempt < maxFetchRetries:
			refresh = true
			continue
		}
		return kgo.FetchPartition{}, 0, fmt.Errorf("kafka: fetch %s/%d from offset %d: %w", part.t.spec.Name, part.num, offset, fp.Err)
	}
}

// retriableFetch: the partition's leader moved (or the metadata the
// request was built from is stale), so asking the new leader may answer.
func retriableFetch(err error) bool {
	return errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.FencedLeaderEpoch) || errors.Is(err, kerr.UnknownLeaderEpoch) ||
		errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.ReplicaNotAvailable) ||
		errors.Is(err, kerr.LeaderNotAvailable) || errors.Is(err, kerr.KafkaStorageError)
}

func (b *Backend) connErr(part *partition, err error) error {
	if errors.Is(err, kgo.ErrClientClosed) || b.ctx.Err() != nil {
		return fmt.Errorf("%w: %s/%d: %w", engine.ErrClosed, part.t.spec.Name, part.num, err)
	}
	if replyRefused(err) {
		return fmt.Errorf("kafka: reading %s/%d: %w", part.t.spec.Name, part.num, b.cfg.replyErr(err))
	}
	return fmt.Errorf("kafka: reading %s/%d: %w (is Kafka reachable?)", part.t.spec.Name, part.num, err)
}

// RecordTime is the Kafka timestamp (Unix ms) of the record at offset.
func (b *Backend) RecordTime(topic string, p int32, offset int64) (int64, error) {
	part, err := b.partition(topic, p)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	fp, _, err := b.fetch(ctx, part, offset, 1)
	if err != nil {
		return 0, err
	}
	for _, r := range fp.Records {
		if r.Offset == offset {
			return r.Timestamp.UnixMilli(), nil
		}
	}
	return 0, fmt.Errorf("kafka: %s/%d: no record at offset %d", topic, p, offset)
}
