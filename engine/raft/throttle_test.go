package raft

import (
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/transport"
)

// The bucket lets through at most its burst plus rate × elapsed (plus the
// one message that takes it below zero), in order, and holds the rest.
func TestThrottleRate(t *testing.T) {
	th := newThrottle(10_000) // 10 kB/s, burst 1 kB
	msg := func(n int) transport.Message {
		return transport.Message{Msg: raftpb.Message{Type: raftpb.MsgApp, Entries: []raftpb.Entry{{Data: make([]byte, n)}}}}
	}
	start := time.Unix(100, 0)
	var batch []transport.Message
	for i := range 100 {
		m := msg(500)
		m.Msg.Index = uint64(i)
		batch = append(batch, m)
	}
	sent := th.admit(start, batch)
	var order []uint64
	for _, m := range sent {
		order = append(order, m.Msg.Index)
	}
	for step := 1; step <= 20; step++ {
		now := start.Add(time.Duration(step) * 100 * time.Millisecond)
		for _, m := range th.release(now) {
			order = append(order, m.Msg.Index)
		}
		// At most burst + rate×elapsed + one message of 500 bytes.
		if limit := 1000 + 10_000*float64(step)/10 + 500; float64(len(order)*500) > limit {
			t.Fatalf("after %d ms: %d bytes let through, more than %v", step*100, len(order)*500, limit)
		}
	}
	if len(order) < 40 {
		t.Fatalf("2 s at 10 kB/s let through %d messages of 500 bytes, want about 42", len(order))
	}
	if !slices.IsSorted(order) {
		t.Fatalf("messages let through out of order: %v", order)
	}
	if delayed, waiting := th.stats(); delayed == 0 || waiting != (100-len(order))*500 {
		t.Fatalf("stats: %d delayed, %d bytes waiting; want some delayed and %d waiting", delayed, waiting, (100-len(order))*500)
	}
}

// A replica move through the Host copies the log to the new learner at
// no more than CatchUpBytesPerSecond (in the hosts' virtual time), while
// the group's own appends to its voters are not held up: a proposal made
// during the copy commits at once.
func TestHostCatchUpPaced(t *testing.T) {
	const rate = 64 << 10
	c := newHCluster(t, 1, 1, HostConfig{Workers: 2, CatchUpBytesPerSecond: rate})
	defer c.close()
	c.awaitLeaders(100)
	l := c.leader(1)
	payload := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: make([]byte, 1024)}}, 1_700_000_000_000)
	const records = 200
	for i := range records {
		l.host.Propose(1, payload, func(int64, error) {})
		if i%20 == 0 {
			c.round()
		}
	}
	c.converge(100)

	n4 := &hostNode{id: 4, fs: slog.NewMemFS()}
	c.nodes = append(c.nodes, n4)
	c.start(n4)
	for _, n := range c.nodes[:3] {
		if err := n.ep.AddPeer(4, ""); err != nil {
			t.Fatal(err)
		}
		if err := n4.ep.AddPeer(n.id, ""); err != nil {
			t.Fatal(err)
		}
	}
	target := []uint64{l.id, 4}
	for _, n := range c.nodes[:3] {
		if n != l {
			target = append(target, n.id)
			break
		}
	}
	start := c.net.Now()
	var during *hprop
	done := false
	for round := 0; round < 2000 && !done; round++ {
		if err := l.host.Reconfigure(1, target); err != nil {
			t.Fatal(err)
		}
		c.round()
		st, _ := l.host.Status(1)
		if during == nil && slices.Contains(st.Learners, 4) {
			c.propose(l, 1) // while node 4 copies
			for _, p := range c.props {
				during = p
			}
			for range 5 {
				c.round()
			}
			c.mu.Lock()
			calls, err := during.calls, during.err
			c.mu.Unlock()
			if calls != 1 || err != nil {
				t.Fatalf("a proposal during the copy: %d answers (%v) after 5 rounds, want committed", calls, err)
			}
		}
		done = !st.Joint && len(st.Learners) == 0 && sameIDs(st.Voters, target)
	}
	if !done {
		st, _ := l.host.Status(1)
		t.Fatalf("the move did not finish: %+v", st)
	}
	took := c.net.Now() - start
	// What was copied: every record entry at least (the whole log: node 4
	// has only the bootstrap entries), less the bucket's burst.
	min := time.Duration(float64(records*len(payload)-rate/10) / rate * float64(time.Second))
	if took < min {
		t.Fatalf("the copy of %d bytes took %v of host time, less than %v at %d bytes/s", records*len(payload), took, min, rate)
	}
	if st := l.host.Stats(); st.CatchUpDelayed == 0 || st.CatchUpWaitingBytes != 0 {
		t.Fatalf("stats %+v: want appends delayed, none waiting at the end", st)
	}
	t.Logf("copied %d KiB in %v of host time (%d KiB/s paced)", records*len(payload)>>10, took, rate>>10)
}

func sameIDs(a, b []uint64) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
