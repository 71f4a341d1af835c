package sidecar

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// The engine's cluster totals become counters that advance by their
// change, and the per-partition leadership and peer gauges follow the
// latest status.
func TestUpdateClusterMetrics(t *testing.T) {
	m := metrics.New()
	st1 := engine.ClusterStatus{
		NodeID: 1, Ready: true,
		Members:          []engine.ClusterMember{{ID: 1, Connected: true}, {ID: 2, Connected: true}, {ID: 3}},
		Replicas:         []engine.ReplicaStatus{{Topic: "orders", Partition: 0, IsLeader: true, StartOffset: 40, CommittedEnd: 100}, {Topic: "orders", Partition: 1, Err: "disk"}},
		Proposals:        map[string]uint64{"ok": 10, "lost": 1},
		MessagesSent:     100,
		Dropped:          map[string]uint64{"queue_full": 2},
		InboxDropped:     1,
		Malformed:        0,
		MessagesReceived: 50,
		CommandsSkipped:  map[string]uint64{"controller": 1},
		StoppedNow:       map[string]int{"disk_full": 2, "damaged": 0, "other": 0},
		ReplicasReopened: 3,
	}
	updateClusterMetrics(m, engine.ClusterStatus{}, st1)
	st2 := st1
	st2.Proposals = map[string]uint64{"ok": 25, "lost": 1}
	st2.MessagesSent = 130
	st2.CommandsSkipped = map[string]uint64{"controller": 3, "coordinator": 2}
	st2.ConfChangesSkipped = 1
	st2.StoppedNow = map[string]int{"disk_full": 0, "damaged": 1, "other": 0}
	st2.ReplicasReopened = 5
	st2.Replicas = []engine.ReplicaStatus{{Topic: "orders", Partition: 0, StartOffset: 90, CommittedEnd: 120}, {Topic: "orders", Partition: 1}}
	updateClusterMetrics(m, st1, st2)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"cluster_nodes", testutil.ToFloat64(m.ClusterNodes.WithLabelValues()), 3},
		{"peer 2 up", testutil.ToFloat64(m.ClusterPeerUp.WithLabelValues("2")), 1},
		{"peer 3 up", testutil.ToFloat64(m.ClusterPeerUp.WithLabelValues("3")), 0},
		{"leader orders/0 (lost leadership)", testutil.ToFloat64(m.PartitionLeader.WithLabelValues("orders", "0")), 0},
		{"log records orders/0 (compacted)", testutil.ToFloat64(m.ReplicaLogRecords.WithLabelValues("orders", "0")), 30},
		{"stopped orders/1 (restarted)", testutil.ToFloat64(m.ReplicaStopped.WithLabelValues("orders", "1")), 0},
		{"proposals ok", testutil.ToFloat64(m.RaftProposals.WithLabelValues("ok")), 25},
		{"proposals lost", testutil.ToFloat64(m.RaftProposals.WithLabelValues("lost")), 1},
		{"messages sent", testutil.ToFloat64(m.RaftMessages.WithLabelValues("sent")), 130},
		{"dropped queue_full", testutil.ToFloat64(m.RaftMessagesDropped.WithLabelValues("queue_full")), 2},
		{"dropped inbox_full", testutil.ToFloat64(m.RaftMessagesDropped.WithLabelValues("inbox_full")), 1},
		{"controller commands skipped", testutil.ToFloat64(m.CommandsSkipped.WithLabelValues("controller")), 3},
		{"coordinator commands skipped", testutil.ToFloat64(m.CommandsSkipped.WithLabelValues("coordinator")), 2},
		{"conf changes skipped", testutil.ToFloat64(m.ConfChangesSkipped.WithLabelValues()), 1},
		{"replicas stopped, disk_full (space returned)", testutil.ToFloat64(m.ReplicasStopped.WithLabelValues("disk_full")), 0},
		{"replicas stopped, damaged", testutil.ToFloat64(m.ReplicasStopped.WithLabelValues("damaged")), 1},
		{"replicas reopened", testutil.ToFloat64(m.ReplicasReopened.WithLabelValues()), 5},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// /readyz names each stopped replica of the node, why, and what the node
// does meanwhile; replicas not in the list (the controller's, one being
// reopened) are counted in one more line; a running replica adds nothing.
func TestStoppedDetail(t *testing.T) {
	st := engine.ClusterStatus{
		Replicas: []engine.ReplicaStatus{
			{Topic: "orders", Partition: 0},
			{Topic: "orders", Partition: 1, Err: "raft replica stopped: no space left on device", StopReason: engine.StopDiskFull},
			{Topic: "orders", Partition: 2, Err: "raft replica stopped: corruption", StopReason: engine.StopDamaged},
		},
		StoppedNow: map[string]int{engine.StopDiskFull: 2, engine.StopDamaged: 1, engine.StopOther: 0},
	}
	got := stoppedDetail(st)
	if len(got) != 3 {
		t.Fatalf("stoppedDetail: %q, want 3 lines", got)
	}
	for i, want := range [][]string{
		{"replica orders/1 stopped (disk_full)", "once space returns it catches up by itself", "publishes to the partition's leader and reads from its other replicas", "no space left"},
		{"replica orders/2 stopped (damaged)", "a new copy is built from its other replicas"},
		{"3 replicas of this node stopped, 1 of them the controller's or being reopened"},
	} {
		for _, w := range want {
			if !strings.Contains(got[i], w) {
				t.Errorf("line %d %q lacks %q", i, got[i], w)
			}
		}
	}
	if got := stoppedDetail(engine.ClusterStatus{Replicas: st.Replicas[:1], StoppedNow: map[string]int{}}); len(got) != 0 {
		t.Fatalf("running replicas: %q, want no line", got)
	}
}
