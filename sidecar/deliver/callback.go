package deliver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// DownstreamApp is the downstream name given to a retry when the app's
// Handle answers UNAVAILABLE (its own breaker).
const DownstreamApp = "app"

// runCallbacks serves the group's callback subscriptions: it joins the loop
// as a consumer with credit for MaxInFlight deliveries and calls the app's
// Handle for each, with a deadline at the delivery's lease deadline. It
// returns when stop is closed and every call has finished.
func (g *Group) runCallbacks(stop <-chan struct{}) {
	topics := g.Topics(ModeCallback)
	if len(topics) == 0 || g.cfg.Handler == nil {
		return
	}
	maxInFlight := 0
	for _, t := range topics {
		sc, _ := g.Subscription(t)
		maxInFlight += sc.Tracker.MaxInFlight * g.partitions(t)
	}
	c := newConsumer("callback", ModeCallback, topics, maxInFlight)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel() // calls still running answer RELEASE; their posts give up
		wg.Wait()
	}()
	if g.post(ctx, joinEvent{c}) != nil {
		return
	}
	if g.post(ctx, settleEvent{c, &spoolv1.SubscribeRequest{Credit: uint32(maxInFlight)}}) != nil {
		return
	}
	for {
		select {
		case q := <-c.out:
			f := q.f
			if q.fenced(time.Now) {
				_ = g.post(ctx, droppedEvent{c, f})
				continue
			}
			for _, d := range f.GetDeliveries() {
				wg.Add(1)
				go func() { // owned: awaited by wg before runCallbacks returns
					defer wg.Done()
					req := g.callHandle(ctx, d)
					_ = g.post(ctx, settleEvent{c, req})
				}()
			}
			for _, e := range f.GetSettleErrors() {
				g.log.Warn("callback settlement refused", "reason", e.GetReason(), "message", e.GetMessage())
			}
		case <-stop:
			return
		}
	}
}

// callHandle calls the app for one delivery and turns its answer into a
// settlement frame that also returns the credit the delivery used.
func (g *Group) callHandle(ctx context.Context, d *spoolv1.Delivery) *spoolv1.SubscribeRequest {
	ref := &spoolv1.DeliveryRef{Topic: d.GetTopic(), Partition: d.GetPartition(), Offset: d.GetOffset(), FencingToken: d.GetFencingToken()}
	req := &spoolv1.SubscribeRequest{Credit: 1}
	callCtx, cancel := context.WithDeadline(ctx, time.UnixMilli(d.GetLeaseDeadlineMs()))
	defer cancel()
	resp, err := g.cfg.Handler.Handle(callCtx, &spoolv1.HandleRequest{Delivery: d})
	if err == nil {
		err = resp.Validate()
		if err != nil {
			err = fmt.Errorf("app answered an invalid outcome: %w", err)
		}
	}
	if err != nil {
		nack := &spoolv1.Nack{Ref: ref, Outcome: spoolv1.Outcome_OUTCOME_RETRY, Error: err.Error()}
		switch status.Code(err) {
		case codes.Unavailable:
			nack.Downstream = DownstreamApp
		case codes.DeadlineExceeded:
			nack.Error = "handle did not answer before the lease deadline"
		}
		// A call cut short by the sidecar itself (drain, shutdown) hands
		// the message back: the app's client answers a status error with
		// code Canceled, which wraps no context error, so ask ctx.
		if ctx.Err() != nil || status.Code(err) == codes.Canceled {
			nack.Outcome = spoolv1.Outcome_OUTCOME_RELEASE
		}
		req.Nacks = []*spoolv1.Nack{nack}
		return req
	}
	switch resp.GetOutcome() {
	case spoolv1.Outcome_OUTCOME_ACK:
		req.Acks = []*spoolv1.Ack{{Ref: ref}}
	default:
		req.Nacks = []*spoolv1.Nack{{Ref: ref, Outcome: resp.GetOutcome(), RetryAfterMs: resp.GetRetryAfterMs(),
			Reason: resp.GetReason(), Error: resp.GetError(), Downstream: resp.GetDownstream()}}
	}
	return req
}
