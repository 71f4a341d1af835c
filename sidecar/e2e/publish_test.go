package e2e

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Bad publishes get a clear gRPC error with a stable reason, and nothing of
// the request is written.
func TestPublishRejectsBadInput(t *testing.T) {
	n := startNode(t, `
limits:
  max_message_bytes: 4096
  max_key_bytes: 64
  max_header_bytes: 1024
topics:
  - name: orders
    partitions: 2
`)
	conn, err := grpc.NewClient("passthrough:///"+n.app, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pub := spoolv1.NewPublisherServiceClient(conn)
	ok := &spoolv1.PublishMessage{Key: []byte("k"), Payload: []byte("fine")}
	cases := []struct {
		name   string
		req    *spoolv1.PublishRequest
		code   codes.Code
		reason string
	}{
		{"too large", &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{ok, {Payload: make([]byte, 5000)}}}, codes.InvalidArgument, "MESSAGE_TOO_LARGE"},
		{"key too large", &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{ok, {Key: make([]byte, 65)}}}, codes.InvalidArgument, "KEY_TOO_LARGE"},
		{"reserved header", &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{ok, {Headers: map[string]string{"spool-dlq-reason": "x"}}}}, codes.InvalidArgument, "RESERVED_HEADER"},
		{"unknown topic", &spoolv1.PublishRequest{Topic: "nope", Messages: []*spoolv1.PublishMessage{ok}}, codes.NotFound, "UNKNOWN_TOPIC"},
		{"bad partition", &spoolv1.PublishRequest{Topic: "orders", Messages: []*spoolv1.PublishMessage{{Partition: ptr(int32(7))}}}, codes.InvalidArgument, "BAD_PARTITION"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pub.Publish(context.Background(), tc.req)
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, tc.code)
			}
			if got := reason(st); got != tc.reason {
				t.Fatalf("reason %q, want %q (message: %s)", got, tc.reason, st.Message())
			}
			if len(st.Message()) < 20 || !strings.Contains(st.Message(), " ") {
				t.Fatalf("message %q does not say what was wrong", st.Message())
			}
		})
	}
	// Validation by the middleware: an empty request names what is missing.
	_, err = pub.Publish(context.Background(), &spoolv1.PublishRequest{Topic: "orders"})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "no messages") {
		t.Fatalf("empty publish: %v", err)
	}
	// Nothing partial was written: both partitions are empty.
	topics, err := n.adminClient().ListTopics(context.Background(), &spoolv1.ListTopicsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range topics.GetTopics() {
		for _, p := range tp.GetPartitions() {
			if p.GetEndOffset() != 0 {
				t.Fatalf("topic %s partition %d has %d messages after rejected publishes", tp.GetName(), p.GetPartition(), p.GetEndOffset())
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func reason(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}
