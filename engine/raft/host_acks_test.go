package raft

import (
	"errors"
	"slices"
	"testing"
	"time"

	slog "github.com/spoolmq/spool/engine/log"
)

// proposeWith proposes one record with value v to g through n and returns
// where its outcome lands (read under c.mu).
func (c *hcluster) proposeWith(n *hostNode, g uint64, v string, opts ProposeOptions) *hprop {
	p := &hprop{group: g, node: n.id, value: v}
	c.mu.Lock()
	c.props[v] = p
	c.mu.Unlock()
	data := slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: []byte(v)}}, 1_700_000_000_000)
	n.host.ProposeWith(g, data, opts, func(res Proposed, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		p.calls++
		p.base, p.err = res.Base, err
	})
	return p
}

func (c *hcluster) outcome(p *hprop) hprop {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *p
}

// TestHostAcksLeader: with the leader cut off from both followers, within
// its CheckQuorum window, a proposal with AtLeaderDurable completes (its
// entry fsynced on the leader) at the offset after the committed records,
// while an acks=all proposal made next to it does not complete and its
// records stay invisible. Then the followers elect a new leader that
// commits another record at that offset: after healing, the acknowledged
// acks=leader record is on no replica — the loss acks=leader accepts
// (docs/semantics.md) — and the acks=all one is reported lost or unknown,
// never a success.
func TestHostAcksLeader(t *testing.T) {
	c := newHCluster(t, 11, 1, HostConfig{Workers: 2})
	defer c.close()
	if err := c.nodes[0].host.Campaign(1); err != nil {
		t.Fatal(err)
	}
	c.awaitLeaders(100)
	l := c.leader(1)
	first := c.proposeWith(l, 1, "first", ProposeOptions{AtLeaderDurable: true})
	c.awaitProposals(50)
	if o := c.outcome(first); o.err != nil || o.base != 0 {
		t.Fatalf("acks=leader with every replica up: %+v", o)
	}
	c.converge(50) // every replica has it committed

	var others []uint64
	for _, n := range c.nodes {
		if n != l {
			others = append(others, n.id)
		}
	}
	c.net.Partition([]uint64{l.id}, others)
	fast := c.proposeWith(l, 1, "fast", ProposeOptions{AtLeaderDurable: true})
	slow := c.proposeWith(l, 1, "slow", ProposeOptions{})
	for range 2 { // well inside the election timeout (DefaultElectionTicks rounds)
		c.round()
	}
	// The leader's fsync runs on the log's goroutine in real time, not in
	// rounds: on a loaded machine it can outlast them. Wait for it without
	// advancing virtual time (no election), up to 10 s.
	for deadline := time.Now().Add(10 * time.Second); c.outcome(fast).calls == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // sleep-ok: the log's fsync goroutine signals nothing the test can wait on
		c.idle()
	}
	if o := c.outcome(fast); o.calls != 1 || o.err != nil || o.base != 1 {
		t.Fatalf("acks=leader on a leader cut off from its followers: %+v", o)
	}
	if o := c.outcome(slow); o.calls != 0 {
		t.Fatalf("acks=all completed without a quorum: %+v", o)
	}
	if st, _ := l.host.Status(1); !st.IsLeader || st.CommittedEnd != 1 {
		t.Fatalf("old leader: %+v; want still leading, committed end 1 (the acks=leader record not visible)", st)
	}
	if got := l.partitions[1].DurableIndex(); got < l.partitions[1].LastIndex() {
		t.Fatalf("durable index %d below the last index %d", got, l.partitions[1].LastIndex())
	}

	// The followers elect among themselves and commit their own record.
	var nl *hostNode
	for range 100 {
		if n := c.leader(1); n != nil && n != l {
			nl = n
			break
		}
		c.round()
	}
	if nl == nil {
		t.Fatalf("the followers elected no leader")
	}
	other := c.proposeWith(nl, 1, "other", ProposeOptions{})
	for range 100 {
		if c.outcome(other).calls == 1 {
			break
		}
		c.round()
	}
	if o := c.outcome(other); o.err != nil || o.base != 1 {
		t.Fatalf("the new leader's record: %+v", o)
	}
	c.net.Heal()
	c.awaitProposals(300)
	c.converge(100)
	for _, n := range c.nodes {
		st, _ := n.host.Status(1)
		vals := readRecords(t, n.partitions[1], 0, st.CommittedEnd)
		if !slices.Equal(vals, []string{"first", "other"}) {
			t.Fatalf("node %d committed %q, want [first other]", n.id, vals)
		}
	}
	if o := c.outcome(slow); o.calls != 1 || !(errors.Is(o.err, ErrProposalLost) || errors.Is(o.err, ErrOutcomeUnknown)) {
		t.Fatalf("acks=all record replaced by the new leader's: %+v", o)
	}
	if o := c.outcome(fast); o.calls != 1 || o.err != nil {
		t.Fatalf("the acks=leader answer changed: %+v", o)
	}
}
