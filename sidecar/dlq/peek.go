package dlq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/deliver"
)

// Engine is what reading, redriving and purging dead letters need from
// the log: offsets, reads, appends, the time index (OffsetForTime) and the
// group position store, where purge marks live.
type Engine interface {
	Partitions(topic string) (int32, error)
	Offsets(topic string, p int32) (start, end int64, err error)
	Fetch(topic string, p int32, offset int64, maxBytes int, dst []engine.Record) ([]engine.Record, error)
	Produce(topic string, p int32, recs []engine.Record, done func(base int64, err error))
	OffsetForTime(topic string, p int32, ts time.Time) (int64, error)
	LoadPositions(group, topic string) (map[int32]engine.Position, error)
	CommitPositions(group, topic string, pos map[int32]engine.Position) error
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

// Limits of one call that reads a dead-letter topic.
const (
	// ScanRecordsPerCall bounds the records of the dead-letter topic one
	// Peek or Summarize reads (and one Redrive with a Limit): a filter that
	// matches little returns a short page, even an empty one, with a
	// cursor to go on, instead of reading the whole topic in one call.
	ScanRecordsPerCall = 50_000
	// IndexSlack widens the time range looked up in the log's time index.
	// The index knows when a dead letter was appended to its topic; the
	// filter is on the time the delivery loop recorded just before (on
	// another node's clock, in a cluster). Entries whose two times differ by
	// more than this may be missed by a time filter.
	IndexSlack = time.Minute
)

// Query selects a subscription's dead letters and where to read them from.
type Query struct {
	Group, DLQTopic string
	// Topic, when set, keeps only entries whose original topic it is.
	Topic  string
	Filter *spoolv1.DeadLetterFilter
	// Cursor is the next_cursor of the previous page; "" starts.
	Cursor string
	// ScanRecords bounds the records read in this call; 0 means
	// ScanRecordsPerCall.
	ScanRecords int
}

// Page is what one call read.
type Page struct {
	Entries    []*spoolv1.DeadLetter
	NextCursor string // "" once every partition is read to its stop
	Progress   *spoolv1.ScanProgress
}

// Peek returns up to limit dead letters of the query, oldest first
// (partition by partition), and a cursor to go on. One call reads at most
// q.ScanRecords records of the dead-letter topic, from where the cursor,
// the filter's time (through the log's time index) and the purge mark
// allow, so its cost is bounded by the page, not by the topic's size.
func Peek(eng Engine, q Query, limit int) (Page, error) {
	r, err := newReader(eng, q, FetchBytes, scanBudget(q.ScanRecords))
	if err != nil {
		return Page{}, err
	}
	page, err := r.next(limit, math.MaxInt)
	out := Page{Entries: make([]*spoolv1.DeadLetter, len(page)), NextCursor: r.cursor(), Progress: r.progress()}
	for i, e := range page {
		out.Entries[i] = e.dl
	}
	return out, err
}

func scanBudget(n int) int {
	if n <= 0 {
		return ScanRecordsPerCall
	}
	return n
}

// purgeTopic is where a subscription's purge mark is kept in the group
// position store: under the group, beside its offsets, as a name no topic
// can have ('~' is not allowed in topic names).
func purgeTopic(dlqTopic string) string { return dlqTopic + "~purged" }

// reader reads the matching dead letters of one group in pages, partition
// by partition, oldest first, between per-partition bounds: from the
// highest of the log start, the purge mark, the filter's start time (time
// index) and the cursor, to the stop the first page saw (the end then, or
// the filter's end time). Entries appended after the first page (such as
// messages of this very redrive that fail again and are dead-lettered
// anew) are not read, so a redrive always ends and never moves a message
// twice.
type reader struct {
	eng    Engine
	group  string
	dlq    string
	filter *spoolv1.DeadLetterFilter
	topic  string // only entries whose original topic this is; "" any

	fetchBytes int // one read from the log asks for this much
	// Per partition: where the range starts (for progress), the next
	// offset to read, and the offset to stop before.
	from, pos, stop []int64
	part            int32 // partition being read
	recs            []engine.Record
	scanned, budget int // records read in this call, and the bound
}

func newReader(eng Engine, q Query, fetchBytes, budget int) (*reader, error) {
	n, err := eng.Partitions(q.DLQTopic)
	if err != nil {
		return nil, err
	}
	var c cursor
	if q.Cursor != "" {
		if c, err = parseCursor(q.Cursor, n); err != nil {
			return nil, err
		}
	}
	marks, err := eng.LoadPositions(q.Group, purgeTopic(q.DLQTopic))
	if err != nil {
		return nil, fmt.Errorf("reading the purge mark of %s: %w", q.DLQTopic, err)
	}
	r := &reader{eng: eng, group: q.Group, dlq: q.DLQTopic, filter: q.Filter, topic: q.Topic, fetchBytes: fetchBytes, budget: budget,
		from: make([]int64, n), pos: make([]int64, n), stop: make([]int64, n)}
	f := q.Filter
	for p := range n {
		start, end, err := eng.Offsets(q.DLQTopic, p)
		if err != nil {
			return nil, err
		}
		lo, hi := max(start, marks[p].Next), end
		// The time index only narrows the range: the filter is checked on
		// every entry read. Where it cannot answer (a node without a
		// replica of the partition, in a cluster), the range stays whole.
		if f.GetFromTimeMs() > 0 {
			if off, err := eng.OffsetForTime(q.DLQTopic, p, time.UnixMilli(f.GetFromTimeMs()).Add(-IndexSlack)); err == nil {
				lo = max(lo, off)
			}
		}
		if f.GetToTimeMs() > 0 {
			if off, err := eng.OffsetForTime(q.DLQTopic, p, time.UnixMilli(f.GetToTimeMs()).Add(IndexSlack)); err == nil {
				hi = min(hi, off)
			}
		}
		if q.Cursor != "" {
			hi = min(hi, c.stop[p]) // the end the first page saw
		}
		lo = min(lo, hi)
		r.from[p], r.pos[p], r.stop[p] = lo, lo, hi
		if q.Cursor != "" {
			r.pos[p] = min(max(c.next[p], lo), hi)
		}
	}
	return r, nil
}

// cursor says where the next call goes on; "" when every partition is read.
func (r *reader) cursor() string {
	for p := range r.pos {
		if r.pos[p] < r.stop[p] {
			return cursor{next: r.pos, stop: r.stop}.String()
		}
	}
	return ""
}

// progress counts the records of the range read so far, over every call.
func (r *reader) progress() *spoolv1.ScanProgress {
	pr := &spoolv1.ScanProgress{}
	for p := range r.pos {
		pr.Read += r.pos[p] - r.from[p]
		pr.Total += r.stop[p] - r.from[p]
	}
	return pr
}

// current returns the record at the reader's position, reading from the
// log when the last read is used up; nil when the reader is done (or its
// budget spent).
func (r *reader) current() (*engine.Record, error) {
	for int(r.part) < len(r.stop) {
		if r.scanned >= r.budget {
			return nil, nil
		}
		p := r.part
		if len(r.recs) == 0 && r.pos[p] < r.stop[p] {
			recs, err := r.eng.Fetch(r.dlq, p, r.pos[p], r.fetchBytes, r.recs[:0])
			var gone *engine.OffsetOutOfRangeError
			if errors.As(err, &gone) && r.pos[p] < gone.Start {
				// Retention removed them meanwhile: go on from the new start.
				r.pos[p] = min(gone.Start, r.stop[p])
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("reading dead letters of %s partition %d at offset %d: %w", r.dlq, p, r.pos[p], err)
			}
			r.recs = recs
		}
		if len(r.recs) > 0 && r.recs[0].Offset < r.stop[p] {
			return &r.recs[0], nil
		}
		r.pos[p] = r.stop[p]
		r.part, r.recs = p+1, nil
	}
	return nil, nil
}

// advance moves past the current record.
func (r *reader) advance() {
	r.pos[r.part] = r.recs[0].Offset + 1
	r.recs = r.recs[1:]
	r.scanned++
}

// next returns the next page of matching dead letters: at most maxEntries
// and, beyond the first, at most maxBytes in all (entry.size). Records
// that do not match are skipped as they are read. An empty page means the
// reader is done or its budget is spent (cursor tells which).
func (r *reader) next(maxEntries, maxBytes int) ([]entry, error) {
	var page []entry
	size := 0
	for len(page) < maxEntries {
		rec, err := r.current()
		if rec == nil || err != nil {
			return page, err
		}
		dl := toDeadLetter(rec, r.part)
		if !r.matches(dl) {
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

// each calls fn with every matching dead letter (which it must not keep:
// key and payload point into the read buffer) until the budget is spent
// or the reader is done.
func (r *reader) each(fn func(*spoolv1.DeadLetter)) error {
	for {
		rec, err := r.current()
		if rec == nil || err != nil {
			return err
		}
		if dl := toDeadLetter(rec, r.part); r.matches(dl) {
			fn(dl)
		}
		r.advance()
	}
}

func (r *reader) matches(dl *spoolv1.DeadLetter) bool {
	return dl.GetMessage().GetGroup() == r.group && matches(dl, r.filter) && (r.topic == "" || dl.GetMessage().GetTopic() == r.topic)
}

func toDeadLetter(r *engine.Record, dlqPartition int32) *spoolv1.DeadLetter {
	// The entry's own headers (spool-dlq-*) are read as text; anyone who can
	// write to the dead-letter topic could have written them, so they too
	// are made valid UTF-8 before they become proto strings.
	h := map[string]string{}
	for _, x := range r.Headers {
		if strings.HasPrefix(x.Key, "spool-") {
			h[x.Key] = deliver.WireText(x.Value)
		}
	}
	app := deliver.WireHeaders(r.Headers, func(name string) bool { return !strings.HasPrefix(name, "spool-") })
	part, _ := strconv.Atoi(h[deliver.HeaderDLQPartition])
	attempts, _ := strconv.Atoi(h[deliver.HeaderDLQAttempts])
	return &spoolv1.DeadLetter{
		Message: &spoolv1.Delivery{
			MessageId:           deliver.WireID(r.ID),
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
	case f.GetMinAttempts() > 0 && int64(dl.GetMessage().GetAttempt()) < int64(f.GetMinAttempts()):
		return false
	case f.GetMaxAttempts() > 0 && int64(dl.GetMessage().GetAttempt()) > int64(f.GetMaxAttempts()):
		return false
	}
	return true
}

// Decode turns a record of a dead-letter topic into the entry it holds
// (for readers that follow the topic themselves, like the admin's Tail).
func Decode(r *engine.Record, dlqPartition int32) *spoolv1.DeadLetter {
	return toDeadLetter(r, dlqPartition)
}
