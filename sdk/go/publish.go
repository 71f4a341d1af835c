package spool

import (
	"context"
	"errors"
	"fmt"

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
}

// PublishOption sets optional fields of a published message.
type PublishOption func(*spoolv1.PublishMessage)

// WithID sets the message id (at most 128 bytes). Consumers dedupe on it, so
// retrying a publish with the same id is safe.
func WithID(id string) PublishOption {
	return func(m *spoolv1.PublishMessage) { m.Id = id }
}

// WithHeaders adds application headers (names starting with "spool-" are
// reserved). The map is copied.
func WithHeaders(h map[string]string) PublishOption {
	return func(m *spoolv1.PublishMessage) {
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			m.Headers[k] = v
		}
	}
}

// WithHeader adds one application header.
func WithHeader(key, value string) PublishOption {
	return func(m *spoolv1.PublishMessage) {
		if m.Headers == nil {
			m.Headers = make(map[string]string, 1)
		}
		m.Headers[key] = value
	}
}

func buildMessage(key, payload []byte, opts []PublishOption) *spoolv1.PublishMessage {
	m := &spoolv1.PublishMessage{Key: key, Payload: payload}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Publish appends one message to topic and returns once it is durable.
// On an error the message may or may not be stored: retry with the same
// WithID to stay idempotent.
func (c *Client) Publish(ctx context.Context, topic string, key, payload []byte, opts ...PublishOption) (PublishResult, error) {
	res, err := c.publish(ctx, topic, []*spoolv1.PublishMessage{buildMessage(key, payload, opts)})
	if err != nil {
		return PublishResult{}, err
	}
	return res[0], nil
}

// PublishBatch appends messages to topic in one call (at most 10,000 by
// default) and returns one result per message, in order, once all are
// durable. It either fails as a whole or succeeds as a whole; after a failure
// some messages may have been stored, so retry with the same ids.
func (c *Client) PublishBatch(ctx context.Context, topic string, msgs []OutMessage) ([]PublishResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	pms := make([]*spoolv1.PublishMessage, len(msgs))
	for i := range msgs {
		pms[i] = &spoolv1.PublishMessage{Id: msgs[i].ID, Key: msgs[i].Key, Payload: msgs[i].Payload, Headers: msgs[i].Headers}
	}
	return c.publish(ctx, topic, pms)
}

func (c *Client) publish(ctx context.Context, topic string, msgs []*spoolv1.PublishMessage) ([]PublishResult, error) {
	if topic == "" {
		return nil, errors.New("spool: publish: topic is empty: name the topic to publish to")
	}
	resp, err := c.pub.Publish(ctx, &spoolv1.PublishRequest{Topic: topic, Messages: msgs})
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
	case st.Code() == codes.DeadlineExceeded, st.Code() == codes.Canceled:
		return fmt.Errorf("spool: publish to %q: %w: the message may or may not be stored; retry with the same message ids", topic, err)
	case reason != "":
		return fmt.Errorf("spool: publish to %q: the sidecar refused it (%s): %w", topic, reason, err)
	default:
		return fmt.Errorf("spool: publish to %q: %w", topic, err)
	}
}
