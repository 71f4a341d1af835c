package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
)

// One record in the controller's log that no node can decode (a forged
// Produce to group 0, a newer release's command, damage), and one that
// decodes but does not validate (a forged DeleteTopic of the internal
// groups topic), are skipped on every node alike, never a halt: each node
// counts both (and reports them in its ClusterStatus, which becomes
// spool_cluster_commands_skipped_total), topics are still created on all
// nodes afterwards, and a node restarted afterwards starts and applies the
// log past them (docs/replication.md, "The controller"). The undecodable
// one used to stop the controller on every node for good, and a restarted
// node exited at start.
func TestClusterSkipsUndecodableControllerRecord(t *testing.T) {
	tc := newTestCluster(t, 3)
	for i, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: "before", Partitions: 1}); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, hadGroups := metaState(t, tc.nodes[0]).Topic(meta.GroupsTopic)
	invalid, err := meta.EncodeCommand(meta.Command{DeleteTopic: &meta.DeleteTopic{Name: meta.GroupsTopic}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.nodes[0].n.proposeMeta(ctx, meta.Command{DeleteTopic: &meta.DeleteTopic{Name: meta.GroupsTopic}}); err == nil {
		t.Fatalf("a controller command that does not validate was proposed")
	}
	garbage := log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: []byte("\xff\xfe not a controller command")}, {Value: invalid}}, time.Now().UnixMilli())
	if _, err := tc.nodes[0].n.produceAtLeader(ctx, controllerGroup, "", 0, nil, garbage, engine.AcksAll); err != nil {
		t.Fatalf("appending the records to group 0: %v", err)
	}
	if err := tc.nodes[1].n.EnsureTopic(engine.TopicSpec{Name: "after", Partitions: 2}); err != nil {
		t.Fatalf("creating a topic after the record: %v", err)
	}
	for i, cn := range tc.nodes {
		awaitCond(t, 20*time.Second, "the topic on every node", func() error {
			_, err := cn.n.Partitions("after")
			return err
		})
		if got := cn.n.ctrl.Skipped(); got != 2 {
			t.Errorf("node %d skipped %d records, want 2", i, got)
		}
		if st, _ := cn.n.ClusterStatus(); st.CommandsSkipped["controller"] != 2 {
			t.Errorf("node %d reports %v commands skipped, want 2 of the controller", i, st.CommandsSkipped)
		}
		if _, has := metaState(t, cn).Topic(meta.GroupsTopic); has != hadGroups {
			t.Errorf("node %d: the groups topic in the state: %v, before the forged delete: %v", i, has, hadGroups)
		}
	}
	awaitCond(t, 20*time.Second, "the same controller state on every node", func() error {
		want, err := meta.EncodeState(metaState(t, tc.nodes[0]))
		for i, cn := range tc.nodes[1:] {
			got, gerr := meta.EncodeState(metaState(t, cn))
			if err = errors.Join(err, gerr); err != nil {
				return err
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("node %d's controller state differs from node 0's", i+1)
			}
		}
		return nil
	})
	restarted := tc.nodes[2]
	tc.stop(restarted)
	tc.start(restarted)
	if err := restarted.n.EnsureTopic(engine.TopicSpec{Name: "after", Partitions: 2}); err != nil {
		t.Fatalf("the restarted node: %v", err)
	}
	if _, err := produce(restarted.n, "after", 1, "x"); err != nil {
		t.Fatalf("publishing through the restarted node: %v", err)
	}
	if got := restarted.n.ctrl.Skipped(); got != 2 {
		t.Errorf("the restarted node skipped %d records, want 2", got)
	}
	select {
	case err := <-restarted.done:
		t.Fatalf("the restarted node stopped: %v", err)
	default:
	}
}

// The same for a consumer-group coordinator's log (a partition of
// __groups): a record that does not decode, and one that decodes but does
// not validate, are skipped on every replica and counted, and the
// coordinator goes on answering (the first used to stop applying the
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
	_, part := coordLeader(t, tc.nodes, group)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	invalid, err := coord.EncodeCommand(coord.Command{Group: "not a group name!", AtMs: 1, Leave: &coord.Leave{Member: "m1", Session: "s1"}})
	if err != nil {
		t.Fatal(err)
	}
	garbage := log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: []byte("\xff\xfe not a coordinator command")}, {Value: invalid}}, time.Now().UnixMilli())
	if _, err := tc.nodes[0].n.produceAtLeader(ctx, part.X.raftGroup, meta.GroupsTopic, part.Num, part.X.holders(), garbage, engine.AcksAll); err != nil {
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
			if got := cp.app.Skipped(); got != 2 {
				return fmt.Errorf("node %d skipped %d records, want 2 (stopped: %v)", i, got, cp.app.Err())
			}
			if st, _ := cn.n.ClusterStatus(); st.CommandsSkipped["coordinator"] != 2 {
				return fmt.Errorf("node %d reports %v commands skipped, want 2 of the coordinators", i, st.CommandsSkipped)
			}
			return cp.app.Err()
		})
	}
}

// metaState is a copy of cn's controller state.
func metaState(t *testing.T, cn *clusterNode) *meta.State {
	t.Helper()
	cn.n.mu.Lock()
	defer cn.n.mu.Unlock()
	return cn.n.state.Clone()
}
