package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
)

// A storage-off node learns a watched partition's committed end from the
// members by waiting for it to move (FetchRequest.wait_past), not by
// asking every 200 ms: at idle it costs the members one call per partition
// per RemoteWaitMax, and a commit reaches its watchers as it happens.
// (Before: 5 calls per partition per second, from every storage-off
// sidecar, whether anything moved or not — 40 in this test's 2 s.)
func TestClusterStorageOffWaitsForTheEnd(t *testing.T) {
	tc := newTestCluster(t, 3)
	client := &clusterNode{dir: t.TempDir(), join: []string{tc.nodes[1].addr}, client: true}
	tc.nodes = append(tc.nodes, client)
	tc.start(client)
	if err := client.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	watch := make(chan struct{}, 1)
	cancel, err := client.n.Watch([]string{"orders"}, watch)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	awaitCond(t, 20*time.Second, "a publish through the storage-off node", func() error {
		_, err := produce(client.n, "orders", 1, "first")
		return err
	})
	awaitCond(t, 10*time.Second, "the first record's end seen by the storage-off node", func() error {
		if _, end, err := client.n.Offsets("orders", 1); err != nil || end != 1 {
			return fmt.Errorf("end %d, %v", end, err)
		}
		return nil
	})
	served := func() uint64 {
		var n uint64
		for _, cn := range tc.nodes[:3] {
			n += cn.n.asMember().endReadsServed.Load()
		}
		return n
	}
	before := served()
	time.Sleep(2 * time.Second) // sleep-ok: measuring what an idle storage-off node asks for over a span
	idle := served() - before
	t.Logf("end reads served to an idle storage-off node watching 4 partitions in 2 s: %d", idle)
	if idle > 8 {
		t.Fatalf("%d end reads served in 2 s of idle for 4 watched partitions: want at most 2 per partition (it waits for the end to move)", idle)
	}
	for len(watch) > 0 {
		<-watch
	}
	start := time.Now()
	if _, err := produce(tc.nodes[0].n, "orders", 2, "second"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("the storage-off node's watcher was not signalled of a commit on the members")
	}
	t.Logf("a commit on the members reached the storage-off node's watcher %v after the publish began", time.Since(start).Round(time.Millisecond))
}

// A storage-off node asks for the controller's state every second, saying
// which state it holds (MetadataRequest.known_state_sum): a member answers
// "unchanged" without the state when it is the same, so an idle cluster
// sends its storage-off sidecars no states; a change still reaches them
// within the interval. (Before: the whole state every second to each.)
func TestClusterStorageOffMetadataOnlyWhenChanged(t *testing.T) {
	tc := newTestCluster(t, 3)
	client := &clusterNode{dir: t.TempDir(), join: []string{tc.nodes[1].addr}, client: true}
	tc.nodes = append(tc.nodes, client)
	tc.start(client)
	if err := client.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	sent := func() uint64 {
		var n uint64
		for _, cn := range tc.nodes[:3] {
			n += cn.n.asMember().metadataStatesServed.Load()
		}
		return n
	}
	awaitCond(t, 10*time.Second, "the storage-off node's state settled", func() error {
		before := sent()
		time.Sleep(1500 * time.Millisecond) // sleep-ok: a span longer than the node's metadata interval
		if n := sent() - before; n > 0 {
			return fmt.Errorf("%d states sent in 1.5 s", n)
		}
		return nil
	})
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "invoices", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 5*time.Second, "the new topic known to the storage-off node", func() error {
		_, _, err := client.n.Offsets("invoices", 1)
		return err
	})
}
