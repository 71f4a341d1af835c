package raft

import "testing"

// TestHostRetentionAndSnapshot: through the Host, SetRetention makes the
// leader give up the same prefix of the group on every node; a node
// stopped meanwhile restarts behind the leader's log start, receives a
// snapshot through HandleSnapshot (the transport twin's snapshot path),
// installs it and catches up. Every acknowledged record from the common
// log start on is at its offset on every node.
func TestHostRetentionAndSnapshot(t *testing.T) {
	c := newHCluster(t, 11, 2, HostConfig{Workers: 2})
	c.opts.SegmentBytes = 1 << 10
	c.tweak = func(rc *ReplicaConfig) { rc.RetentionCheckTicks = 3 }
	for _, n := range c.nodes {
		c.stop(n, false)
		c.start(n)
	}
	defer c.close()
	if err := c.nodes[0].host.Campaign(1); err != nil {
		t.Fatal(err)
	}
	c.awaitLeaders(100)
	l := c.leader(1)
	for _, n := range c.nodes {
		if err := n.host.SetRetention(1, 0, 3<<10); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.host.SetRetention(1, -1, 0); err == nil {
		t.Fatal("SetRetention took a negative age")
	}
	if err := l.host.SetRetention(99, 0, 1); err == nil {
		t.Fatal("SetRetention took an unknown group")
	}
	down := c.nodes[1]
	if down == l {
		down = c.nodes[2]
	}
	c.stop(down, false)
	downLast := down.partitions[1].LastIndex()
	for i := 0; l.partitions[1].FirstIndex() <= downLast+1 || i < 50; i++ {
		if i > 3000 {
			t.Fatalf("the leader's log still starts at %d", l.partitions[1].FirstIndex())
		}
		c.propose(l, 1)
		if i%4 == 0 {
			c.round()
		}
	}
	c.awaitProposals(100)
	before := down.ep.Stats().SnapshotsReceived
	c.start(down)
	if err := down.host.SetRetention(1, 0, 3<<10); err != nil {
		t.Fatal(err)
	}
	c.converge(300)
	for range 10 {
		c.round()
	}
	c.converge(100)
	if down.ep.Stats().SnapshotsReceived == before {
		t.Fatal("the restarted node caught up without a snapshot")
	}
	t.Logf("snapshots received %d, leader first %d, down last was %d, down snap %d", down.ep.Stats().SnapshotsReceived, l.partitions[1].FirstIndex(), downLast, down.host.group(1).r.Snapshot().Index)
	start := l.partitions[1].StartOffset()
	if start == 0 {
		t.Fatal("retention gave up nothing")
	}
	byOffset := map[int64]string{}
	c.mu.Lock()
	for _, p := range c.props {
		if p.calls != 1 || p.err != nil {
			c.mu.Unlock()
			t.Fatalf("%s: done called %d times, err %v", p.value, p.calls, p.err)
		}
		if p.group == 1 {
			byOffset[p.base] = p.value
		}
	}
	c.mu.Unlock()
	for _, n := range c.nodes {
		p := n.partitions[1]
		if p.StartOffset() != start {
			t.Fatalf("node %d starts at offset %d, the leader at %d", n.id, p.StartOffset(), start)
		}
		st, _ := n.host.Status(1)
		vals := readRecords(t, p, start, st.CommittedEnd)
		for i, v := range vals {
			if want, ok := byOffset[start+int64(i)]; !ok || want != v {
				t.Fatalf("node %d offset %d holds %q, acknowledged there: %q", n.id, start+int64(i), v, want)
			}
		}
		if int(st.CommittedEnd) != len(byOffset) {
			t.Fatalf("node %d: committed end %d, %d records acknowledged", n.id, st.CommittedEnd, len(byOffset))
		}
	}
}
