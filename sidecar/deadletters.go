package sidecar

import (
	"bytes"
	"strconv"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/deliver"
)

// readDeadLetters scans a dead-letter topic from its start and returns up to
// limit entries that match the filter, oldest first.
func readDeadLetters(eng *engine.Node, dlqTopic string, f *spoolv1.DeadLetterFilter, limit int) ([]*spoolv1.DeadLetter, error) {
	n, err := eng.Partitions(dlqTopic)
	if err != nil {
		return nil, err
	}
	var out []*spoolv1.DeadLetter
	for p := range n {
		start, end, err := eng.Offsets(dlqTopic, p)
		if err != nil {
			return nil, err
		}
		for off := start; off < end && len(out) < limit; {
			recs, err := eng.Fetch(dlqTopic, p, off, 1<<20, nil)
			if err != nil {
				return nil, err
			}
			if len(recs) == 0 {
				break
			}
			for i := range recs {
				off = recs[i].Offset + 1
				dl := toDeadLetter(&recs[i], p)
				if matches(dl, f) {
					out = append(out, dl)
					if len(out) == limit {
						break
					}
				}
			}
		}
	}
	return out, nil
}

func toDeadLetter(r *log.Record, dlqPartition int32) *spoolv1.DeadLetter {
	h := map[string]string{}
	app := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
		if len(x.Key) < 6 || x.Key[:6] != "spool-" {
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
	}
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
