// Package scheduled reads and cancels a topic's scheduled messages as the
// log stores them (docs/scheduling.md): ListScheduled pages through those
// not yet due, CancelScheduled appends a cancel record (schedule.CancelHeader)
// beside the message, which each consumer group applies when it reads it.
// It knows the log only through Engine; it keeps no state between calls.
package scheduled

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/schedule"
)

// Engine is what listing and cancelling need from the log.
type Engine interface {
	Partitions(topic string) (int32, error)
	Offsets(topic string, p int32) (start, end int64, err error)
	Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error)
	Produce(topic string, p int32, recs []engine.Record, done func(base int64, err error))
}

// Page and scan bounds of one call.
const (
	// DefaultLimit and MaxLimit bound the messages of one ListScheduled page.
	DefaultLimit = 100
	MaxLimit     = 1000
	// ScanRecordsPerCall bounds the records one ListScheduled reads: a
	// topic with few scheduled messages among many returns a short page,
	// even an empty one, with a cursor to go on.
	ScanRecordsPerCall = 50_000
	// fetchBytes is one read of the log.
	fetchBytes = 1 << 20
)

// Server answers ListScheduled and CancelScheduled.
type Server struct {
	eng Engine
	now func() time.Time
}

// New returns a Server over eng.
func New(eng Engine) *Server { return &Server{eng: eng, now: time.Now} }

// scan calls f on the records of partition p from offset from to the
// partition's end, until f returns false; it returns the offset after the
// last record f was given.
func (s *Server) scan(topic string, p int32, from int64, f func(r *engine.Record) bool) (int64, error) {
	start, end, err := s.eng.Offsets(topic, p)
	if err != nil {
		return from, err
	}
	pos := max(from, start)
	var buf []engine.Record
	for pos < end {
		buf, err = s.eng.Fetch(topic, p, pos, fetchBytes, buf[:0])
		var gone *engine.OffsetOutOfRangeError
		if errors.As(err, &gone) && pos < gone.Start {
			pos = gone.Start // retention removed them meanwhile
			continue
		}
		if err != nil {
			return pos, fmt.Errorf("reading topic %q partition %d at offset %d: %w", topic, p, pos, err)
		}
		if len(buf) == 0 {
			break
		}
		for i := range buf {
			if buf[i].Offset < pos {
				continue
			}
			if buf[i].Offset >= end {
				return end, nil
			}
			pos = buf[i].Offset + 1
			if !f(&buf[i]) {
				return pos, nil
			}
		}
	}
	return max(pos, end), nil
}

// Cancel appends a cancel record for the scheduled message req names,
// once it has found the message and checked that it is not yet due.
func (s *Server) Cancel(ctx context.Context, req *spoolv1.CancelScheduledRequest) (*spoolv1.CancelScheduledResponse, error) {
	topic, id := req.GetTopic(), req.GetId()
	if id == "" {
		return nil, apierr.New(apierr.InvalidRequest, "cancel scheduled: id is empty: name the message to cancel")
	}
	if (req.Partition == nil) != (req.Offset == nil) {
		return nil, apierr.New(apierr.InvalidRequest, "cancel scheduled: give partition and offset together (as the publish returned them), or neither")
	}
	n, err := s.eng.Partitions(topic)
	if err != nil {
		return nil, err
	}
	parts := make([]int32, 0, n)
	from := int64(0)
	switch {
	case req.Partition != nil:
		if p := req.GetPartition(); p < 0 || p >= n {
			return nil, apierr.New(apierr.BadPartition, "cancel scheduled: partition %d does not exist: topic %q has partitions 0..%d", p, topic, n-1)
		}
		parts, from = append(parts, req.GetPartition()), req.GetOffset()
	case len(req.GetKey()) > 0:
		parts = append(parts, engine.PartitionForKey(req.GetKey(), n))
	default:
		for p := range n {
			parts = append(parts, p)
		}
	}
	var found engine.Record
	var at time.Time
	var plain bool // the id is a message published without a delivery time
	part := int32(-1)
	for _, p := range parts {
		_, err := s.scan(topic, p, from, func(r *engine.Record) bool {
			if req.Offset != nil && r.Offset != req.GetOffset() {
				return false // only the record named
			}
			if string(r.ID) != id {
				return req.Offset == nil
			}
			var ok bool
			if at, ok = schedule.Of(r); !ok {
				plain = true
				return true
			}
			found, part = engine.Record{Offset: r.Offset, Key: append([]byte(nil), r.Key...)}, p
			return false
		})
		if err != nil {
			return nil, err
		}
		if part >= 0 {
			break
		}
	}
	switch {
	case part < 0 && plain:
		return nil, apierr.New(apierr.UnknownScheduled, "cancel scheduled: message %q of topic %q was published without a delivery time: it was delivered as soon as it was stored", id, topic)
	case part < 0:
		where := fmt.Sprintf("topic %q", topic)
		if req.Offset != nil {
			where = fmt.Sprintf("topic %q partition %d offset %d", topic, req.GetPartition(), req.GetOffset())
		}
		return nil, apierr.New(apierr.UnknownScheduled, "cancel scheduled: no scheduled message with id %q in %s", id, where)
	case !at.After(s.now()):
		return nil, apierr.New(apierr.ScheduleDue, "cancel scheduled: message %q came due at %s: it is being or has been delivered", id, at.UTC().Format(time.RFC3339Nano))
	}
	rec := engine.Record{ID: []byte("spool-cancel:" + id), Key: found.Key, Headers: []engine.Header{{Key: schedule.CancelHeader, Value: []byte(id)}}}
	done := make(chan error, 1)
	s.eng.Produce(topic, part, []engine.Record{rec}, func(_ int64, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			return nil, fmt.Errorf("cancel scheduled: topic %q partition %d: %w", topic, part, err)
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("cancel scheduled: %w: %w", engine.ErrOutcomeUnknown, ctx.Err())
	}
	return &spoolv1.CancelScheduledResponse{Partition: part, Offset: found.Offset, DeliverAtMs: at.UnixMilli()}, nil
}

// cursor is where a ListScheduled page goes on: a partition and the next
// offset to read in it.
type cursor struct {
	part   int32
	offset int64
}

func (c cursor) String() string { return fmt.Sprintf("%d:%d", c.part, c.offset) }

func parseCursor(s string, n int32) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	ps, os, ok := strings.Cut(s, ":")
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if !ok || err1 != nil || err2 != nil || p < 0 || int32(p) >= n || o < 0 {
		return cursor{}, apierr.New(apierr.InvalidCursor, "cursor %q is not one ListScheduled made for this topic", s)
	}
	return cursor{int32(p), o}, nil
}

// List returns a page of the topic's scheduled messages not yet due. A
// message whose cancel record was read on the same page (or within the
// page's scan budget after it) is left out.
func (s *Server) List(_ context.Context, req *spoolv1.ListScheduledRequest) (*spoolv1.ListScheduledResponse, error) {
	topic := req.GetTopic()
	n, err := s.eng.Partitions(topic)
	if err != nil {
		return nil, err
	}
	c, err := parseCursor(req.GetCursor(), n)
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	now := s.now()
	var page []*spoolv1.ScheduledMessage
	cancelled := map[string]bool{}
	var next *cursor // set once the page is full: where the next page starts
	scanned := 0
	for p := c.part; p < n && scanned < ScanRecordsPerCall; p++ {
		from := int64(0)
		if p == c.part {
			from = c.offset
		}
		pos, err := s.scan(topic, p, from, func(r *engine.Record) bool {
			scanned++
			if id, ok := schedule.CancelOf(r); ok {
				cancelled[id] = true
			} else if at, ok := schedule.Of(r); ok && at.After(now) && next == nil {
				page = append(page, &spoolv1.ScheduledMessage{
					Id: string(r.ID), Partition: p, Offset: r.Offset, Key: append([]byte(nil), r.Key...),
					DeliverAtMs: at.UnixMilli(), PublishTimeMs: r.Timestamp, PayloadBytes: uint32(len(r.Value)),
				})
				if len(page) == limit {
					next = &cursor{p, r.Offset + 1}
				}
			}
			return scanned < ScanRecordsPerCall
		})
		if err != nil {
			return nil, err
		}
		if next != nil {
			break // a cancel record is in its message's partition: no need to read on
		}
		if scanned >= ScanRecordsPerCall {
			next = &cursor{p, pos}
		}
	}
	resp := &spoolv1.ListScheduledResponse{}
	for _, m := range page {
		if !cancelled[m.GetId()] {
			resp.Messages = append(resp.Messages, m)
		}
	}
	if next != nil {
		resp.NextCursor = next.String()
	}
	return resp, nil
}
