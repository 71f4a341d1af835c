package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	spool "github.com/spoolmq/spool/sdk/go"
)

// The admin API of a cluster deletes topics and moves replicas, real
// spoold processes: a topic created through one node, with messages, is
// deleted through another, gone from every node with its files, and
// created again empty; a declared topic is refused (its subscription uses
// it); an operator's move (a new preferred leader) is checked by a dry run,
// made and finished, and its refusals carry their reasons.
func TestClusterAdminDeleteAndMove(t *testing.T) {
	sc := startCluster(t, 3, "")
	awaitPlaced(t, sc.nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a0, a1 := sc.nodes[0].adminClient(), sc.nodes[1].adminClient()
	wantReason := func(what string, err error, code codes.Code, r string) {
		t.Helper()
		st, _ := status.FromError(err)
		if st.Code() != code || reason(st) != r {
			t.Fatalf("%s: %v, want %v %s", what, err, code, r)
		}
	}

	if _, err := a0.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	c := sc.nodes[2].client(ctx)
	for i := range 5 {
		if _, err := c.Publish(ctx, "audit", []byte{byte('a' + i)}, []byte("entry"), spool.WithID(string(rune('a'+i)))); err != nil {
			t.Fatalf("publish to audit: %v", err)
		}
	}
	_, err := a1.DeleteTopic(ctx, &spoolv1.DeleteTopicRequest{Name: "orders"})
	wantReason("delete a topic a subscription reads", err, codes.FailedPrecondition, "TOPIC_IN_USE")
	if _, err := a1.DeleteTopic(ctx, &spoolv1.DeleteTopicRequest{Name: "audit"}); err != nil {
		t.Fatalf("delete audit: %v", err)
	}
	eventually(t, 30*time.Second, "audit gone from every node, with its files", func() bool {
		for _, n := range sc.nodes {
			resp, err := n.adminClient().ListTopics(ctx, &spoolv1.ListTopicsRequest{})
			if err != nil || slices.ContainsFunc(resp.GetTopics(), func(ti *spoolv1.TopicInfo) bool { return ti.GetName() == "audit" }) {
				return false
			}
			for _, p := range []string{"audit-0", "audit-1"} {
				if _, err := os.Stat(filepath.Join(n.dataDir, "log", p)); !errors.Is(err, os.ErrNotExist) {
					return false
				}
			}
		}
		return true
	})
	resp, err := a0.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 3})
	if err != nil {
		t.Fatalf("create audit again: %v", err)
	}
	for _, p := range resp.GetTopic().GetPartitions() {
		if p.GetEndOffset() != 0 {
			t.Fatalf("audit created again: partition %d ends at %d, want empty", p.GetPartition(), p.GetEndOffset())
		}
	}

	// An operator's move: orders/0 gets another preferred leader.
	var from []string
	eventually(t, 20*time.Second, "orders/0's replicas known", func() bool {
		resp, err := a0.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
		if err != nil {
			return false
		}
		for _, ti := range resp.GetTopics() {
			if ti.GetName() == "orders" {
				from = ti.GetPartitions()[0].GetReplicas()
			}
		}
		return len(from) == 3
	})
	to := []string{from[1], from[2], from[0]}
	dry, err := a1.MoveReplicas(ctx, &spoolv1.MoveReplicasRequest{Topic: "orders", Partition: 0, Replicas: to, DryRun: true})
	if err != nil || !dry.GetDryRun() || !slices.Equal(dry.GetFrom(), from) || !slices.Equal(dry.GetTo(), to) {
		t.Fatalf("dry run: %v, %v; want %v → %v", dry, err, from, to)
	}
	_, err = a1.MoveReplicas(ctx, &spoolv1.MoveReplicasRequest{Topic: "orders", Partition: 0, Replicas: []string{"9", from[1], from[2]}})
	wantReason("a move to node 9", err, codes.NotFound, "UNKNOWN_NODE")
	_, err = a1.MoveReplicas(ctx, &spoolv1.MoveReplicasRequest{Topic: "orders", Partition: 0, Replicas: to[:2]})
	wantReason("a move to 2 nodes", err, codes.InvalidArgument, "INVALID_REPLICAS")
	if _, err := a1.MoveReplicas(ctx, &spoolv1.MoveReplicasRequest{Topic: "orders", Partition: 0, Replicas: to}); err != nil {
		t.Fatalf("move orders/0 to %v: %v", to, err)
	}
	eventually(t, 30*time.Second, "orders/0 on its new replicas, no move under way", func() bool {
		resp, err := a0.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
		if err != nil {
			return false
		}
		for _, ti := range resp.GetTopics() {
			if p := ti.GetPartitions()[0]; ti.GetName() == "orders" {
				return slices.Equal(p.GetReplicas(), to) && len(p.GetTarget()) == 0
			}
		}
		return false
	})
}
