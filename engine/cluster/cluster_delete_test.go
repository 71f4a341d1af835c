package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/meta"
)

// partitionFiles says which files of a topic's partitions a node has: the
// partition logs and the raft group directories, by group.
func partitionFiles(cn *clusterNode, topic string, groups []uint64) []string {
	var out []string
	for i, g := range groups {
		for _, dir := range []string{
			filepath.Join(cn.dir, "log", engine.PartitionName(topic, int32(i))),
			filepath.Join(cn.dir, "raft", strconv.FormatUint(g, 10)),
		} {
			if _, err := os.Stat(dir); err == nil {
				out = append(out, dir)
			}
		}
	}
	return out
}

// Deleting a topic on a cluster: refused while a group's member subscribes
// to it and for the internal topic; then, with one node stopped, deleted on
// the others (files gone, watchers signalled, ErrUnknownTopic after); the
// group's positions on it are forgotten; the stopped node deletes its copy
// when it starts again; the name created again (with another partition
// count) starts empty, with new groups and no positions, and a restart
// replaying the old deletion leaves the new data alone.
func TestClusterDeleteTopic(t *testing.T) {
	tc := newTestCluster(t, 3)
	n1 := tc.nodes[0].n
	ctx := context.Background()
	if err := n1.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	// The topic is placed once the third node has joined.
	for p := range int32(2) {
		awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(n1, "orders", p, fmt.Sprintf("m%d-first", p)); return err })
		for i := range 10 {
			if _, err := produce(n1, "orders", p, fmt.Sprintf("m%d-%d", p, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	topic, _ := controllerState(n1).Topic("orders")
	var groups []uint64
	for _, p := range topic.Partitions {
		groups = append(groups, p.Group)
	}
	awaitCond(t, 30*time.Second, "every node holding both partitions' files", func() error {
		for i, cn := range tc.nodes {
			if f := partitionFiles(cn, "orders", groups); len(f) != 4 {
				return fmt.Errorf("node %d has %v", i, f)
			}
		}
		return nil
	})

	// A group with positions on the topic, and a member subscribing to it.
	awaitCoordinators(t, tc.nodes, "billing")
	if _, err := n1.Coordinate(ctx, coord.Command{Group: "billing", Reset: &coord.ResetPositions{Topic: "orders", Next: []coord.PartitionNext{{Partition: 0, Next: 7}, {Partition: 1, Next: 3}}}}); err != nil {
		t.Fatal(err)
	}
	m := &testMember{group: "audit", id: "m1", session: "s1", via: tc.nodes[1]}
	if _, err := m.join(t, coord.Topic{Name: "orders", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	if err := n1.DeleteTopic("orders"); !errors.Is(err, engine.ErrTopicInUse) {
		t.Fatalf("delete a topic a member subscribes to: %v, want ErrTopicInUse", err)
	}
	if err := n1.DeleteTopic(meta.GroupsTopic); !errors.Is(err, engine.ErrDeleteUnsupported) {
		t.Fatalf("delete the internal topic: %v, want ErrDeleteUnsupported", err)
	}
	if err := n1.DeleteTopic("nope"); !errors.Is(err, engine.ErrUnknownTopic) {
		t.Fatalf("delete an unknown topic: %v, want ErrUnknownTopic", err)
	}
	if _, err := tc.nodes[1].n.Coordinate(ctx, coord.Command{Group: "audit", Leave: &coord.Leave{Member: "m1", Session: "s1"}}); err != nil {
		t.Fatal(err)
	}

	// Node 3 stops; the topic is deleted through node 2 while a watcher on
	// node 1 waits.
	down := tc.nodes[2]
	tc.stop(down)
	wake := make(chan struct{}, 1)
	unwatch, err := n1.Watch([]string{"orders"}, wake)
	if err != nil {
		t.Fatal(err)
	}
	defer unwatch()
	for len(wake) > 0 {
		<-wake
	}
	if err := tc.nodes[1].n.DeleteTopic("orders"); err != nil {
		t.Fatalf("delete topic orders: %v", err)
	}
	awaitCond(t, 20*time.Second, "the topic gone from nodes 1 and 2, with its files", func() error {
		for i, cn := range tc.nodes[:2] {
			if _, _, err := cn.n.Offsets("orders", 0); !errors.Is(err, engine.ErrUnknownTopic) {
				return fmt.Errorf("node %d: Offsets: %v", i, err)
			}
			if f := partitionFiles(cn, "orders", groups); len(f) > 0 {
				return fmt.Errorf("node %d still has %v", i, f)
			}
		}
		return nil
	})
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("a watcher of the deleted topic was not signalled")
	}
	s, err := n1.DescribeGroup(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Position("billing", "orders", 0); ok {
		t.Fatalf("group billing keeps a position on the deleted topic: %+v", s.LagInputs("billing"))
	}
	if f := partitionFiles(down, "orders", groups); len(f) != 4 {
		t.Fatalf("the stopped node's files: %v, want its 4 untouched", f)
	}

	// The stopped node deletes its copy when it starts again.
	tc.start(down)
	awaitCond(t, 30*time.Second, "the restarted node deleting the deleted topic's files", func() error {
		if f := partitionFiles(down, "orders", groups); len(f) > 0 {
			return fmt.Errorf("node 3 still has %v", f)
		}
		return nil
	})

	// The name again, with 3 partitions: empty, new groups, no positions.
	if err := n1.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 3}); err != nil {
		t.Fatalf("create orders again: %v", err)
	}
	again, _ := controllerState(n1).Topic("orders")
	for _, p := range again.Partitions {
		for _, old := range groups {
			if p.Group <= old {
				t.Fatalf("orders created again got group %d, not above the deleted ones %v", p.Group, groups)
			}
		}
	}
	awaitCond(t, 30*time.Second, "orders empty on every node", func() error {
		for i, cn := range tc.nodes {
			for p := range int32(3) {
				start, end, err := cn.n.Offsets("orders", p)
				if err != nil || start != 0 || end != 0 {
					return fmt.Errorf("node %d partition %d: %d..%d, %v", i, p, start, end, err)
				}
			}
		}
		return nil
	})
	// A restart replays the old deletion: it must not touch the new data.
	off, err := produce(n1, "orders", 0, "new")
	if err != nil {
		t.Fatal(err)
	}
	tc.stop(tc.nodes[1])
	tc.start(tc.nodes[1])
	awaitCond(t, 30*time.Second, "node 2, restarted, serving the new record from its replica", func() error {
		recs, err := localRecords(tc.nodes[1].n, "orders", 0)
		if err != nil {
			return err
		}
		if len(recs) != 1 || recs[0].Offset != off || string(recs[0].Value) != "new" {
			s1, e1, _ := tc.nodes[1].n.Offsets("orders", 0)
			s0, e0, _ := n1.Offsets("orders", 0)
			st, _ := tc.nodes[1].n.asMember().host.Status(again.Partitions[0].Group)
			return fmt.Errorf("records %+v, want the one published at %d (node2 %d..%d node1 %d..%d, status %+v)", recs, off, s1, e1, s0, e0, st)
		}
		return nil
	})
	if _, err := m.join(t, coord.Topic{Name: "orders", Partitions: 3}); err != nil {
		t.Fatalf("a member joining with the new partition count: %v", err)
	}
	if s, err = n1.DescribeGroup(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	if ps := s.LagInputs("billing"); len(ps) > 0 {
		t.Fatalf("group billing has positions on the topic created again: %+v", ps)
	}
}
