package embedded

import (
	"context"
	"errors"
	"testing"

	"github.com/spoolmq/spool/engine"
)

// A node without a cluster has no coordinator: it says so, and users
// cannot take the internal topic's name.
func TestCoordinateNotClustered(t *testing.T) {
	n := openNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	if _, err := n.Coordinate(ctx, engine.GroupCommand{Group: "g", Heartbeat: &engine.GroupHeartbeat{Member: "m", Session: "s"}}); !errors.Is(err, ErrNotClustered) {
		t.Fatalf("Coordinate on a single node: %v, want ErrNotClustered", err)
	}
	if _, err := n.DescribeGroup(ctx, "g"); !errors.Is(err, ErrNotClustered) {
		t.Fatalf("DescribeGroup on a single node: %v, want ErrNotClustered", err)
	}
	if err := n.EnsureTopic(engine.TopicSpec{Name: "__groups", Partitions: 8}); err == nil {
		t.Fatalf("a user created %s", "__groups")
	}
}

// A node without a cluster refuses operator moves, saying why.
func TestMoveReplicasNotClustered(t *testing.T) {
	n, err := Open(Config{DataDir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.MoveReplicas(context.Background(), "orders", 0, []uint64{1, 2, 3}); !errors.Is(err, engine.ErrMoveRefused) {
		t.Fatalf("move on a single node: %v, want ErrMoveRefused", err)
	}
}
