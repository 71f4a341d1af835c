package raft

import (
	"fmt"
	"testing"
	"time"

	slog "github.com/spoolmq/spool/engine/log"
)

// TestPublishTimesNeverDecrease: the record times along a partition's log
// never go back, whoever encoded a batch and whoever leads: a batch encoded
// 9.9 s before it reaches the leader (a sidecar that waited for a leader)
// after batches encoded since; a batch from a sidecar whose clock is 30 s
// ahead; a new leader whose clock is 30 s behind the old one's; a leader
// just restarted, proposed a batch encoded 20 s before. Every
// replica holds the same times, and none is ahead of the clock of the
// leader that proposed it. (Under faults, times went back up to ~9.9 s,
// hundreds of records per run, breaking seek-by-time and lag in seconds.)
func TestPublishTimesNeverDecrease(t *testing.T) {
	c := newHCluster(t, 7, 1, HostConfig{})
	defer c.close()
	c.awaitLeaders(100)
	now := func(n *hostNode) int64 { return n.host.now().UnixMilli() }
	var sent []int64 // the time each batch was encoded with, in order
	propose := func(n *hostNode, ts int64) {
		t.Helper()
		sent = append(sent, ts)
		v := fmt.Sprintf("v%d", len(sent))
		data := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: []byte(v + "a")}, {Value: []byte(v + "b")}}, ts)
		done := make(chan error, 1)
		n.host.Propose(1, data, func(_ int64, err error) { done <- err })
		for range 200 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("propose %s: %v", v, err)
				}
				return
			default:
				c.round()
			}
		}
		t.Fatalf("propose %s: not done after 200 rounds", v)
	}
	l := c.leader(1)
	propose(l, now(l))
	c.round()
	propose(l, now(l))
	propose(l, now(l)-9_900)  // encoded 9.9 s ago
	propose(l, now(l)+30_000) // from a clock 30 s ahead
	propose(l, now(l))        // and on
	before := now(l)
	// The leader's clock was 30 s ahead of the others': it stops, one of
	// them leads.
	for _, n := range c.nodes {
		if n != l {
			n.skew.Store(int64(-30 * time.Second))
		}
	}
	c.stop(l, false)
	c.awaitLeaders(200)
	l2 := c.leader(1)
	if now(l2) >= before {
		t.Fatalf("the new leader's clock %d is not behind the old one's %d", now(l2), before)
	}
	propose(l2, now(l2))
	propose(l2, now(l2))
	c.start(l)
	c.converge(300)
	// Every node restarts (the floor is read back from the log), and the
	// leader is proposed a batch encoded 20 s ago.
	for _, n := range c.nodes {
		c.stop(n, false)
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	c.awaitLeaders(200)
	l3 := c.leader(1)
	propose(l3, now(l3)-20_000)
	c.converge(300)

	var want []int64
	for _, n := range c.nodes {
		p := n.partitions[1]
		recs, err := p.Read(p.StartOffset(), 1<<20, p.NextOffset(), nil)
		if err != nil {
			t.Fatalf("node %d: read: %v", n.id, err)
		}
		if len(recs) != 2*len(sent) {
			t.Fatalf("node %d: %d records, want %d", n.id, len(recs), 2*len(sent))
		}
		var got []int64
		for i, r := range recs {
			got = append(got, r.Timestamp)
			if i > 0 && r.Timestamp < recs[i-1].Timestamp {
				t.Errorf("node %d: offset %d has time %d, before offset %d's %d (batches encoded at %v)", n.id, r.Offset, r.Timestamp, recs[i-1].Offset, recs[i-1].Timestamp, sent)
			}
		}
		if i := 3*2 + 1; got[i] > before {
			t.Errorf("node %d: the batch encoded 30 s ahead holds time %d, past its leader's clock %d", n.id, got[i], before)
		}
		if want == nil {
			want = got
		} else if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("node %d: times %v, node 1 holds %v", n.id, got, want)
		}
	}
}
