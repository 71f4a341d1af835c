package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
)

// One record in the controller's log that no node can decode (a forged
// Produce to group 0, a newer release's command, damage) is skipped on
// every node alike, never a halt: topics are still created on all nodes
// afterwards, and a node restarted afterwards starts and applies the log
// past it (docs/replication.md, "The controller"). It used to stop the
// controller on every node for good, and a restarted node exited at start.
func TestClusterSkipsUndecodableControllerRecord(t *testing.T) {
	tc := newTestCluster(t, 3)
	for i, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: "before", Partitions: 1}); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	garbage := log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: []byte("\xff\xfe not a controller command")}}, time.Now().UnixMilli())
	if _, err := tc.nodes[0].n.produceAtLeader(ctx, controllerGroup, "", 0, nil, garbage, engine.AcksAll); err != nil {
		t.Fatalf("appending the record to group 0: %v", err)
	}
	if err := tc.nodes[1].n.EnsureTopic(engine.TopicSpec{Name: "after", Partitions: 2}); err != nil {
		t.Fatalf("creating a topic after the record: %v", err)
	}
	for i, cn := range tc.nodes {
		awaitCond(t, 20*time.Second, "the topic on every node", func() error {
			_, err := cn.n.Partitions("after")
			return err
		})
		if got := cn.n.asMember().ctrl.Skipped(); got != 1 {
			t.Errorf("node %d skipped %d records, want 1", i, got)
		}
	}
	restarted := tc.nodes[2]
	tc.stop(restarted)
	tc.start(restarted)
	if err := restarted.n.EnsureTopic(engine.TopicSpec{Name: "after", Partitions: 2}); err != nil {
		t.Fatalf("the restarted node: %v", err)
	}
	if _, err := produce(restarted.n, "after", 1, "x"); err != nil {
		t.Fatalf("publishing through the restarted node: %v", err)
	}
	if got := restarted.n.asMember().ctrl.Skipped(); got != 1 {
		t.Errorf("the restarted node skipped %d records, want 1", got)
	}
	select {
	case err := <-restarted.done:
		t.Fatalf("the restarted node stopped: %v", err)
	default:
	}
}

// The same for a consumer-group coordinator's log (a partition of
// __groups): a record that does not decode is skipped on every replica,
// and the coordinator goes on answering (it used to stop applying the
// partition on every replica).
func TestClusterSkipsUndecodableCoordinatorRecord(t *testing.T) {
	tc := newTestCluster(t, 3)
	const group = "billing"
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCoordinators(t, tc.nodes, group)
	leader, part := coordLeader(t, tc.nodes, group)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Proposed at the leader itself: a peer's write to an internal topic is
	// refused (TestClusterRefusesPeerAttacks); a record may still reach the
	// log from a release that encodes differently, or a bug.
	garbage := log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: []byte("\xff\xfe not a coordinator command")}}, time.Now().UnixMilli())
	if _, err := leader.n.produceAtLeader(ctx, part.X.raftGroup, meta.GroupsTopic, part.Num, part.X.holders(), garbage, engine.AcksAll); err != nil {
		t.Fatalf("appending the record to %s/%d: %v", meta.GroupsTopic, part.Num, err)
	}
	m := &testMember{group: group, id: "m1", session: "s1", via: tc.nodes[1]}
	if res, err := m.join(t, coord.Topic{Name: "orders", Partitions: 2}); err != nil || res.Err != nil {
		t.Fatalf("joining after the record: %+v, %v", res, err)
	}
	for i, cn := range tc.nodes {
		awaitCond(t, 20*time.Second, "the record skipped on every replica", func() error {
			_, cp, err := coordLog(t, cn, group)
			if err != nil {
				return err
			}
			if got := cp.app.Skipped(); got != 1 {
				return fmt.Errorf("node %d skipped %d records, want 1 (stopped: %v)", i, got, cp.app.Err())
			}
			return cp.app.Err()
		})
	}
}
