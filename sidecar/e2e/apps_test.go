package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return &errdetails.ErrorInfo{}
}

// An app outside its scopes (apps.identities) is refused with
// PERMISSION_DENIED naming the topic (and group) on Publish, PublishStream
// and Subscribe, by a real spoold; what its scopes allow is served, and
// another identity (by token) has its own scopes.
func TestAppScopes(t *testing.T) {
	const auditorToken = "auditor-0123456789abcdef0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(auditorToken+" auditor\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, `topics:
  - name: orders
  - name: secret
subscriptions:
  - {topic: orders, group: mail}
  - {topic: secret, group: spy}
apps:
  tokens_file: `+tokens+`
  identities:
    - name: local
      publish: [orders]
      subscribe: ["orders:mail"]
    - name: auditor
      publish: []
      subscribe: ["secret:*"]
`)
	conn, err := grpc.NewClient("passthrough:///"+n.app, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub := spoolv1.NewPublisherServiceClient(conn)
	msgs := []*spoolv1.PublishMessage{{Payload: []byte("x")}}
	denied := func(what string, err error, reason string, names ...string) {
		t.Helper()
		ei := errorInfo(err)
		if status.Code(err) != codes.PermissionDenied || ei.GetReason() != reason {
			t.Errorf("%s: %v (reason %q), want PERMISSION_DENIED %s", what, err, ei.GetReason(), reason)
			return
		}
		for _, name := range names {
			if !strings.Contains(status.Convert(err).Message(), `"`+name+`"`) {
				t.Errorf("%s: %q does not name %q", what, status.Convert(err).Message(), name)
			}
		}
	}

	_, err = pub.Publish(ctx, &spoolv1.PublishRequest{Topic: "secret", Messages: msgs})
	denied("publish to secret", err, "PUBLISH_NOT_ALLOWED", "secret")
	if _, err := pub.Publish(ctx, &spoolv1.PublishRequest{Topic: "orders", Messages: msgs}); err != nil {
		t.Errorf("publish to orders, in scope: %v", err)
	}
	stream, err := pub.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&spoolv1.PublishStreamRequest{Sequence: 1, Topic: "secret", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || codes.Code(resp.GetError().GetCode()) != codes.PermissionDenied || resp.GetError().GetReason() != "PUBLISH_NOT_ALLOWED" || !strings.Contains(resp.GetError().GetMessage(), `"secret"`) {
		t.Errorf("stream publish to secret: %v, %v; want an in-band PUBLISH_NOT_ALLOWED naming the topic", resp, err)
	}
	_ = stream.CloseSend()

	subscribe := func(ctx context.Context, group string) error {
		s, err := spoolv1.NewSubscriberServiceClient(conn).Subscribe(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&spoolv1.SubscribeRequest{Start: &spoolv1.Start{Group: group}}); err != nil {
			return err
		}
		_, err = s.Recv() // Started, or the refusal
		return err
	}
	denied("subscribe as spy", subscribe(ctx, "spy"), "SUBSCRIBE_NOT_ALLOWED", "secret", "spy")
	subCtx, subCancel := context.WithCancel(ctx)
	if err := subscribe(subCtx, "mail"); err != nil {
		t.Errorf("subscribe as mail, in scope: %v", err)
	}
	subCancel()

	// The auditor, by its token: its own scopes.
	auditor := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+auditorToken)
	_, err = pub.Publish(auditor, &spoolv1.PublishRequest{Topic: "orders", Messages: msgs})
	denied("the auditor publishes", err, "PUBLISH_NOT_ALLOWED", "orders")
	denied("the auditor subscribes as mail", subscribe(auditor, "mail"), "SUBSCRIBE_NOT_ALLOWED", "orders", "mail")
	// A stream carries its caller's identity to every request.
	astream, err := pub.PublishStream(auditor)
	if err != nil {
		t.Fatal(err)
	}
	if err := astream.Send(&spoolv1.PublishStreamRequest{Sequence: 1, Topic: "orders", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	resp, err = astream.Recv()
	if err != nil || resp.GetError().GetReason() != "PUBLISH_NOT_ALLOWED" || !strings.Contains(resp.GetError().GetMessage(), `"auditor"`) {
		t.Errorf("the auditor's stream publish to orders: %v, %v; want an in-band PUBLISH_NOT_ALLOWED for the auditor", resp, err)
	}
	_ = astream.CloseSend()
	audCtx, audCancel := context.WithCancel(auditor)
	if err := subscribe(audCtx, "spy"); err != nil {
		t.Errorf("the auditor subscribes as spy, in scope: %v", err)
	}
	audCancel()

	for series, want := range map[string]float64{
		`spool_app_denied_total{app="local",reason="PUBLISH_NOT_ALLOWED"}`:     2,
		`spool_app_denied_total{app="local",reason="SUBSCRIBE_NOT_ALLOWED"}`:   1,
		`spool_app_denied_total{app="auditor",reason="PUBLISH_NOT_ALLOWED"}`:   2,
		`spool_app_denied_total{app="auditor",reason="SUBSCRIBE_NOT_ALLOWED"}`: 1,
	} {
		if got := metricValue(t, n, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
