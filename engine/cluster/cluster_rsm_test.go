package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
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
	proposeAtLeader(ctx, t, tc.nodes, controllerGroup, garbage)
	if err := tc.nodes[1].n.EnsureTopic(engine.TopicSpec{Name: "after", Partitions: 2}); err != nil {
		t.Fatalf("creating a topic after the record: %v", err)
	}
	for i, cn := range tc.nodes {
		awaitCond(t, 20*time.Second, "the topic on every node", func() error {
			_, err := cn.n.Partitions("after")
			return err
		})
		if got := cn.n.asMember().ctrl.Skipped(); got != 2 {
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
	if got := restarted.n.asMember().ctrl.Skipped(); got != 2 {
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
	proposeAtLeader(ctx, t, tc.nodes, part.X.raftGroup, garbage)
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

// proposeAtLeader puts data in group's log as its leader does, unchecked:
// records that reached the log without a proposer's checks (a forged or
// damaged record, a newer release's command).
func proposeAtLeader(ctx context.Context, t *testing.T, nodes []*clusterNode, group uint64, data []byte) {
	t.Helper()
	var failed error
	awaitCond(t, 20*time.Second, fmt.Sprintf("a leader of group %d taking the records", group), func() error {
		for _, cn := range nodes {
			if st, ok := cn.n.asMember().host.Status(group); ok && st.IsLeader {
				_, err := cn.n.propose(ctx, group, data, engine.AcksAll)
				var nl *raft.NotLeaderError
				if errors.As(err, &nl) {
					return err // nothing proposed: try the new leader
				}
				failed = err // proposing again might store the records twice
				return nil
			}
		}
		return errors.New("no leader")
	})
	if failed != nil {
		t.Fatalf("appending the records to group %d: %v", group, failed)
	}
}

// A peer's forwarded Produce (NodeService.Produce) into the controller's
// log or a coordinator's is refused before it is proposed unless each
// record is a command that decodes and validates, as this node's own
// proposers check theirs: nothing reaches those logs for every node to
// skip, and the logs do not move.
func TestClusterRefusesForwardedRecordsThatAreNoCommands(t *testing.T) {
	tc := newTestCluster(t, 3)
	const group = "billing"
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCoordinators(t, tc.nodes, group)
	leader, part := coordLeader(t, tc.nodes, group)
	badMeta, err := meta.EncodeCommand(meta.Command{DeleteTopic: &meta.DeleteTopic{Name: meta.GroupsTopic}})
	if err != nil {
		t.Fatal(err)
	}
	badCoord, err := coord.EncodeCommand(coord.Command{Group: "not a group name!", AtMs: 1, Leave: &coord.Leave{Member: "m1", Session: "s1"}})
	if err != nil {
		t.Fatal(err)
	}
	payload := func(v []byte) []byte {
		return log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: v}}, time.Now().UnixMilli())
	}
	for _, c := range []struct {
		name  string
		req   *clusterv1.ProduceRequest
		owner *clusterNode
	}{
		{"controller: undecodable", &clusterv1.ProduceRequest{Group: controllerGroup, Records: payload([]byte("\xff\xfe"))}, nil},
		{"controller: invalid", &clusterv1.ProduceRequest{Group: controllerGroup, Records: payload(badMeta)}, nil},
		{"coordinator: undecodable", &clusterv1.ProduceRequest{Group: part.X.raftGroup, Topic: meta.GroupsTopic, Partition: part.Num, Records: payload([]byte("\xff\xfe"))}, leader},
		{"coordinator: invalid", &clusterv1.ProduceRequest{Group: part.X.raftGroup, Topic: meta.GroupsTopic, Partition: part.Num, Records: payload(badCoord)}, leader},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cn := range tc.nodes {
				if c.owner != nil && cn != c.owner {
					continue
				}
				resp, err := (&nodeService{c: cn.n.asMember()}).Produce(context.Background(), c.req)
				if err != nil || resp.GetError() != clusterv1.ProduceError_PRODUCE_ERROR_INVALID {
					t.Fatalf("node %s took the records: %v, %v", cn.addr, resp, err)
				}
				if want := map[bool]string{true: "is internal", false: "no command of this log"}[c.req.Topic == meta.GroupsTopic]; !strings.Contains(resp.GetMessage(), want) {
					t.Fatalf("node %s refused the records for another reason: %s", cn.addr, resp.GetMessage())
				}
			}
		})
	}
	// Commands applied after the refusals: had a record reached a log,
	// every node would have skipped it by then.
	if err := tc.nodes[1].n.EnsureTopic(engine.TopicSpec{Name: "after", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	m := &testMember{group: group, id: "m1", session: "s1", via: tc.nodes[2]}
	if res, err := m.join(t, coord.Topic{Name: "orders", Partitions: 2}); err != nil || res.Err != nil {
		t.Fatalf("joining after the refusals: %+v, %v", res, err)
	}
	for _, cn := range tc.nodes {
		awaitCond(t, 20*time.Second, "the topic created after the refusals on every node", func() error {
			_, err := cn.n.Partitions("after")
			return err
		})
		if n, k := cn.n.asMember().ctrl.Skipped(), cn.n.coord.skipped(); n+k != 0 {
			t.Errorf("node %s skipped %d controller and %d coordinator records", cn.addr, n, k)
		}
	}
}
