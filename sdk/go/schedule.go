package spool

import (
	"context"
	"errors"
	"fmt"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// CancelOption says where the scheduled message to cancel is.
type CancelOption func(*spoolv1.CancelScheduledRequest)

// CancelAt names the message's partition and offset, as its publish
// returned them (PublishResult): the sidecar reads that one record instead
// of searching for the id.
func CancelAt(partition int32, offset int64) CancelOption {
	return func(r *spoolv1.CancelScheduledRequest) { r.Partition, r.Offset = &partition, &offset }
}

// CancelKey names the message's key: the sidecar searches only its
// partition.
func CancelKey(key []byte) CancelOption {
	return func(r *spoolv1.CancelScheduledRequest) { r.Key = key }
}

// CancelScheduled cancels the scheduled message id of topic before its
// time (docs/scheduling.md): a consumer group that reads the cancel before
// the message is due does not deliver it. It fails with reason
// UNKNOWN_SCHEDULED_MESSAGE when the topic holds no scheduled message with
// the id, SCHEDULE_DUE when its time has come. Cancelling twice is not an
// error. Without CancelAt or CancelKey the sidecar reads every partition of
// the topic to find the id.
func (c *Client) CancelScheduled(ctx context.Context, topic, id string, where ...CancelOption) error {
	if topic == "" || id == "" {
		return errors.New("spool: cancel scheduled: topic and id are required")
	}
	req := &spoolv1.CancelScheduledRequest{Topic: topic, Id: id}
	for _, f := range where {
		f(req)
	}
	if _, err := c.pub.CancelScheduled(ctx, req); err != nil {
		if sidecarUnreachable(err) {
			return fmt.Errorf("spool: cancel scheduled %q of %q: %w (sidecar unreachable): is spoold running at %s?", id, topic, err, c.addr)
		}
		return fmt.Errorf("spool: cancel scheduled %q of %q: %w", id, topic, err)
	}
	return nil
}
