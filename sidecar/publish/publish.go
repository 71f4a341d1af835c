package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/metrics"
	"github.com/spoolmq/spool/sidecar/schedule"
)

// OtherTopic is the topic label of rejections for a topic the node does not
// have (unknown, invalid or empty names). Metric labels never come from
// requests: 10,000 unknown topic names are one series, not 10,000. The name
// cannot be a topic's: names starting with "__" are reserved.
const OtherTopic = "__other"

// Engine is what publishing needs from the log. embedded.Node implements it.
type Engine interface {
	Partitions(topic string) (int32, error)
	ProduceWith(topic string, p int32, recs []engine.Record, opts engine.ProduceOptions, done func(base int64, err error))
}

// chunkBytes caps one append to the log; a request is split into chunks per
// partition (each a single log batch, appended in order).
const chunkBytes = 1 << 20

// DefaultMaxStreamInFlight bounds requests outstanding on one PublishStream
// (limit publish_stream_max_in_flight): the receiver stops reading when it is
// reached, which pushes back on the producer through gRPC flow control.
const DefaultMaxStreamInFlight = 256

// Config configures a Server.
type Config struct {
	Engine            Engine
	Limits            Limits
	MaxStreamInFlight int
	Metrics           *metrics.Metrics
	Logger            *slog.Logger
	// Tracer records a span per published message (sidecar/tracing), a
	// child of the traceparent in its headers; nil: tracing is off.
	Tracer trace.Tracer
	// MemoryBytes bounds the bytes of publish requests in flight, for the
	// whole sidecar (publish.memory_bytes; memory.go). Default
	// DefaultMemoryBytes.
	MemoryBytes int64
	// Admit, if set, decides a valid request of n messages and size bytes
	// to topic before anything is stored: the caller's scopes and publish
	// rate (sidecar/apps). ctx is the call's, carrying who the caller is.
	// Its error is answered like a validation error.
	Admit func(ctx context.Context, topic string, n, size int) error
	// Retention, if set, says whether topic may take scheduled messages
	// (deliver_at_ms, deliver_after_ms) and up to when: its retention by
	// age (0: kept forever), or an error (a broker backend offers no
	// scheduled delivery). nil: scheduled publishes are refused.
	Retention func(topic string) (time.Duration, error)
	// Cancel, if set, cancels a scheduled message (sidecar/scheduled);
	// nil: CancelScheduled is refused (a broker backend).
	Cancel func(ctx context.Context, req *spoolv1.CancelScheduledRequest) (*spoolv1.CancelScheduledResponse, error)
}

// Server implements spoolv1.PublisherServiceServer.
type Server struct {
	spoolv1.UnimplementedPublisherServiceServer
	cfg    Config
	mem    *memory
	spread atomic.Uint32 // rotates keyless requests over partitions
}

// New returns a publish server.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil || cfg.Metrics == nil {
		return nil, errors.New("publish: Engine and Metrics are required")
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	if cfg.MaxStreamInFlight <= 0 {
		cfg.MaxStreamInFlight = DefaultMaxStreamInFlight
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := cfg.Metrics
	return &Server{cfg: cfg, mem: newMemory(cfg.MemoryBytes, m)}, nil
}

// Publish appends one request's messages and answers once all are durable
// (as the request's acks asks).
func (s *Server) Publish(ctx context.Context, req *spoolv1.PublishRequest) (*spoolv1.PublishResponse, error) {
	type answer struct {
		results []*spoolv1.PublishResult
		err     error
	}
	ch := make(chan answer, 1)
	held, err := s.mem.acquire(ctx, requestBytes(req.GetMessages()))
	if err != nil {
		return nil, err
	}
	s.Submit(ctx, req.GetTopic(), req.GetAcks(), req.GetMessages(), func(r []*spoolv1.PublishResult, err error) {
		s.mem.release(held)
		ch <- answer{r, err}
	})
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, apierr.ToStatus(a.err)
		}
		return &spoolv1.PublishResponse{Results: a.results}, nil
	case <-ctx.Done():
		// The append goes on; its outcome is unknown to this caller.
		return nil, apierr.ToStatus(fmt.Errorf("%w: %w", engine.ErrOutcomeUnknown, ctx.Err()))
	}
}

// CancelScheduled cancels a scheduled message before its time
// (docs/scheduling.md). It is admitted as a publish of one message to the
// topic (the app's scopes and publish rate).
func (s *Server) CancelScheduled(ctx context.Context, req *spoolv1.CancelScheduledRequest) (*spoolv1.CancelScheduledResponse, error) {
	err := checkTopic(req.GetTopic())
	if err == nil && s.cfg.Admit != nil {
		err = s.cfg.Admit(ctx, req.GetTopic(), 1, 0)
	}
	if err == nil && s.cfg.Cancel == nil {
		err = apierr.New(apierr.BackendUnsupported, "scheduled delivery is not offered here: there is nothing to cancel")
	}
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	resp, err := s.cfg.Cancel(ctx, req)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	return resp, nil
}

// batch is one request in flight.
type batch struct {
	s     *Server
	topic string
	known bool // the engine has the topic: it may be a metric label
	// retention of the topic for scheduled messages, once asked (Config.Retention)
	retention *time.Duration
	start     time.Time
	results   []*spoolv1.PublishResult
	bytes     int
	pending   atomic.Int32
	mu        sync.Mutex // guards err
	err       error
	done      func([]*spoolv1.PublishResult, error)
	spans     []trace.Span // one per message, with a Tracer only
}

type chunk struct {
	part    int32
	recs    []engine.Record
	indexes []int32 // request index of each record
	size    int
}

// Submit validates msgs, appends them, and calls done once with a result per
// message (in request order) or an error. acks says when: ACKS_UNSPECIFIED
// and ACKS_ALL once committed, ACKS_LEADER once on the partition leader's
// disk (engine.AcksLeader). done may run on the engine's appender goroutine
// and must not block. A validation error, or a refusal of Config.Admit,
// writes nothing. ctx is the caller's (Admit reads who it is); once it
// ends, messages not yet sent towards their partition's leader are not
// sent (engine.ProduceOptions.Context): an app that retries after its
// deadline does not find the first attempt stored after its retry.
func (s *Server) Submit(ctx context.Context, topic string, acks spoolv1.Acks, msgs []*spoolv1.PublishMessage, done func([]*spoolv1.PublishResult, error)) {
	b := &batch{s: s, topic: topic, start: time.Now(), done: done}
	opts, err := produceOptions(acks)
	opts.Context = ctx
	var chunks []*chunk
	if err == nil {
		chunks, err = s.plan(b, msgs)
	}
	if err == nil && s.cfg.Admit != nil {
		err = s.cfg.Admit(ctx, topic, len(msgs), b.bytes)
	}
	if err != nil {
		b.reject(err, len(msgs))
		done(nil, err)
		return
	}
	if s.cfg.Tracer != nil {
		b.startSpans(msgs)
	}
	b.pending.Store(int32(len(chunks)))
	for _, c := range chunks {
		s.cfg.Engine.ProduceWith(topic, c.part, c.recs, opts, func(base int64, err error) { b.complete(c, base, err) })
		// The engine has taken the records (the log has encoded them):
		// the decoded payloads need not live until the answer.
		c.recs = nil
	}
}

// produceOptions maps a request's acks to the engine's.
func produceOptions(acks spoolv1.Acks) (engine.ProduceOptions, error) {
	switch acks {
	case spoolv1.Acks_ACKS_UNSPECIFIED, spoolv1.Acks_ACKS_ALL:
		return engine.ProduceOptions{Acks: engine.AcksAll}, nil
	case spoolv1.Acks_ACKS_LEADER:
		return engine.ProduceOptions{Acks: engine.AcksLeader}, nil
	}
	return engine.ProduceOptions{}, apierr.New(apierr.InvalidRequest, "acks %d is not known to this sidecar: use ACKS_ALL (the default) or ACKS_LEADER, or upgrade the sidecar", int32(acks))
}

// reject counts n refused messages. Both labels come from fixed sets: the
// topic only once the engine knows it, the reason from apierr's catalogue
// (the same reason as the status the producer gets).
func (b *batch) reject(err error, n int) {
	topic := OtherTopic
	if b.known {
		topic = b.topic
	}
	b.s.cfg.Metrics.PublishRejected.WithLabelValues(topic, string(apierr.Classify(err))).Add(float64(n))
}

// plan checks every message and groups them into per-partition chunks.
func (s *Server) plan(b *batch, msgs []*spoolv1.PublishMessage) ([]*chunk, error) {
	l := s.cfg.Limits
	if err := checkTopic(b.topic); err != nil {
		return nil, err
	}
	n, err := s.cfg.Engine.Partitions(b.topic)
	if err != nil {
		return nil, err
	}
	b.known = true
	if len(msgs) == 0 {
		return nil, apierr.New(apierr.NoMessages, "no messages: send at least one message")
	}
	if len(msgs) > l.MaxBatchMessages {
		return nil, limitErr(apierr.BatchTooLarge, -1, "max_batch_messages", "%d messages in one request, limit max_batch_messages is %d: split the batch", len(msgs), l.MaxBatchMessages)
	}
	keyless := int32(s.spread.Add(1) % uint32(n))
	b.results = make([]*spoolv1.PublishResult, len(msgs))
	open := make(map[int32]*chunk, 1)
	var chunks []*chunk
	for i, m := range msgs {
		size, err := l.check(i, m)
		if err != nil {
			return nil, err
		}
		var p int32
		switch {
		case m.Partition != nil && m.GetPartition() >= 0:
			if p = m.GetPartition(); p >= n {
				return nil, limitErr(apierr.BadPartition, i, "", "partition %d does not exist: topic %q has partitions 0..%d (leave partition unset to let the key choose)", p, b.topic, n-1)
			}
		case len(m.GetKey()) > 0:
			p = engine.PartitionForKey(m.GetKey(), n)
		default:
			p = keyless
		}
		id := m.GetId()
		if id == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("publish: generate message id: %w", err)
			}
			id = u.String()
		}
		b.results[i] = &spoolv1.PublishResult{Id: id, Partition: p}
		b.bytes += size
		c := open[p]
		if c == nil || c.size+size > chunkBytes {
			c = &chunk{part: p}
			open[p] = c
			chunks = append(chunks, c)
		}
		hdrs := toHeaders(m.GetHeaders())
		if m.GetDeliverAtMs() != 0 || m.GetDeliverAfterMs() != 0 || m.GetDeliverInKeyOrder() {
			h, err := s.scheduleHeaders(b, i, m)
			if err != nil {
				return nil, err
			}
			hdrs = append(hdrs, h...)
		}
		c.recs = append(c.recs, engine.Record{ID: []byte(id), Key: m.GetKey(), Value: m.GetPayload(), Headers: hdrs})
		c.indexes = append(c.indexes, int32(i))
		c.size += size
	}
	return chunks, nil
}

// scheduleHeaders checks message i's delivery time (sidecar/schedule) and
// returns the headers that carry it in the log.
func (s *Server) scheduleHeaders(b *batch, i int, m *spoolv1.PublishMessage) ([]engine.Header, error) {
	if s.cfg.Retention == nil {
		return nil, limitErr(apierr.BackendUnsupported, i, "", "scheduled delivery is not offered here: publish without deliver_at_ms and deliver_after_ms")
	}
	if b.retention == nil {
		r, err := s.cfg.Retention(b.topic)
		b.retention = &r
		if err != nil {
			return nil, err
		}
	}
	at, err := schedule.DeliverAt(b.start, m.GetDeliverAtMs(), m.GetDeliverAfterMs(), *b.retention)
	if err == nil && at.IsZero() {
		err = apierr.New(apierr.InvalidSchedule, "deliver_in_key_order without a delivery time: set deliver_at_ms or deliver_after_ms too, or leave it unset")
	}
	if err != nil {
		var e *apierr.Error
		if errors.As(err, &e) {
			e.Msg = fmt.Sprintf("message %d: %s", i, e.Msg)
			e.With("index", strconv.Itoa(i))
		}
		return nil, err
	}
	hs := []engine.Header{{Key: schedule.Header, Value: schedule.Format(at)}}
	if m.GetDeliverInKeyOrder() {
		hs = append(hs, engine.Header{Key: schedule.KeyOrderHeader, Value: []byte("1")})
	}
	return hs, nil
}

func toHeaders(h map[string]string) []engine.Header {
	if len(h) == 0 {
		return nil
	}
	out := make([]engine.Header, 0, len(h))
	for k, v := range h {
		out = append(out, engine.Header{Key: k, Value: []byte(v)})
	}
	return out
}

func (b *batch) complete(c *chunk, base int64, err error) {
	if err != nil {
		b.mu.Lock()
		if b.err == nil {
			b.err = fmt.Errorf("topic %q partition %d: %w", b.topic, c.part, err)
		}
		b.mu.Unlock()
	} else {
		for j, i := range c.indexes {
			b.results[i].Offset = base + int64(j)
		}
	}
	if b.pending.Add(-1) != 0 {
		return
	}
	m := b.s.cfg.Metrics
	b.mu.Lock()
	err = b.err
	b.mu.Unlock()
	if b.spans != nil {
		b.endSpans(err)
	}
	if err != nil {
		b.reject(err, len(b.results))
		b.done(nil, err)
		return
	}
	m.PublishMessages.WithLabelValues(b.topic).Add(float64(len(b.results)))
	m.PublishBytes.WithLabelValues(b.topic).Add(float64(b.bytes))
	m.PublishLatency.WithLabelValues(b.topic).Observe(time.Since(b.start).Seconds())
	b.done(b.results, nil)
}
