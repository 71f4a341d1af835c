package deliver

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/ledger"
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

// maxHistory bounds the attempts remembered per message (the latest are kept).
const maxHistory = 32

// recordFailure remembers a failed attempt of the message at offset.
func (p *part) recordFailure(now time.Time, offset int64, attempt int, errText, appVersion string) {
	if p.history == nil {
		p.history = map[int64][]AttemptRecord{}
	}
	h := append(p.history[offset], AttemptRecord{Attempt: attempt, TimeMs: now.UnixMilli(), Error: truncate(errText, 1024), AppVersion: appVersion})
	if len(h) > maxHistory {
		h = h[len(h)-maxHistory:]
	}
	p.history[offset] = h
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// maxDLQInFlight bounds dead-letter publishes outstanding per group (limit
// dlq_max_in_flight): beyond it, dead letters wait in their trackers.
const maxDLQInFlight = 1024

// dlqResult reports the result of one dead-letter publish.
type dlqResult struct {
	s      *sub
	p      *part
	offset int64
	id     string
	reason string
	err    error
}

// deadLetters publishes what the trackers handed to the dead-letter output.
// The publish is asynchronous; its result comes back on g.dlqDone, whose
// capacity is the in-flight bound, so the engine's callback never blocks.
func (g *Group) deadLetters(now time.Time) {
	for _, s := range g.subs {
		for _, p := range s.parts {
			if g.dlqInFlight >= maxDLQInFlight {
				return
			}
			g.dlBuf = p.tr.TakeDeadLetters(g.dlBuf[:0])
			for i := range g.dlBuf {
				g.publishDeadLetter(now, s, p, i)
			}
		}
	}
}

func (g *Group) publishDeadLetter(now time.Time, s *sub, p *part, i int) {
	d := &g.dlBuf[i]
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
	add(HeaderDLQGroup, g.cfg.Name)
	add(HeaderDLQReason, d.Reason)
	add(HeaderDLQLastError, d.LastError)
	add(HeaderDLQAttempts, strconv.Itoa(d.Attempts))
	if !d.FirstDelivered.IsZero() {
		add(HeaderDLQFirstDelivMs, strconv.FormatInt(d.FirstDelivered.UnixMilli(), 10))
	}
	add(HeaderDLQTimeMs, strconv.FormatInt(now.UnixMilli(), 10))
	add(HeaderDLQPublishMs, strconv.FormatInt(orig.Timestamp, 10))
	if g.cfg.SidecarVersion != "" {
		add(HeaderSidecarVersion, g.cfg.SidecarVersion)
	}
	if hist := p.history[d.Offset]; len(hist) > 0 {
		if b, err := json.Marshal(hist); err == nil {
			add(HeaderDLQHistory, string(b))
		}
		if v := hist[len(hist)-1].AppVersion; v != "" {
			add(HeaderDLQAppVersion, v)
		}
	}
	rec := engine.Record{ID: orig.ID, Key: orig.Key, Value: orig.Value, Headers: hdrs}
	dlqParts, err := g.eng.Partitions(s.cfg.DLQTopic)
	if err != nil {
		g.dlqInFlight++
		g.dlqDone <- dlqResult{s: s, p: p, offset: d.Offset, reason: d.Reason, err: err}
		return
	}
	var dp int32
	if len(orig.Key) > 0 {
		dp = engine.PartitionForKey(orig.Key, dlqParts)
	}
	g.dlqInFlight++
	res := dlqResult{s: s, p: p, offset: d.Offset, id: string(orig.ID), reason: d.Reason}
	g.eng.Produce(s.cfg.DLQTopic, dp, []engine.Record{rec}, func(_ int64, err error) {
		res.err = err
		g.dlqDone <- res
	})
}

// applyDLQ applies one dead-letter publish result.
func (g *Group) applyDLQ(now time.Time, r dlqResult) {
	g.dlqInFlight--
	if r.err != nil {
		g.log.Warn("dead-letter publish failed; will retry after backoff", "topic", r.s.cfg.Topic, "partition", r.p.num, "offset", r.offset, "dlq_topic", r.s.cfg.DLQTopic, "err", r.err)
		_ = r.p.tr.DeadLetterFailed(now, r.offset)
		return
	}
	if err := r.p.tr.DeadLettered(r.offset); err == nil {
		delete(r.p.history, r.offset)
		delete(g.expired, refKey{r.s.cfg.Topic, r.p.num, r.offset})
		if g.cfg.Ledger != nil && r.id != "" {
			r.s.ledger.dead = append(r.s.ledger.dead, ledger.Finish{ID: r.id, Token: r.p.takeWire(r.offset)})
		}
		g.m.DeadLettered.WithLabelValues(g.cfg.Name, r.s.cfg.Topic, r.reason).Inc()
		g.log.Info("message dead-lettered", "topic", r.s.cfg.Topic, "partition", r.p.num, "offset", r.offset, "reason", r.reason, "dlq_topic", r.s.cfg.DLQTopic)
	}
}

func (g *Group) dlPending() bool { return g.dlqInFlight > 0 }

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
