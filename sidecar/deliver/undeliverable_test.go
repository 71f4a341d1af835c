package deliver

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/tracker"
)

// A delivery the sidecar cannot encode ends its stream (gRPC refuses to
// send it); it alone is dead-lettered, with its own reason, and the
// stream's other deliveries (in the failed frame, in frames queued behind
// it, even those queued once its sender stopped, and those the app held)
// come back at their first attempt.
func TestUnsendableDeliveryChargesNoOther(t *testing.T) {
	eng := newTestEngine()
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		eng.publish(tTopic, 0, msg(id, []byte(id)))
	}
	h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{MaxAttempts: 5, MaxInFlight: 10, VisibilityTimeout: time.Minute})}})
	tc := h.join(10, 1)
	held := tc.deliveries(1, 10*time.Second) // "a", at the app
	tc.send(&spoolv1.SubscribeRequest{Credit: 4})
	ds := tc.deliveries(4, 10*time.Second)
	// Frames as the sender would hold them: "b" broken (a string the
	// sidecar should never have built), sent with "c"; "d" queued behind;
	// "e" queued after the sender stopped, before the consumer left.
	var failed, behind, late []*spoolv1.Delivery
	for _, d := range ds {
		switch d.GetOffset() {
		case 3:
			behind = append(behind, d)
		case 4:
			late = append(late, d)
		default:
			failed = append(failed, d)
		}
	}
	for _, d := range failed {
		if d.GetOffset() == 1 {
			d.MessageId = "b\xff\xfe"
		}
	}
	tc.c.out <- queued{f: &spoolv1.SubscribeResponse{Deliveries: behind}}
	srv := &Server{log: slog.New(slog.DiscardHandler)}
	srv.unsent(h.g, tc.c, &spoolv1.SubscribeResponse{Deliveries: failed})
	tc.c.out <- queued{f: &spoolv1.SubscribeResponse{Deliveries: late}}
	if err := h.g.post(context.Background(), leaveEvent{tc.c}); err != nil {
		t.Fatal(err)
	}

	again := h.join(10, 10).deliveries(4, 10*time.Second) // a, c, d and e
	for _, d := range again {
		if d.GetAttempt() != 1 {
			t.Errorf("offset %d redelivered at attempt %d, want 1: no attempt is charged for the sidecar's failure", d.GetOffset(), d.GetAttempt())
		}
		if d.GetOffset() == 1 {
			t.Errorf("the unsendable delivery was delivered again")
		}
	}
	if held[0].GetOffset() != 0 {
		t.Fatalf("first delivery at offset %d, want 0", held[0].GetOffset())
	}
	await(t, 10*time.Second, "one dead letter", func() bool { return len(eng.records(tDLQ, 0)) == 1 })
	dl := eng.records(tDLQ, 0)[0]
	if string(dl.ID) != "b" || !strings.HasPrefix(header(dl, HeaderDLQReason), ReasonUnsendable) {
		t.Fatalf("dead letter %q reason %q; want b with reason %s...", dl.ID, header(dl, HeaderDLQReason), ReasonUnsendable)
	}
}

// When a stream ends (the app went away), what the app held counts as an
// attempt, but frames still queued for it, which never reached it, do not.
func TestQueuedFramesChargeNothingWhenStreamEnds(t *testing.T) {
	eng := newTestEngine()
	eng.publish(tTopic, 0, msg("a", []byte("a")), msg("b", []byte("b")))
	h := startGroup(t, eng, GroupConfig{Subscriptions: []Subscription{testSub(tracker.Config{MaxAttempts: 5, MaxInFlight: 10, VisibilityTimeout: time.Minute})}})
	tc := h.join(10, 2)
	ds := tc.deliveries(2, 10*time.Second)
	// "a" reached the app; "b" is still queued when the stream ends.
	for _, d := range ds {
		if d.GetOffset() == 1 {
			tc.c.out <- queued{f: &spoolv1.SubscribeResponse{Deliveries: []*spoolv1.Delivery{d}}}
		}
	}
	if err := h.g.post(context.Background(), leaveEvent{tc.c}); err != nil {
		t.Fatal(err)
	}
	want := map[int64]int32{0: 2, 1: 1}
	for _, d := range h.join(10, 10).deliveries(2, 10*time.Second) {
		if d.GetAttempt() != want[d.GetOffset()] {
			t.Errorf("offset %d redelivered at attempt %d, want %d", d.GetOffset(), d.GetAttempt(), want[d.GetOffset()])
		}
	}
}
