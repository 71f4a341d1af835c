package sidecar

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/embedded"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// Defect 13: admin answers engine errors with their reasons (it answered
// INTERNAL for all of them), and its own refusals have reasons too.
func TestAdminErrorsHaveReasons(t *testing.T) {
	eng, err := embedded.Open(embedded.Config{DataDir: t.TempDir()})
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

// openNode opens a single-node engine in dir and runs it until the
// returned stop is called.
func openNode(t *testing.T, dir string) (*embedded.Node, func()) {
	t.Helper()
	eng, err := embedded.Open(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	return eng, func() {
		cancel()
		<-done
		if err := eng.Close(); err != nil {
			t.Error(err)
		}
	}
}

// Topics made with CreateTopic exist at once, can be altered, are opened
// again at the next start (single node), and those the config declares or
// subscriptions use are refused with reasons that say why.
func TestAdminTopics(t *testing.T) {
	dir := t.TempDir()
	eng, stop := openNode(t, dir)
	cfg := &config.Config{Topics: []config.TopicConfig{config.NewTopic("orders", 1)}, Subscriptions: []config.SubscriptionConfig{config.NewSubscription("orders", "mail")}}
	for _, tc := range cfg.AllTopics() {
		if err := eng.EnsureTopic(engine.TopicSpec{Name: tc.Name, Partitions: int32(tc.Partitions), RetentionAge: tc.Retention}); err != nil {
			t.Fatal(err)
		}
	}
	a := newAdmin(cfg, eng, nil, nil, metrics.New())
	a.catalog = newTopicCatalog(dir, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(what string, err error, code codes.Code, reason string) {
		t.Helper()
		if status.Code(err) != code || reasonOf(err) != reason {
			t.Errorf("%s: %v (reason %q), want %s %s", what, err, reasonOf(err), code, reason)
		}
	}
	resp, err := a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 3, RetentionMs: 3_600_000})
	if err != nil || len(resp.GetTopic().GetPartitions()) != 3 || resp.GetTopic().GetRetentionMs() != 3_600_000 {
		t.Fatalf("create audit: %v, %v", resp, err)
	}
	if _, err := a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 3, RetentionMs: 3_600_000}); err != nil {
		t.Errorf("creating audit again with the same settings: %v", err)
	}
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 4})
	check("create audit with other settings", err, codes.FailedPrecondition, "TOPIC_EXISTS")
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "bad/name", Partitions: 1})
	check("create with a bad name", err, codes.InvalidArgument, "INVALID_TOPIC_NAME")
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "zero", Partitions: 0})
	check("create with no partitions", err, codes.InvalidArgument, "INVALID_TOPIC_SPEC")
	_, err = a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "neg", Partitions: 1, RetentionBytes: -1})
	check("create with a negative retention", err, codes.InvalidArgument, "INVALID_TOPIC_SPEC")

	bytes := int64(1 << 30)
	alt, err := a.AlterTopic(ctx, &spoolv1.AlterTopicRequest{Name: "audit", RetentionBytes: &bytes})
	if err != nil || alt.GetTopic().GetRetentionBytes() != bytes || alt.GetTopic().GetRetentionMs() != 3_600_000 {
		t.Fatalf("alter audit's retention bytes: %v, %v (retention_ms must stay)", alt, err)
	}
	_, err = a.AlterTopic(ctx, &spoolv1.AlterTopicRequest{Name: "orders", RetentionBytes: &bytes})
	check("alter a declared topic", err, codes.FailedPrecondition, "TOPIC_DECLARED")
	_, err = a.AlterTopic(ctx, &spoolv1.AlterTopicRequest{Name: "nope"})
	check("alter an unknown topic", err, codes.NotFound, "UNKNOWN_TOPIC")

	_, err = a.DeleteTopic(ctx, &spoolv1.DeleteTopicRequest{Name: "orders"})
	check("delete a topic a subscription reads", err, codes.FailedPrecondition, "TOPIC_IN_USE")
	if st, _ := status.FromError(err); !strings.Contains(st.Message(), "orders/mail") {
		t.Errorf("the refusal does not name the subscription: %s", st.Message())
	}
	_, err = a.DeleteTopic(ctx, &spoolv1.DeleteTopicRequest{Name: "orders.dlq.mail"})
	check("delete a subscription's dead-letter topic", err, codes.FailedPrecondition, "TOPIC_IN_USE")
	_, err = a.DeleteTopic(ctx, &spoolv1.DeleteTopicRequest{Name: "nope"})
	check("delete an unknown topic", err, codes.NotFound, "UNKNOWN_TOPIC")

	// A topic nothing uses is deleted: its records and a group's positions
	// on it go; created again under its name it starts empty.
	if _, err := a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "scratch", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	appended := make(chan error, 1)
	eng.Produce("scratch", 0, []engine.Record{{Value: []byte("old")}, {Value: []byte("old")}}, func(_ int64, err error) { appended <- err })
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if err := eng.CommitPositions("mail", "scratch", map[int32]engine.Position{0: {Next: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DeleteTopic(ctx, &spoolv1.DeleteTopicRequest{Name: "scratch"}); err != nil {
		t.Fatalf("delete a topic nothing uses: %v", err)
	}
	if _, _, err := eng.Offsets("scratch", 0); !errors.Is(err, engine.ErrUnknownTopic) {
		t.Fatalf("offsets of a deleted topic: %v, want ErrUnknownTopic", err)
	}
	if _, err := a.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "scratch", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if start, end, err := eng.Offsets("scratch", 0); err != nil || start != 0 || end != 0 {
		t.Fatalf("scratch created again: offsets %d..%d, %v; want an empty log", start, end, err)
	}
	if pos, err := eng.LoadPositions("mail", "scratch"); err != nil || len(pos) != 0 {
		t.Fatalf("a group's positions on scratch created again: %v, %v; want none", pos, err)
	}
	if _, err := a.DeleteTopic(ctx, &spoolv1.DeleteTopicRequest{Name: "scratch"}); err != nil {
		t.Fatalf("delete scratch again: %v", err)
	}

	// The next start opens audit again, with its altered retention.
	stop()
	eng, stop = openNode(t, dir)
	defer stop()
	if err := openCreatedTopics(cfg, eng, newTopicCatalog(dir, false)); err != nil {
		t.Fatal(err)
	}
	a = newAdmin(cfg, eng, nil, nil, metrics.New())
	lt, err := a.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tp := range lt.GetTopics() {
		names = append(names, tp.GetName())
		if tp.GetName() == "audit" && (len(tp.GetPartitions()) != 3 || tp.GetRetentionBytes() != bytes) {
			t.Errorf("audit after a restart: %v", tp)
		}
	}
	if !slices.Contains(names, "audit") || slices.Contains(names, "scratch") {
		t.Fatalf("after a restart the node has %v: want audit and not the deleted scratch", names)
	}
}

// onlyBackend hides everything of a *embedded.Node but the engine.Backend
// seam, as a broker backend offers it.
type onlyBackend struct{ engine.Backend }

// Embedded-cluster operations asked of a broker backend answer
// BACKEND_UNSUPPORTED naming the backend, not INTERNAL or a nil deref.
func TestAdminClusterOpsOnABrokerBackend(t *testing.T) {
	eng, err := embedded.Open(embedded.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	cfg := &config.Config{Storage: config.StorageConfig{Backend: config.BackendJetStream}}
	a := newAdmin(cfg, onlyBackend{eng}, nil, nil, metrics.New())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = a.DecommissionNode(ctx, &spoolv1.DecommissionNodeRequest{NodeId: "2"})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "BACKEND_UNSUPPORTED" || !strings.Contains(err.Error(), "jetstream") {
		t.Errorf("decommission: %v (reason %q), want FAILED_PRECONDITION BACKEND_UNSUPPORTED naming jetstream", err, reasonOf(err))
	}
	_, err = a.MoveReplicas(ctx, &spoolv1.MoveReplicasRequest{Topic: "orders", Partition: 0, Replicas: []string{"1", "2", "3"}, DryRun: true})
	if reasonOf(err) != "BACKEND_UNSUPPORTED" || !strings.Contains(err.Error(), "jetstream") {
		t.Errorf("move: %v (reason %q), want BACKEND_UNSUPPORTED naming jetstream", err, reasonOf(err))
	}
	st, err := a.ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
	if err != nil || st.GetClusterId() != "jetstream" {
		t.Errorf("cluster status: %v, %v; want the backend as the cluster id", st, err)
	}
	if coordinatorOf(onlyBackend{eng}) != nil {
		t.Error("a backend without a coordinator got one")
	}
}
