package kafka

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spoolmq/spool/engine"
)

// idHeader is the Kafka header that carries a Spool message id: always
// the record's first header, so that an app's own header of that name
// (later) is kept as it is.
const idHeader = "spool-id"

// toKafka is a record as Spool writes it to Kafka: key (nil when empty),
// value, the id header, then the record's headers in order. The
// timestamp is left to Kafka (the broker's append time on topics Spool
// creates, the producer's clock on others) unless the record sets one.
func toKafka(kname string, p int32, r *engine.Record) *kgo.Record {
	kr := &kgo.Record{Topic: kname, Partition: p, Value: r.Value}
	if len(r.Key) > 0 {
		kr.Key = r.Key
	}
	kr.Headers = make([]kgo.RecordHeader, 0, 1+len(r.Headers))
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: idHeader, Value: r.ID})
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if r.Timestamp > 0 {
		kr.Timestamp = time.UnixMilli(r.Timestamp)
	}
	return kr
}

// fromKafka fills r from a fetched Kafka record. A record without the id
// header (written by another Kafka producer) gets the id
// kafka:<partition>:<offset>, unique in the topic, so that the ledger can
// dedupe it like any other.
func fromKafka(kr *kgo.Record, r *engine.Record) {
	r.Offset = kr.Offset
	r.Timestamp = kr.Timestamp.UnixMilli()
	r.Key, r.Value = kr.Key, kr.Value
	hs := kr.Headers
	if len(hs) > 0 && hs[0].Key == idHeader {
		r.ID = hs[0].Value
		hs = hs[1:]
	} else {
		r.ID = fmt.Appendf(nil, "kafka:%d:%d", kr.Partition, kr.Offset)
	}
	r.Headers = r.Headers[:0]
	for _, h := range hs {
		r.Headers = append(r.Headers, engine.Header{Key: h.Key, Value: h.Value})
	}
}
