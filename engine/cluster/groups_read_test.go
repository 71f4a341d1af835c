package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
)

// TestClusterCoordinatorReadIsNotStale: a coordinator leader cut off from
// its peers (paused: it sends and takes no raft message, but its own
// sidecar still asks it) does not answer a read with a state that misses a
// command the others committed after the cut. Members poll their
// assignment and committed positions with such reads: a stale answer
// would show a member a partition already revoked, or a position gone
// back. Reads confirm the leadership with a quorum first (raft ReadIndex),
// then answer from a state applied up to the read's index. (Before, the
// cut-off leader answered hundreds to thousands of reads with the old
// position in the ~1 s before it stepped down.) Once it knows, the node
// reads through the new leader.
func TestClusterCoordinatorReadIsNotStale(t *testing.T) {
	tc := newTestCluster(t, 3)
	const group, topic, parts = "reads", "orders", int32(2)
	for _, cn := range tc.nodes {
		if err := cn.n.EnsureTopic(engine.TopicSpec{Name: topic, Partitions: parts}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCoordinators(t, tc.nodes, group)
	leader, part := coordLeader(t, tc.nodes, group)
	var live []*clusterNode
	for _, cn := range tc.nodes {
		if cn != leader {
			live = append(live, cn)
		}
	}
	m := &testMember{group: group, id: "a", session: "s1", via: live[0]}
	if _, err := m.join(t, coord.Topic{Name: topic, Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	s := settle(t, group, topic, parts, []*testMember{m})
	gen := s.Generation(group)
	commit := func(next int64) error {
		_, err := live[0].n.Coordinate(context.Background(), coord.Command{Group: group, Commit: &coord.Commit{Member: "a", Generation: gen,
			TopicPartition: coord.TopicPartition{Topic: topic, Partition: 0}, Position: coord.Position{Next: next}}})
		return err
	}
	if err := commit(50); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "the leader applied position 50", func() error {
		if p, _ := mustDescribe(t, leader, group).Position(group, topic, 0); p.Next != 50 {
			return fmt.Errorf("position %d", p.Next)
		}
		return nil
	})

	gate := &leader.n.asMember().gate
	gate.pause()
	defer gate.resume()
	// The cut-off leader's own sidecar asks it, over and over, until it
	// knows it no longer leads.
	type answer struct {
		at   time.Time
		next int64
	}
	answers := make(chan []answer, 1)
	go func() {
		var out []answer
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			if st, ok := leader.n.asMember().host.Status(part.X.raftGroup); !ok || !st.IsLeader {
				break
			}
			at := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			s, err := leader.n.DescribeGroup(ctx, group)
			cancel()
			if err == nil {
				p, _ := s.Position(group, topic, 0)
				out = append(out, answer{at, p.Next})
			}
		}
		answers <- out
	}()
	var next *clusterNode
	awaitCond(t, 20*time.Second, "another node leads the coordinator", func() error {
		for _, cn := range live {
			if st, ok := cn.n.asMember().host.Status(part.X.raftGroup); ok && st.IsLeader {
				next = cn
				return nil
			}
		}
		return errors.New("not yet")
	})
	_, err := next.n.Coordinate(context.Background(), coord.Command{Group: group, Commit: &coord.Commit{Member: "a", Generation: gen,
		TopicPartition: coord.TopicPartition{Topic: topic, Partition: 0}, Position: coord.Position{Next: 60}}})
	if err != nil {
		t.Fatalf("commit 60 at the new leader: %v", err)
	}
	committed := time.Now()
	got := <-answers
	if st, ok := leader.n.asMember().host.Status(part.X.raftGroup); ok && st.IsLeader {
		t.Fatalf("the cut-off node still says it leads after 20 s")
	}
	after, stale := 0, 0
	for _, a := range got {
		if a.at.After(committed) {
			after++
			if a.next < 60 {
				stale++
			}
		}
	}
	if stale > 0 {
		t.Fatalf("the cut-off leader answered %d of the %d reads asked after position 60 was committed elsewhere with an older position", stale, after)
	}
	t.Logf("the cut-off leader answered %d reads, %d of them asked after the commit elsewhere; none stale", len(got), after)
	// Having stepped down, the node reads through the new leader.
	awaitCond(t, 10*time.Second, "the cut-off node reads position 60 from the new leader", func() error {
		s, err := leader.n.DescribeGroup(context.Background(), group)
		if err != nil {
			return err
		}
		if p, _ := s.Position(group, topic, 0); p.Next != 60 {
			return fmt.Errorf("position %d", p.Next)
		}
		return nil
	})
}
