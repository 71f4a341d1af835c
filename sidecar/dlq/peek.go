package dlq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

// FetchBytes is how much of a dead-letter partition one read asks the log
// for. With the page limits of a redrive (PageEntries, PageBytes) it bounds
// what Peek and Redrive hold in memory, whatever the size of the
// dead-letter topic.
const FetchBytes = 1 << 20

// entry is one dead letter with its raw record, for redrive. The record is
// a copy (see own): keeping it does not pin the log's read buffer.
type entry struct {
	dl  *spoolv1.DeadLetter
	rec engine.Record
}

// size is roughly what an entry holds in memory: the bytes of its record.
func (e entry) size() int {
	n := len(e.rec.ID) + len(e.rec.Key) + len(e.rec.Value)
	for _, h := range e.rec.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// own copies a fetched record out of the log's read buffer, so that keeping
// one matching record does not keep a whole read (up to FetchBytes) alive.
func own(r *engine.Record) engine.Record {
	c := *r
	c.ID = bytes.Clone(r.ID)
	c.Key = bytes.Clone(r.Key)
	c.Value = bytes.Clone(r.Value)
	c.Headers = make([]engine.Header, len(r.Headers))
	for i, h := range r.Headers {
		c.Headers[i] = engine.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
	}
	return c
}

// Peek returns up to limit dead letters of group in dlqTopic that match the
// filter, oldest first (partition by partition). It holds at most limit
// entries plus one read of FetchBytes. It has no cursor: every call reads
// the dead-letter topic from its start until it has limit entries, so a
// filter that matches little reads the whole topic (in bounded reads).
func Peek(eng Engine, group, dlqTopic string, f *spoolv1.DeadLetterFilter, limit int) ([]*spoolv1.DeadLetter, error) {
	r, err := newReader(eng, group, dlqTopic, f, "", FetchBytes)
	if err != nil {
		return nil, err
	}
	page, err := r.next(limit, math.MaxInt)
	out := make([]*spoolv1.DeadLetter, len(page))
	for i, e := range page {
		out[i] = e.dl
	}
	return out, err
}

// reader reads the matching dead letters of one group in pages, partition
// by partition, oldest first. It stops at the ends the partitions had when
// it was made: entries appended later (such as messages of this very
// redrive that fail again and are dead-lettered anew) are not read, so a
// redrive always ends and never moves a message twice.
type reader struct {
	eng    Engine
	group  string
	dlq    string
	filter *spoolv1.DeadLetterFilter
	topic  string // only entries whose original topic this is; "" any

	fetchBytes int     // one read from the log asks for this much
	ends       []int64 // per partition, when the reader was made
	part       int32   // partition being read
	off        int64   // next offset to read in part; -1: from its start
	recs       []engine.Record
}

func newReader(eng Engine, group, dlqTopic string, f *spoolv1.DeadLetterFilter, topic string, fetchBytes int) (*reader, error) {
	n, err := eng.Partitions(dlqTopic)
	if err != nil {
		return nil, err
	}
	r := &reader{eng: eng, group: group, dlq: dlqTopic, filter: f, topic: topic, fetchBytes: fetchBytes, ends: make([]int64, n), off: -1}
	for p := range n {
		if _, r.ends[p], err = eng.Offsets(dlqTopic, p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// current returns the record at the reader's position, reading from the
// log when the last read is used up; nil when the reader is done.
func (r *reader) current() (*engine.Record, error) {
	for int(r.part) < len(r.ends) {
		end := r.ends[r.part]
		if r.off < 0 {
			start, _, err := r.eng.Offsets(r.dlq, r.part)
			if err != nil {
				return nil, err
			}
			r.off, r.recs = start, nil
		}
		if len(r.recs) == 0 && r.off < end {
			recs, err := r.eng.Fetch(r.dlq, r.part, r.off, r.fetchBytes, r.recs[:0])
			var gone *engine.OffsetOutOfRangeError
			if errors.As(err, &gone) && r.off < gone.Start {
				r.off = -1 // retention removed them meanwhile: go on from the new start
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("reading dead letters of %s partition %d at offset %d: %w", r.dlq, r.part, r.off, err)
			}
			r.recs = recs
		}
		if len(r.recs) > 0 && r.recs[0].Offset < end {
			return &r.recs[0], nil
		}
		r.part, r.off, r.recs = r.part+1, -1, nil
	}
	return nil, nil
}

// advance moves past the current record.
func (r *reader) advance() {
	r.off = r.recs[0].Offset + 1
	r.recs = r.recs[1:]
}

// next returns the next page of matching dead letters: at most maxEntries
// and, beyond the first, at most maxBytes in all (entry.size). Records
// that do not match are skipped as they are read. An empty page means the
// reader is done.
func (r *reader) next(maxEntries, maxBytes int) ([]entry, error) {
	var page []entry
	size := 0
	for len(page) < maxEntries {
		rec, err := r.current()
		if rec == nil || err != nil {
			return page, err
		}
		dl := toDeadLetter(rec, r.part)
		if dl.GetMessage().GetGroup() != r.group || !matches(dl, r.filter) || (r.topic != "" && dl.GetMessage().GetTopic() != r.topic) {
			r.advance()
			continue
		}
		e := entry{dl: dl, rec: own(rec)}
		if len(page) > 0 && size+e.size() > maxBytes {
			return page, nil
		}
		e.dl.Message.Key, e.dl.Message.Payload = e.rec.Key, e.rec.Value // the copies, not the read buffer
		r.advance()
		page = append(page, e)
		size += e.size()
	}
	return page, nil
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
