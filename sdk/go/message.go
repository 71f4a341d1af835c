package spool

import (
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Message is one delivery handed to a Handler. Its fields belong to the
// handler until it returns; keep copies, not the Message, beyond that.
type Message struct {
	// ID is the message id, stable across redeliveries: dedupe on it.
	ID string
	// Topic, Partition and Offset say where the message is stored.
	Topic     string
	Partition int32
	Offset    int64
	// Key is the partitioning key as published (may be empty).
	Key []byte
	// Payload is the message body as published.
	Payload []byte
	// Headers are the application headers as published (may be nil).
	Headers map[string]string
	// PublishTime is when the message was appended to the log.
	PublishTime time.Time
	// FirstDeliveryTime is when the message was first delivered to this group.
	FirstDeliveryTime time.Time
	// LeaseDeadline is when the lease of this delivery ends as first granted.
	// The SDK extends the lease while the handler runs, so a handler need not
	// watch it.
	LeaseDeadline time.Time
	// Attempt counts deliveries to this group, starting at 1.
	Attempt int
	// LastError is the error text of the previous failed attempt ("" on the first).
	LastError string
	// FencingToken increases strictly each time the message is (re)delivered
	// in its partition and group. Store it with the side effects of the
	// handler and reject writes carrying an older token: they come from an
	// attempt whose lease expired.
	FencingToken uint64
	// Group is the consumer group the delivery belongs to.
	Group string
}

func newMessage(d *spoolv1.Delivery) *Message {
	return &Message{
		ID:                d.GetMessageId(),
		Topic:             d.GetTopic(),
		Partition:         d.GetPartition(),
		Offset:            d.GetOffset(),
		Key:               d.GetKey(),
		Payload:           d.GetPayload(),
		Headers:           d.GetHeaders(),
		PublishTime:       unixMilli(d.GetPublishTimeMs()),
		FirstDeliveryTime: unixMilli(d.GetFirstDeliveryTimeMs()),
		LeaseDeadline:     unixMilli(d.GetLeaseDeadlineMs()),
		Attempt:           int(d.GetAttempt()),
		LastError:         d.GetLastError(),
		FencingToken:      d.GetFencingToken(),
		Group:             d.GetGroup(),
	}
}

func refOf(d *spoolv1.Delivery) deliveryRef {
	return deliveryRef{topic: d.GetTopic(), partition: d.GetPartition(), offset: d.GetOffset(), token: d.GetFencingToken()}
}

func unixMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
