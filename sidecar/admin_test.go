package sidecar

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// Defect 13: admin answers engine errors with their reasons (it answered
// INTERNAL for all of them), and its own refusals have reasons too.
func TestAdminErrorsHaveReasons(t *testing.T) {
	eng, err := engine.Open(engine.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := eng.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	// The subscription's DLQ topic is declared in the config but not in
	// the engine: the engine answers ErrUnknownTopic.
	cfg := &config.Config{Subscriptions: []config.SubscriptionConfig{{Topic: "orders", Group: "mail"}}}
	a := newAdmin(cfg, eng, nil, nil, metrics.New())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(what string, err error, code codes.Code, reason string) {
		t.Helper()
		if status.Code(err) != code || reasonOf(err) != reason {
			t.Errorf("%s: %v (reason %q), want %s %s", what, err, reasonOf(err), code, reason)
		}
		if st, _ := status.FromError(err); len(st.Message()) < 20 {
			t.Errorf("%s: the message %q does not say what to do", what, st.Message())
		}
	}
	_, err = a.PeekDeadLetters(ctx, &spoolv1.PeekDeadLettersRequest{Topic: "orders", Group: "mail"})
	check("peek without a DLQ topic in the engine", err, codes.NotFound, "UNKNOWN_TOPIC")
	_, err = a.PeekDeadLetters(ctx, &spoolv1.PeekDeadLettersRequest{Topic: "orders", Group: "nobody"})
	check("peek of an unknown subscription", err, codes.NotFound, "UNKNOWN_SUBSCRIPTION")
	_, err = a.Redrive(ctx, &spoolv1.RedriveRequest{Topic: "nope", Group: "mail"})
	check("redrive of an unknown subscription", err, codes.NotFound, "UNKNOWN_SUBSCRIPTION")
	_, err = a.ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: "nobody"})
	check("list an unknown group", err, codes.NotFound, "UNKNOWN_GROUP")
	_, err = a.ResetOffsets(ctx, &spoolv1.ResetOffsetsRequest{Topic: "orders", Group: "nobody"})
	check("reset an unknown group", err, codes.NotFound, "UNKNOWN_GROUP")
}
