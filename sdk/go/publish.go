package spool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// PublishResult says where a published message was stored; it is returned
// once the message is durable.
type PublishResult struct {
	ID        string
	Partition int32
	Offset    int64
}

// OutMessage is one message of a PublishBatch.
type OutMessage struct {
	// ID is optional; when empty the sidecar generates one. Set it (for
	// example to a business id) to make a retried publish deduplicable.
	ID      string
	Key     []byte
	Payload []byte
	Headers map[string]string
	// DeliverAt and DeliverAfter schedule the message (WithDeliverAt,
	// WithDeliverAfter); set at most one.
	DeliverAt    time.Time
	DeliverAfter time.Duration
}

// PublishOption sets optional fields of a published message, or how it is
// published (WithAcks).
type PublishOption func(*outgoing)

// outgoing is one message being built, and its publish settings.
type outgoing struct {
	m    *spoolv1.PublishMessage
	acks Acks
}

// Acks chooses when a publish returns (docs/semantics.md, "Replication").
type Acks int

const (
	// AcksAll (the default): once the message is committed — on disk on
	// a quorum of its partition's replicas. An acknowledged message is not
	// lost while a quorum survives.
	AcksAll Acks = iota
	// AcksLeader: once the message is on disk on its partition's leader,
	// before the other replicas have it. Faster, and lossy: an
	// acknowledged message is lost if that leader fails or is cut off
	// before a follower has it and a new leader is elected without it.
	// Consumers still see it only once committed. On a single sidecar it
	// is the same as AcksAll.
	AcksLeader
)

func (a Acks) proto() spoolv1.Acks {
	if a == AcksLeader {
		return spoolv1.Acks_ACKS_LEADER
	}
	return spoolv1.Acks_ACKS_UNSPECIFIED // ALL; also what a sidecar that predates acks does
}

// WithAcks chooses when the publish returns (default AcksAll). With a
// Publisher, messages of different acks go in different requests.
func WithAcks(a Acks) PublishOption {
	return func(o *outgoing) { o.acks = a }
}

// WithID sets the message id (at most 128 bytes). Consumers dedupe on it, so
// retrying a publish with the same id is safe.
func WithID(id string) PublishOption {
	return func(o *outgoing) { o.m.Id = id }
}

// WithHeaders adds application headers (names starting with "spool-" are
// reserved). The map is copied.
func WithHeaders(h map[string]string) PublishOption {
	return func(o *outgoing) {
		if o.m.Headers == nil {
			o.m.Headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			o.m.Headers[k] = v
		}
	}
}

// WithHeader adds one application header.
func WithHeader(key, value string) PublishOption {
	return func(o *outgoing) {
		if o.m.Headers == nil {
			o.m.Headers = make(map[string]string, 1)
		}
		o.m.Headers[key] = value
	}
}

// WithDeliverAt schedules the message (docs/scheduling.md): it is stored
// now, like any other, and delivered no sooner than t. A t in the past is
// delivered at once; one more than a year ahead, or past the topic's
// retention, is refused (INVALID_SCHEDULE, SCHEDULE_PAST_RETENTION). A
// scheduled message is outside its key's order unless
// WithDeliverInKeyOrder: it neither waits for the key's earlier messages
// nor holds back its later ones. The zero time schedules nothing.
func WithDeliverAt(t time.Time) PublishOption {
	return func(o *outgoing) { o.m.DeliverAtMs = unixMs(t) }
}

// WithDeliverAfter schedules the message d from when the sidecar receives
// the publish (1 s to 365 days; docs/scheduling.md), as WithDeliverAt does.
func WithDeliverAfter(d time.Duration) PublishOption {
	return func(o *outgoing) { o.m.DeliverAfterMs = d.Milliseconds() }
}

// WithDeliverInKeyOrder keeps a scheduled message (WithDeliverAt,
// WithDeliverAfter) in its key's order: it waits for the key's earlier
// messages, and the key's later messages wait for it until it is delivered
// and finished (docs/scheduling.md). Without a delivery time the publish is
// refused (INVALID_SCHEDULE).
func WithDeliverInKeyOrder() PublishOption {
	return func(o *outgoing) { o.m.DeliverInKeyOrder = true }
}

// unixMs is t in Unix milliseconds; 0 for the zero time.
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func buildMessage(key, payload []byte, opts []PublishOption) outgoing {
	o := outgoing{m: &spoolv1.PublishMessage{Key: key, Payload: payload}}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Publish appends one message to topic and returns once it is durable
// (WithAcks: on a quorum, the default, or on its partition's leader).
// The message carries the trace context of ctx (headers traceparent and
// tracestate) unless its headers have a traceparent already.
// On an error the message may or may not be stored: retry with the same
// WithID to stay idempotent.
func (c *Client) Publish(ctx context.Context, topic string, key, payload []byte, opts ...PublishOption) (PublishResult, error) {
	o := buildMessage(key, payload, opts)
	o.m.Headers = injectTrace(ctx, o.m.Headers)
	res, err := c.publish(ctx, topic, o.acks, []*spoolv1.PublishMessage{o.m})
	if err != nil {
		return PublishResult{}, err
	}
	return res[0], nil
}

// PublishBatch appends messages to topic in one call (at most 10,000 by
// default) and returns one result per message, in order, once all are
// durable. Each message carries the trace context of ctx, as with Publish
// (msgs' header maps are not changed). It either fails as a whole or succeeds as a whole; after a failure
// some messages may have been stored, so retry with the same ids.
func (c *Client) PublishBatch(ctx context.Context, topic string, msgs []OutMessage) ([]PublishResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	pms := make([]*spoolv1.PublishMessage, len(msgs))
	for i := range msgs {
		pms[i] = &spoolv1.PublishMessage{Id: msgs[i].ID, Key: msgs[i].Key, Payload: msgs[i].Payload, Headers: injectTrace(ctx, msgs[i].Headers),
			DeliverAtMs: unixMs(msgs[i].DeliverAt), DeliverAfterMs: msgs[i].DeliverAfter.Milliseconds()}
	}
	return c.publish(ctx, topic, AcksAll, pms)
}

func (c *Client) publish(ctx context.Context, topic string, acks Acks, msgs []*spoolv1.PublishMessage) ([]PublishResult, error) {
	if topic == "" {
		return nil, errors.New("spool: publish: topic is empty: name the topic to publish to")
	}
	resp, err := c.pub.Publish(ctx, &spoolv1.PublishRequest{Topic: topic, Messages: msgs, Acks: acks.proto()})
	if err != nil {
		return nil, c.publishError(topic, err)
	}
	rs := resp.GetResults()
	if len(rs) != len(msgs) {
		return nil, fmt.Errorf("spool: publish to %q: sidecar answered %d results for %d messages: the sidecar and SDK disagree on the protocol; upgrade them together", topic, len(rs), len(msgs))
	}
	out := make([]PublishResult, len(rs))
	for i, r := range rs {
		out[i] = PublishResult{ID: r.GetId(), Partition: r.GetPartition(), Offset: r.GetOffset()}
	}
	return out, nil
}

// publishError turns a gRPC error into one that says what to do.
func (c *Client) publishError(topic string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("spool: publish to %q: %w", topic, err)
	}
	reason := errorReason(err)
	switch {
	case sidecarUnreachable(err):
		return fmt.Errorf("spool: publish to %q: %w (sidecar unreachable): is spoold running at %s? retry with the same message ids", topic, err, c.addr)
	case st.Code() == codes.Unavailable:
		return fmt.Errorf("spool: publish to %q: the sidecar at %s cannot store it now (%s): %w: retry later with the same message ids", topic, c.addr, reason, err)
	case reason == "OUTCOME_UNKNOWN":
		return fmt.Errorf("spool: publish to %q: %w (OUTCOME_UNKNOWN: the sidecar could not learn whether it committed; the sidecar's message below says why): the message may or may not be stored; retry with the same message ids (consumers dedupe on them): %w", topic, ErrOutcomeUnknown, err)
	case st.Code() == codes.DeadlineExceeded, st.Code() == codes.Canceled:
		return fmt.Errorf("spool: publish to %q: %w: the message may or may not be stored; retry with the same message ids", topic, err)
	case reason != "":
		return fmt.Errorf("spool: publish to %q: the sidecar refused it (%s): %w", topic, reason, err)
	default:
		return fmt.Errorf("spool: publish to %q: %w", topic, err)
	}
}
