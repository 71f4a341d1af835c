package dlq

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/deliver"
)

// Engine is what reading and redriving dead letters need from the log.
type Engine interface {
	Partitions(topic string) (int32, error)
	Offsets(topic string, p int32) (start, end int64, err error)
	Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error)
	Produce(topic string, p int32, recs []engine.Record, done func(base int64, err error))
}

// entry is one dead letter with its raw record, for redrive.
type entry struct {
	dl  *spoolv1.DeadLetter
	rec engine.Record
}

// Peek returns up to limit dead letters of group in dlqTopic that match the
// filter, oldest first (partition by partition).
func Peek(eng Engine, group, dlqTopic string, f *spoolv1.DeadLetterFilter, limit int) ([]*spoolv1.DeadLetter, error) {
	var out []*spoolv1.DeadLetter
	err := scan(eng, group, dlqTopic, f, func(e entry) bool {
		out = append(out, e.dl)
		return len(out) < limit
	})
	return out, err
}

// scan calls fn for each matching dead letter until fn returns false.
func scan(eng Engine, group, dlqTopic string, f *spoolv1.DeadLetterFilter, fn func(entry) bool) error {
	n, err := eng.Partitions(dlqTopic)
	if err != nil {
		return err
	}
	for p := range n {
		start, end, err := eng.Offsets(dlqTopic, p)
		if err != nil {
			return err
		}
		for off := start; off < end; {
			recs, err := eng.Fetch(dlqTopic, p, off, 1<<20, nil)
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				break
			}
			for i := range recs {
				off = recs[i].Offset + 1
				dl := toDeadLetter(&recs[i], p)
				if dl.GetMessage().GetGroup() != group || !matches(dl, f) {
					continue
				}
				if !fn(entry{dl: dl, rec: recs[i]}) {
					return nil
				}
			}
		}
	}
	return nil
}

func toDeadLetter(r *engine.Record, dlqPartition int32) *spoolv1.DeadLetter {
	h := map[string]string{}
	app := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
		if !strings.HasPrefix(x.Key, "spool-") {
			app[x.Key] = string(x.Value)
		}
	}
	part, _ := strconv.Atoi(h[deliver.HeaderDLQPartition])
	attempts, _ := strconv.Atoi(h[deliver.HeaderDLQAttempts])
	return &spoolv1.DeadLetter{
		Message: &spoolv1.Delivery{
			MessageId:           string(r.ID),
			Topic:               h[deliver.HeaderDLQTopic],
			Partition:           int32(part),
			Offset:              atoi64(h[deliver.HeaderDLQOffset]),
			Key:                 r.Key,
			Payload:             r.Value,
			Headers:             app,
			PublishTimeMs:       atoi64(h[deliver.HeaderDLQPublishMs]),
			Attempt:             int32(attempts),
			FirstDeliveryTimeMs: atoi64(h[deliver.HeaderDLQFirstDelivMs]),
			LastError:           h[deliver.HeaderDLQLastError],
			Group:               h[deliver.HeaderDLQGroup],
		},
		Reason:             h[deliver.HeaderDLQReason],
		DeadLetteredTimeMs: atoi64(h[deliver.HeaderDLQTimeMs]),
		DlqOffset:          r.Offset,
		DlqPartition:       dlqPartition,
		SidecarVersion:     h[deliver.HeaderSidecarVersion],
		AppVersion:         h[deliver.HeaderDLQAppVersion],
		Attempts:           history(h[deliver.HeaderDLQHistory]),
	}
}

// history decodes the attempt history header (JSON written by the
// delivery loop). Hostile or truncated text gives no history, never a panic.
func history(s string) []*spoolv1.Attempt {
	if s == "" {
		return nil
	}
	var hist []deliver.AttemptRecord
	if json.Unmarshal([]byte(s), &hist) != nil {
		return nil
	}
	out := make([]*spoolv1.Attempt, 0, len(hist))
	for _, a := range hist {
		out = append(out, &spoolv1.Attempt{Attempt: int32(a.Attempt), TimeMs: a.TimeMs, Error: a.Error})
	}
	return out
}

func atoi64(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

func matches(dl *spoolv1.DeadLetter, f *spoolv1.DeadLetterFilter) bool {
	if f == nil {
		return true
	}
	t := dl.GetDeadLetteredTimeMs()
	switch {
	case f.GetFromTimeMs() > 0 && t < f.GetFromTimeMs():
		return false
	case f.GetToTimeMs() > 0 && t >= f.GetToTimeMs():
		return false
	case f.GetReason() != "" && dl.GetReason() != f.GetReason():
		return false
	case len(f.GetKey()) > 0 && !bytes.Equal(dl.GetMessage().GetKey(), f.GetKey()):
		return false
	}
	return true
}
