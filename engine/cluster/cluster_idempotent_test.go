package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// quorumlessLeader sets up a 3-node cluster with topic "orders" (one
// partition) committed on every replica, then stops both followers of the
// partition: the leader it returns still leads for an election timeout.
func quorumlessLeader(t *testing.T) (*testCluster, *clusterNode, *partition) {
	t.Helper()
	tc := newAcksCluster(t)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "first"); return err })
	var leader *clusterNode
	awaitCond(t, 30*time.Second, "a leader with both followers caught up", func() error {
		if leader = tc.leaderOf("orders", 0); leader == nil {
			return errors.New("no leader")
		}
		for _, cn := range tc.nodes {
			if _, end, err := cn.n.Offsets("orders", 0); err != nil || end != 1 {
				return fmt.Errorf("node at %s: committed end %d (%v)", cn.addr, end, err)
			}
		}
		return nil
	})
	for _, cn := range tc.nodes {
		if cn != leader {
			tc.stop(cn)
		}
	}
	part, err := leader.n.partition("orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	return tc, leader, part
}

// countValues counts the committed records of orders/0 on n by value.
func countValues(n *Node) (map[string]int, error) {
	recs, err := readAll(n, "orders", 0)
	if err != nil {
		return nil, err
	}
	got := map[string]int{}
	for _, r := range recs {
		got[string(r.Value)]++
	}
	return got, nil
}

// A producer batch whose first copy's request ends (its caller cancelled,
// its connection broke) while the proposal is still uncommitted, and which
// is then sent again, is stored once; so is a delayed copy of a batch that
// arrives after the producer's next batch, while neither is committed.
// The leader's followers are stopped (it keeps leading for an election
// timeout, nothing commits), then one is restarted and everything commits.
func TestClusterResendAfterCancelledRequestStoredOnce(t *testing.T) {
	tc, leader, part := quorumlessLeader(t)
	svc := &nodeService{c: leader.n.asMember()}
	req := func(seq int32, v string) *clusterv1.ProduceRequest {
		data := log.EncodeRecords(nil, log.BatchHeader{ProducerID: 91, BaseSequence: seq}, []log.Record{{ID: []byte(v), Value: []byte(v)}}, time.Now().UnixMilli())
		return &clusterv1.ProduceRequest{ClusterId: leader.n.id.ClusterID, Topic: "orders", Partition: 0, Group: part.X.raftGroup, Records: data}
	}
	// Batch 5's first request is cancelled after 100 ms (the caller's
	// connection broke); the forwarder sends it again 50 ms later.
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	resp, err := svc.Produce(cctx, req(5, "five"))
	cancel()
	if err != nil || resp.GetError() != clusterv1.ProduceError_PRODUCE_ERROR_OUTCOME_UNKNOWN {
		t.Fatalf("the cancelled request: %v, %v; want OUTCOME_UNKNOWN (nothing commits without a quorum)", resp, err)
	}
	ctx, cancelAll := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelAll()
	answers := make(chan string, 3)
	send := func(r *clusterv1.ProduceRequest, what string) {
		resp, err := svc.Produce(ctx, r)
		answers <- fmt.Sprintf("%s: %v %v", what, resp, err)
	}
	time.Sleep(50 * time.Millisecond) // sleep-ok: the resend comes later, as the forwarder's would
	go send(req(5, "five"), "batch 5 resent")
	// Batch 6, then a delayed copy of batch 5 (sent before 6 and held up
	// on the way), while neither 5 nor 6 is committed.
	go send(req(6, "six"), "batch 6")
	awaitCond(t, 5*time.Second, "batch 6 in the leader's log", func() error { return logged(part, 91, 6) })
	go send(req(5, "five"), "a delayed copy of batch 5")
	if st, _ := leader.n.asMember().host.Status(part.X.raftGroup); !st.IsLeader {
		t.Fatal("the leader stepped down within less than an election timeout: the test's window assumption failed")
	}
	for _, cn := range tc.nodes {
		if cn.n == nil {
			tc.start(cn)
			break
		}
	}
	for range 3 {
		t.Log(<-answers)
	}
	awaitCond(t, 30*time.Second, "every batch committed", func() error {
		got, err := countValues(leader.n)
		if err != nil {
			return err
		}
		if got["five"] == 0 || got["six"] == 0 {
			return fmt.Errorf("committed: %v", got)
		}
		return nil
	})
	got, err := countValues(leader.n)
	if err != nil {
		t.Fatal(err)
	}
	if got["five"] != 1 || got["six"] != 1 {
		t.Fatalf("stored %d copies of batch 5 and %d of batch 6, want one each", got["five"], got["six"])
	}
}

// logged reports (as an error) whether part's log does not hold producer
// id's batch seq.
func logged(part *partition, id int64, seq int32) error {
	ents, err := part.Log.Entries(part.Log.FirstIndex(), part.Log.LastIndex()+1, 64<<20)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if pid, _, s, ok := log.RecordsProducer(e.Data); ok && pid == id && s == seq {
			return nil
		}
	}
	return fmt.Errorf("producer %d's batch %d is not in the log", id, seq)
}

// A publish whose caller has gone is not appended later. Three nodes; the
// partition's leader L stands still (paused, as by SIGSTOP). Through a
// follower F: a publish X (a long deadline), forwarded to L, where it
// hangs; then A with a 50 ms deadline, which ends while X still hangs (X
// moves to the new leader once F knows one, at least an election timeout
// after the pause: TestClusterForwardMovesToTheNewLeader). F becomes the
// leader; the app publishes A again, then B and C, each acknowledged.
// Whenever X's forward ends, the first A must not be appended after C: the
// log holds A once, before B.
func TestClusterPublishOfAGoneCallerNotAppendedLater(t *testing.T) {
	tc, leader, f := caughtUpTrio(t)
	part, _ := f.n.partition("orders", 0)
	gate := &leader.n.asMember().gate
	gate.pause()
	defer gate.resume()

	x := produceAsync(f.n, "orders", 0, "X", engine.ProduceOptions{})
	awaitCond(t, 5*time.Second, "X's forward held at the paused leader", func() error {
		if gate.held.Load() == 0 {
			return errors.New("nothing held yet")
		}
		return nil
	})
	actx, acancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer acancel()
	a := produceAsync(f.n, "orders", 0, "A", engine.ProduceOptions{Context: actx})
	<-actx.Done() // the app's call ends: DeadlineExceeded
	firstA := <-a
	if firstA.err == nil {
		t.Fatalf("the first A was acknowledged (offset %d) within its 50 ms: the scenario needs it to fail", firstA.base)
	}

	// F leads (the other follower, if it won the election, hands over).
	awaitCond(t, 20*time.Second, "F leads", func() error {
		switch nl := tc.leaderOf("orders", 0); {
		case nl == f:
			return nil
		case nl != nil && nl != leader:
			_ = nl.n.asMember().host.TransferLeadership(part.X.raftGroup, f.n.id.NodeID)
		}
		return errors.New("not yet")
	})
	acked := map[string]int64{}
	for _, v := range []string{"A", "B", "C"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r := <-produceAsync(f.n, "orders", 0, v, engine.ProduceOptions{Context: ctx})
		cancel()
		if r.err != nil {
			t.Fatalf("publish %s (the app's retry for A): %v", v, r.err)
		}
		acked[v] = r.base
	}
	t.Logf("acknowledged %v; X: %v; the first A failed: %v", acked, <-x, firstA.err)
	gate.resume()
	awaitCond(t, 30*time.Second, "every replica at the same committed end", func() error {
		var ends []int64
		for _, cn := range tc.nodes {
			_, end, err := cn.n.Offsets("orders", 0)
			if err != nil {
				return err
			}
			ends = append(ends, end)
		}
		if ends[0] != ends[1] || ends[1] != ends[2] || ends[0] <= acked["C"] {
			return fmt.Errorf("committed ends %v", ends)
		}
		return nil
	})
	for _, cn := range tc.nodes {
		recs, err := readAll(cn.n, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		var log []string
		for _, r := range recs {
			log = append(log, string(r.Value))
		}
		n := 0
		for i, v := range log {
			if v == "A" {
				n++
				if int64(i) != acked["A"] {
					t.Errorf("node at %s: A at offset %d, acknowledged at %d: the log is %v", cn.addr, i, acked["A"], log)
				}
			}
		}
		if n != 1 {
			t.Errorf("node at %s: A stored %d times: the log is %v", cn.addr, n, log)
		}
	}
}

// A leader proposes no producer batch whose request has already ended
// when it gets to it (its sender gave up: a paused node's held request, a
// deadline that passed on the way): nothing is stored, and the answer says
// nothing was done.
func TestClusterLeaderRefusesAnEndedRequest(t *testing.T) {
	tc := newTestCluster(t, 3)
	if err := tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "a first publish", func() error { _, err := produce(tc.nodes[0].n, "orders", 0, "first"); return err })
	var leader *clusterNode
	awaitCond(t, 30*time.Second, "a leader caught up", func() error {
		if leader = tc.leaderOf("orders", 0); leader == nil {
			return errors.New("no leader")
		}
		part, _ := leader.n.partition("orders", 0)
		if st, _ := leader.n.asMember().host.Status(part.X.raftGroup); !leaderCaughtUp(part, st) {
			return errors.New("not caught up")
		}
		return nil
	})
	part, _ := leader.n.partition("orders", 0)
	data := log.EncodeRecords(nil, log.BatchHeader{ProducerID: 93, BaseSequence: 0}, []log.Record{{Value: []byte("late")}}, time.Now().UnixMilli())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resp, err := (&nodeService{c: leader.n.asMember()}).Produce(ctx, &clusterv1.ProduceRequest{ClusterId: leader.n.id.ClusterID, Topic: "orders", Partition: 0, Group: part.X.raftGroup, Records: data})
	if err != nil || resp.GetError() != clusterv1.ProduceError_PRODUCE_ERROR_LOST {
		t.Fatalf("an ended request: %v, %v; want PRODUCE_ERROR_LOST (nothing done)", resp, err)
	}
	if _, err := produce(leader.n, "orders", 0, "after"); err != nil {
		t.Fatal(err)
	}
	got, err := countValues(leader.n)
	if err != nil {
		t.Fatal(err)
	}
	if got["late"] != 0 {
		t.Fatalf("the ended request's batch was stored: %v", got)
	}
}
