package spoolv1

import (
	"errors"
	"fmt"
)

// Validate methods check what a request must satisfy whatever the sidecar's
// configuration says; go-grpc-middleware's validator interceptor calls them
// on every request and stream frame and answers INVALID_ARGUMENT with the
// message. Limits that depend on configuration (message size, key size,
// header count) are checked by the sidecar, which knows them.

// Validate checks a PublishRequest.
func (r *PublishRequest) Validate() error {
	if r.GetTopic() == "" {
		return errors.New("publish: topic is empty: name the topic to publish to")
	}
	if len(r.GetMessages()) == 0 {
		return errors.New("publish: no messages: send at least one message")
	}
	return nil
}

// Validate checks a PublishStreamRequest.
func (r *PublishStreamRequest) Validate() error {
	if r.GetTopic() == "" {
		return fmt.Errorf("publish stream: request %d: topic is empty: name the topic to publish to", r.GetSequence())
	}
	if len(r.GetMessages()) == 0 {
		return fmt.Errorf("publish stream: request %d: no messages: send at least one message", r.GetSequence())
	}
	return nil
}

// Validate checks a SubscribeRequest frame.
func (r *SubscribeRequest) Validate() error {
	if s := r.GetStart(); s != nil && s.GetGroup() == "" {
		return errors.New("subscribe: start.group is empty: name the consumer group declared in the sidecar's subscriptions")
	}
	for i, a := range r.GetAcks() {
		if a.GetRef() == nil {
			return fmt.Errorf("subscribe: acks[%d].ref is missing: echo the delivery's topic, partition, offset and fencing_token", i)
		}
	}
	for i, n := range r.GetNacks() {
		if n.GetRef() == nil {
			return fmt.Errorf("subscribe: nacks[%d].ref is missing: echo the delivery's topic, partition, offset and fencing_token", i)
		}
		switch n.GetOutcome() {
		case Outcome_OUTCOME_RETRY, Outcome_OUTCOME_DEAD_LETTER, Outcome_OUTCOME_RELEASE:
		default:
			return fmt.Errorf("subscribe: nacks[%d].outcome is %s: use OUTCOME_RETRY, OUTCOME_DEAD_LETTER or OUTCOME_RELEASE (acks go in acks)", i, n.GetOutcome())
		}
	}
	for i, e := range r.GetExtends() {
		if e.GetRef() == nil {
			return fmt.Errorf("subscribe: extends[%d].ref is missing: echo the delivery's topic, partition, offset and fencing_token", i)
		}
	}
	return nil
}

// Validate checks a HandleResponse returned by an application in callback mode.
func (r *HandleResponse) Validate() error {
	switch r.GetOutcome() {
	case Outcome_OUTCOME_ACK, Outcome_OUTCOME_RETRY, Outcome_OUTCOME_DEAD_LETTER:
		return nil
	default:
		return fmt.Errorf("handle: outcome is %s: return OUTCOME_ACK, OUTCOME_RETRY or OUTCOME_DEAD_LETTER", r.GetOutcome())
	}
}
