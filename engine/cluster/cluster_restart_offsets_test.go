package cluster

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
)

// A restarted node that has read the cluster's controller log only up to a
// point where a topic was created but not yet placed (its saved commit
// index lags; it hears the leader later) does not report the topic's
// offsets as 0: it says they are not known yet. The fault suite saw a
// restarted node report 0 where it had reported 770 (chaos, membership,
// seed 2810 and 3103). Before the fix: 0 0 <nil>.
func TestClusterRestartedNodeOffsetsNotKnownYet(t *testing.T) {
	tc := newTestCluster(t, 2)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	x := tc.nodes[1]
	var before int64
	awaitCond(t, 30*time.Second, "node x knowing the topic, not placed yet", func() error {
		if _, err := x.n.Partitions("orders"); err != nil {
			return err
		}
		before = x.n.asMember().ctrlCommitted()
		return nil
	})
	third := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: []string{tc.nodes[0].addr}}
	tc.nodes = append(tc.nodes, third)
	tc.start(third)
	for i := range 3 {
		awaitCond(t, 30*time.Second, "a publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, fmt.Sprintf("v%d", i)); return err })
	}
	awaitCond(t, 30*time.Second, "node x reporting the end 3", func() error {
		if _, end, err := x.n.Offsets("orders", 0); err != nil || end != 3 {
			return fmt.Errorf("end %d (%v)", end, err)
		}
		return nil
	})
	tc.stop(x)
	x.hold = &atomic.Int64{}
	x.hold.Store(before) // the controller's log as it was before the placement
	tc.start(x)
	awaitCond(t, 30*time.Second, "node x knowing the topic again", func() error {
		_, err := x.n.Partitions("orders")
		return err
	})
	start, end, err := x.n.Offsets("orders", 0)
	if !errors.Is(err, engine.ErrOffsetsUnknown) {
		t.Fatalf("offsets of a partition whose placement node x has not read since its restart: %d-%d (%v), want engine.ErrOffsetsUnknown", start, end, err)
	}
	x.hold.Store(1 << 62)
	x.n.asMember().signalController()
	awaitCond(t, 30*time.Second, "node x reporting the end 3 again", func() error {
		if _, end, err := x.n.Offsets("orders", 0); err != nil || end != 3 {
			return fmt.Errorf("end %d (%v)", end, err)
		}
		return nil
	})
}
