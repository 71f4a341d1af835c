package deliver

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// Headers Spool adds to a dead-letter entry (the original headers are kept
// as they were). docs/semantics.md describes the entry.
const (
	HeaderDLQTopic        = "spool-dlq-topic"
	HeaderDLQPartition    = "spool-dlq-partition"
	HeaderDLQOffset       = "spool-dlq-offset"
	HeaderDLQGroup        = "spool-dlq-group"
	HeaderDLQReason       = "spool-dlq-reason"
	HeaderDLQLastError    = "spool-dlq-last-error"
	HeaderDLQAttempts     = "spool-dlq-attempts"
	HeaderDLQFirstDelivMs = "spool-dlq-first-delivery-ms"
	HeaderDLQTimeMs       = "spool-dlq-time-ms"
	HeaderDLQPublishMs    = "spool-dlq-publish-time-ms"
	HeaderSidecarVersion  = "spool-sidecar-version"
	HeaderDLQAppVersion   = "spool-dlq-app-version"
	HeaderDLQHistory      = "spool-dlq-history" // JSON list of AttemptRecord
	// HeaderRedriveGroup marks a message redriven from a dead-letter topic:
	// only this group delivers it; every other group skips it.
	HeaderRedriveGroup = "spool-redrive-group"
	// HeaderRedriveFrom names the dead-letter entry a redriven message came
	// from ("<dlq topic>/<partition>/<offset>").
	HeaderRedriveFrom = "spool-redrive-from"
)

// AttemptRecord is one failed attempt, kept until the message is finished
// and written into its dead-letter entry.
type AttemptRecord struct {
	Attempt    int    `json:"attempt"`
	TimeMs     int64  `json:"time_ms"`
	Error      string `json:"error"`
	AppVersion string `json:"app_version,omitempty"`
}

// maxHistory bounds the attempts remembered per message (the latest are
// kept); maxHistoryBytes bounds the spool-dlq-history header (the latest
// attempts that fit are written), and maxHistoryErrorBytes each attempt's
// error text in it. With MaxErrorBytes and MaxReasonBytes these bound what
// a dead-letter entry adds to the original message: MaxDeadLetterHeaderBytes.
const (
	maxHistory           = 32
	maxHistoryBytes      = 8 << 10
	maxHistoryErrorBytes = 1 << 10
	// maxAppVersionBytes cuts the app version a stream reports in Start.
	maxAppVersionBytes = 128
	// MaxDeadLetterHeaderBytes bounds the headers Spool adds to a
	// dead-letter entry (texts cut, history bounded, plus names and
	// numbers): the log must accept max_message_bytes plus this.
	MaxDeadLetterHeaderBytes = 16 << 10
)

// recordFailure remembers a failed attempt of the message at offset.
func (p *part) recordFailure(now time.Time, offset int64, attempt int, errText, appVersion string) {
	if p.history == nil {
		p.history = map[int64][]AttemptRecord{}
	}
	h := append(p.history[offset], AttemptRecord{Attempt: attempt, TimeMs: now.UnixMilli(), Error: cutText(errText, maxHistoryErrorBytes), AppVersion: appVersion})
	if len(h) > maxHistory {
		h = h[len(h)-maxHistory:]
	}
	p.history[offset] = h
}

// historyJSON encodes the latest attempts that fit in maxHistoryBytes.
func historyJSON(hist []AttemptRecord) []byte {
	for len(hist) > 0 {
		b, err := json.Marshal(hist)
		if err != nil {
			return nil
		}
		if len(b) <= maxHistoryBytes {
			return b
		}
		hist = hist[1:]
	}
	return nil
}

// DefaultDLQMaxInFlight bounds dead-letter publishes outstanding per group
// (GroupConfig.DLQMaxInFlight): beyond it, dead letters wait their turn, so
// a burst of thousands never floods the log's appender.
const DefaultDLQMaxInFlight = 64

// pendingDL is a dead letter taken from a tracker, not yet published.
type pendingDL struct {
	s  *sub
	p  *part
	dl tracker.DeadLetter[engine.Record]
}

// dlqJob is one dead-letter publish (an actDeadLetter) and its answer.
type dlqJob struct {
	s         *sub
	p         *part
	inc       uint64 // the partition's incarnation
	offset    int64
	id        string
	reason    string
	partition int32 // of the dead-letter topic
	rec       engine.Record
	bytes     int64 // charged to the memory budget until answered
	err       error
}

// deadLetters takes what the trackers handed to the dead-letter output and
// publishes up to DLQMaxInFlight at a time.
func (m *machine) deadLetters(now time.Time) {
	for _, s := range m.subs {
		for _, p := range s.parts {
			if p.tr.DeadLetters() == 0 {
				continue
			}
			m.dlBuf = p.tr.TakeDeadLetters(m.dlBuf[:0])
			for i := range m.dlBuf {
				m.dlWait = append(m.dlWait, pendingDL{s: s, p: p, dl: m.dlBuf[i]})
				p.dlPending++
			}
			clear(m.dlBuf)
		}
	}
	n := 0
	for n < len(m.dlWait) && m.dlqInFlight < m.cfg.DLQMaxInFlight {
		w := &m.dlWait[n]
		// A dead letter being published holds a copy of its record (the
		// encoded batch) beyond its window: it draws from the memory budget,
		// and one is always allowed so that dead letters make progress.
		if m.dlqInFlight > 0 && m.heldBytes()+dlCopyBytes(&w.dl.Value) > m.cfg.MemoryBytes {
			break
		}
		m.publishDeadLetter(now, w.s, w.p, &w.dl)
		n++
	}
	if n > 0 {
		k := copy(m.dlWait, m.dlWait[n:])
		clear(m.dlWait[k:])
		m.dlWait = m.dlWait[:k]
	}
}

func (m *machine) publishDeadLetter(now time.Time, s *sub, p *part, d *tracker.DeadLetter[engine.Record]) {
	orig := d.Value
	hdrs := make([]engine.Header, 0, len(orig.Headers)+13)
	for _, h := range orig.Headers {
		if !strings.HasPrefix(h.Key, "spool-") { // a redriven message's marks do not carry over
			hdrs = append(hdrs, h)
		}
	}
	add := func(k, v string) { hdrs = append(hdrs, engine.Header{Key: k, Value: []byte(v)}) }
	add(HeaderDLQTopic, s.cfg.Topic)
	add(HeaderDLQPartition, strconv.Itoa(int(p.num)))
	add(HeaderDLQOffset, strconv.FormatInt(d.Offset, 10))
	add(HeaderDLQGroup, m.cfg.Name)
	add(HeaderDLQReason, cutText(d.Reason, MaxReasonBytes))
	add(HeaderDLQLastError, cutText(d.LastError, MaxErrorBytes))
	add(HeaderDLQAttempts, strconv.Itoa(d.Attempts))
	if !d.FirstDelivered.IsZero() {
		add(HeaderDLQFirstDelivMs, strconv.FormatInt(d.FirstDelivered.UnixMilli(), 10))
	}
	add(HeaderDLQTimeMs, strconv.FormatInt(now.UnixMilli(), 10))
	add(HeaderDLQPublishMs, strconv.FormatInt(orig.Timestamp, 10))
	if m.cfg.SidecarVersion != "" {
		add(HeaderSidecarVersion, m.cfg.SidecarVersion)
	}
	if hist := p.history[d.Offset]; len(hist) > 0 {
		if b := historyJSON(hist); b != nil {
			add(HeaderDLQHistory, string(b))
		}
		if v := hist[len(hist)-1].AppVersion; v != "" {
			add(HeaderDLQAppVersion, v)
		}
	}
	var dp int32
	if len(orig.Key) > 0 && s.dlqParts > 0 {
		dp = engine.PartitionForKey(orig.Key, s.dlqParts)
	}
	m.dlqInFlight++
	j := &dlqJob{s: s, p: p, inc: p.inc, offset: d.Offset, id: string(orig.ID), reason: reasonLabel(d.Reason),
		partition: dp, rec: engine.Record{ID: orig.ID, Key: orig.Key, Value: orig.Value, Headers: hdrs}}
	j.bytes = dlCopyBytes(&j.rec)
	m.dlBytes += j.bytes
	m.emit(action{kind: actDeadLetter, dl: j})
}

// dlCopyBytes is what publishing a dead letter holds beyond its window: the
// record encoded with its headers.
func dlCopyBytes(r *engine.Record) int64 { return storedBytes(r) + 2<<10 }

// deadLettered applies the answer to an actDeadLetter.
func (m *machine) deadLettered(now time.Time, r *dlqJob) {
	m.dlqInFlight--
	m.dlBytes -= r.bytes
	if r.inc != r.p.inc {
		return // its partition stopped since: the new tracker knows nothing of it
	}
	r.p.dlPending--
	if r.err != nil {
		m.note(slog.LevelWarn, "dead-letter publish failed; will retry after backoff", "topic", r.s.cfg.Topic, "partition", r.p.num, "offset", r.offset, "dlq_topic", r.s.cfg.DLQTopic, "err", r.err)
		_ = r.p.tr.DeadLetterFailed(now, r.offset)
		return
	}
	if err := r.p.tr.DeadLettered(r.offset); err == nil {
		delete(r.p.history, r.offset)
		delete(m.expired, refKey{r.s.cfg.Topic, r.p.num, r.offset})
		if m.cfg.Ledger != nil && r.id != "" {
			r.s.ledger.dead = append(r.s.ledger.dead, ledger.Finish{ID: r.id, Token: r.p.takeWire(r.offset)})
		}
		m.count(metricKey{id: metDeadLettered, l1: r.s.cfg.Topic, l2: r.reason}, 1)
		m.note(slog.LevelInfo, "message dead-lettered", "topic", r.s.cfg.Topic, "partition", r.p.num, "offset", r.offset, "reason", r.reason, "dlq_topic", r.s.cfg.DLQTopic)
	}
}

// Limits on text the application supplies in a settlement. Longer text is
// cut (on a UTF-8 boundary) when the settlement arrives, so that what Spool
// keeps per message, and writes into a dead-letter entry, stays bounded.
const (
	// MaxErrorBytes bounds a nack's error text (Nack.error).
	MaxErrorBytes = 4 << 10
	// MaxReasonBytes bounds a dead-letter reason (Nack.reason).
	MaxReasonBytes = 1 << 10
)

// ReasonApplication is the dead_lettered_total reason label of a message the
// application dead-lettered (its own reason text goes into the entry's
// spool-dlq-reason header, never into a label).
const ReasonApplication = "application"

// ReasonDeliveryTooLarge is the SettleError reason sent to a stream that
// cannot receive a delivery (larger than its max_receive_bytes).
const ReasonDeliveryTooLarge = "DELIVERY_TOO_LARGE"

// cutText cuts s to at most n bytes on a UTF-8 boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
