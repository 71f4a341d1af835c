package raft

import (
	"errors"
	"testing"
)

// TestHostReadIndex: the leader confirms its leadership with a quorum and
// answers a read with an index at or past its commit index when asked and
// the data offset after it; a follower answers NotLeaderError; a leader cut
// off from its peers never confirms a read (it ends NotLeaderError once
// check-quorum steps it down, or lost at the proposal timeout), and a read
// on the majority side's new leader sees what was committed there.
func TestHostReadIndex(t *testing.T) {
	c := newHCluster(t, 11, 1, HostConfig{})
	defer c.close()
	c.awaitLeaders(100)
	l := c.leader(1)
	for range 5 {
		c.propose(l, 1)
	}
	c.awaitProposals(100)

	type answer struct {
		res Proposed
		err error
	}
	read := func(n *hostNode) answer {
		t.Helper()
		ch := make(chan answer, 1)
		n.host.ReadIndex(1, func(res Proposed, err error) { ch <- answer{res, err} })
		for range 400 {
			select {
			case a := <-ch:
				return a
			default:
				c.round()
			}
		}
		t.Fatalf("node %d: ReadIndex not answered in 400 rounds", n.id)
		return answer{}
	}
	st, _ := l.host.Status(1)
	a := read(l)
	if a.err != nil {
		t.Fatalf("read at the leader: %v", a.err)
	}
	if a.res.Index < st.CommitIndex {
		t.Fatalf("read index %d below the commit index %d when asked", a.res.Index, st.CommitIndex)
	}
	if end := l.partitions[1].NextOffset(); a.res.Base != end {
		t.Fatalf("read's offset %d, the log's end is %d (everything committed)", a.res.Base, end)
	}
	for _, n := range c.nodes {
		if n == l {
			continue
		}
		var nl *NotLeaderError
		if a := read(n); !errors.As(a.err, &nl) {
			t.Fatalf("read at follower %d: %v, want NotLeaderError", n.id, a.err)
		}
	}

	// Cut the leader off; the others elect and commit more.
	var others []uint64
	for _, n := range c.nodes {
		if n != l {
			others = append(others, n.id)
		}
	}
	c.net.Partition([]uint64{l.id}, others)
	ch := make(chan answer, 1)
	l.host.ReadIndex(1, func(res Proposed, err error) { ch <- answer{res, err} })
	var l2 *hostNode
	for range 400 {
		c.round()
		if n := c.leader(1); n != nil && n != l {
			l2 = n
			break
		}
	}
	if l2 == nil {
		t.Fatal("no new leader on the majority side")
	}
	before := l2.partitions[1].NextOffset()
	c.propose(l2, 1)
	for range 400 {
		if l2.partitions[1].NextOffset() > before {
			break
		}
		c.round()
	}
	var cut answer
	for i := 0; ; i++ {
		select {
		case cut = <-ch:
		default:
			if i == 1000 {
				t.Fatal("the cut-off leader's read never ended")
			}
			c.round()
			continue
		}
		break
	}
	if cut.err == nil {
		t.Fatalf("the cut-off leader confirmed a read (index %d) while another node led", cut.res.Index)
	}
	var nl *NotLeaderError
	if !errors.As(cut.err, &nl) && !errors.Is(cut.err, ErrProposalLost) {
		t.Fatalf("the cut-off leader's read ended with %v, want NotLeaderError or ErrProposalLost", cut.err)
	}
	a = read(l2)
	if a.err != nil || a.res.Base != l2.partitions[1].NextOffset() || a.res.Base <= before {
		t.Fatalf("read at the new leader: offset %d (log end %d, %d before its proposal), %v", a.res.Base, l2.partitions[1].NextOffset(), before, a.err)
	}
}
