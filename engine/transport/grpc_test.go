package transport

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/internal/testport"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// Three nodes on 127.0.0.1: every node's messages reach each peer in the
// order sent, group 0 included (its own lane), batches of many Send calls.
func TestGRPCDeliversInOrderPerPeer(t *testing.T) {
	nodes := cluster(t, 3, nil)
	const per = 500
	for i := range per {
		var batch []Message
		for _, from := range nodes {
			for _, to := range nodes {
				if from != to {
					batch = append(batch, app(uint64(i%3), from.id, to.id, uint64(i), "x"))
				}
			}
			from.t.Send(batch)
			batch = batch[:0]
		}
	}
	for _, to := range nodes {
		waitFor(t, "all messages", func() bool { return len(to.h.messages()) == 2*per })
		last := map[[2]uint64]int64{} // (from, group) → last index
		for _, m := range to.h.messages() {
			k := [2]uint64{m.Msg.From, m.Group}
			if prev, ok := last[k]; ok && int64(m.Msg.Index) <= prev {
				t.Fatalf("node %d: from %d group %d: index %d after %d", to.id, m.Msg.From, m.Group, m.Msg.Index, prev)
			}
			last[k] = int64(m.Msg.Index)
			if m.Msg.To != to.id || string(m.Msg.Entries[0].Data) != "x" {
				t.Fatalf("node %d got %+v", to.id, m.Msg)
			}
		}
	}
	for _, n := range nodes {
		if s := n.t.Stats(); s.DroppedQueueFull+s.Malformed+s.DroppedUnsent != 0 {
			t.Fatalf("node %d: %+v", n.id, s)
		}
	}
}

// The heartbeats of N groups sent in one Send travel in one frame, in the
// compact form, and arrive as ordinary raft heartbeats; a heartbeat with a
// read-index context travels as a full message.
func TestGRPCCoalescesHeartbeats(t *testing.T) {
	nodes := cluster(t, 2, nil)
	a, b := nodes[0], nodes[1]
	const groups = 1000
	var msgs []Message
	for g := uint64(1); g <= groups; g++ {
		msgs = append(msgs, heartbeat(g, a.id, b.id, 3, g))
	}
	withCtx := heartbeat(7, a.id, b.id, 3, 7)
	withCtx.Msg.Context = []byte("read-index")
	msgs = append(msgs, withCtx)
	sa0, sb0 := a.t.Stats(), b.t.Stats()
	a.t.Send(msgs)
	waitFor(t, "heartbeats", func() bool { return len(b.h.messages()) == groups+1 })
	sa, sb := a.t.Stats(), b.t.Stats()
	if d := sa.FramesSent - sa0.FramesSent; d != 1 {
		t.Fatalf("frames sent: %d, want 1", d)
	}
	if d := sb.FramesReceived - sb0.FramesReceived; d != 1 {
		t.Fatalf("frames received: %d, want 1", d)
	}
	if d := sa.HeartbeatsCoalesced - sa0.HeartbeatsCoalesced; d != groups {
		t.Fatalf("coalesced: %d, want %d", d, groups)
	}
	seen := map[uint64]bool{}
	for _, m := range b.h.messages() {
		if m.Msg.Type != raftpb.MsgHeartbeat || m.Msg.Term != 3 || m.Msg.From != a.id || m.Msg.To != b.id {
			t.Fatalf("got %+v", m)
		}
		if len(m.Msg.Context) > 0 {
			if string(m.Msg.Context) != "read-index" || m.Group != 7 {
				t.Fatalf("context heartbeat: %+v", m)
			}
			continue
		}
		if m.Msg.Commit != m.Group || seen[m.Group] {
			t.Fatalf("heartbeat %+v (seen %v)", m, seen[m.Group])
		}
		seen[m.Group] = true
	}
	if per := float64(sa.BytesSent-sa0.BytesSent) / groups; per > 16 {
		t.Fatalf("%.1f bytes per coalesced heartbeat, want ≤ 16", per)
	}
}

// A peer that restarts on the same address is reconnected to: the sender
// reports it unreachable, backs off, and delivers again once it is back.
func TestGRPCReconnectsAfterPeerRestart(t *testing.T) {
	a := startNode(t, 1, "127.0.0.1:0", nil)
	defer a.stop(t)
	b := startNode(t, 2, "127.0.0.1:0", nil)
	addr := b.addr
	if err := a.t.AddPeer(2, addr); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, a, 2)
	a.t.Send([]Message{app(1, 1, 2, 1, "before")})
	waitFor(t, "first message", func() bool { return len(b.h.messages()) == 1 })
	b.stop(t)
	waitFor(t, "unreachable reported", func() bool {
		a.h.mu.Lock()
		defer a.h.mu.Unlock()
		return a.h.unreachable[2] > 0
	})
	b2 := startNode(t, 2, addr, nil)
	defer b2.stop(t)
	waitConnected(t, a, 2)
	a.t.Send([]Message{app(1, 1, 2, 2, "after")})
	waitFor(t, "message after restart", func() bool { return len(b2.h.messages()) == 1 })
	if got := b2.h.messages()[0]; string(got.Msg.Entries[0].Data) != "after" {
		t.Fatalf("got %+v", got)
	}
	if s := a.t.Stats(); s.Connects < 4 { // two lanes, twice
		t.Fatalf("connects %d, want ≥ 4", s.Connects)
	}
}

// A node of another cluster is refused on both sides with an error saying
// what to do; nothing is delivered. The refusing node does not tell the
// dialer its cluster id (the dialer may be anyone who reached the port).
func TestGRPCRefusesWrongCluster(t *testing.T) {
	a := startNode(t, 1, "127.0.0.1:0", nil)
	defer a.stop(t)
	b := startNode(t, 2, "127.0.0.1:0", func(c *GRPCConfig) { c.ClusterID = "other" })
	defer b.stop(t)
	if err := a.t.AddPeer(2, b.addr); err != nil {
		t.Fatal(err)
	}
	var err error
	waitFor(t, "refusal", func() bool {
		s, _ := a.t.Peer(2)
		err = s.LastErr
		return isHandshakeRefusal(err)
	})
	if !errors.Is(err, ErrWrongCluster) {
		t.Fatalf("err = %v, want ErrWrongCluster", err)
	}
	for _, want := range []string{`"test"`, "node 2", b.addr, "cluster id"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), `"other"`) {
		t.Fatalf("the refusal names the refusing node's cluster: %v", err)
	}
	t.Logf("the dialing node says: %v", err)
	a.t.Send([]Message{app(1, 1, 2, 1, "x")})
	if s := b.t.Stats(); s.HandshakesRefused == 0 || s.MessagesReceived != 0 {
		t.Fatalf("refusing node: %+v", s)
	}
}

// A stream whose peer Authorize does not take for the node its Hello
// claims is refused before anything it carries is delivered, and counted.
func TestGRPCRefusesUnauthorizedPeer(t *testing.T) {
	a := startNode(t, 1, "127.0.0.1:0", func(c *GRPCConfig) {
		c.Authorize = func(_ context.Context, node uint64) error {
			if node == 2 {
				return errors.New("the certificate is not node 2's")
			}
			return nil
		}
	})
	defer a.stop(t)
	b := startNode(t, 2, "127.0.0.1:0", nil)
	defer b.stop(t)
	if err := b.t.AddPeer(1, a.addr); err != nil {
		t.Fatal(err)
	}
	var err error
	waitFor(t, "refusal", func() bool {
		s, _ := b.t.Peer(1)
		err = s.LastErr
		return a.t.Stats().Unauthorized > 0 && err != nil
	})
	if status.Code(errors.Unwrap(err)) != codes.PermissionDenied && !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("the dialer's error: %v", err)
	}
	b.t.Send([]Message{app(1, 2, 1, 1, "x")})
	if s := a.t.Stats(); s.MessagesReceived != 0 {
		t.Fatalf("refusing node delivered: %+v", s)
	}
	t.Logf("the dialing node says: %v", err)
}

// A node speaking another protocol version is refused with an error naming
// both versions and what to do.
func TestGRPCRefusesOtherProtocolVersion(t *testing.T) {
	a := startNode(t, 1, "127.0.0.1:0", nil)
	defer a.stop(t)
	b := startNode(t, 2, "127.0.0.1:0", func(c *GRPCConfig) { c.protocolVersion = ProtocolVersion + 1 })
	defer b.stop(t)
	if err := b.t.AddPeer(1, a.addr); err != nil {
		t.Fatal(err)
	}
	var err error
	waitFor(t, "refusal", func() bool {
		s, _ := b.t.Peer(1)
		err = s.LastErr
		return isHandshakeRefusal(err)
	})
	if !errors.Is(err, ErrProtocolVersion) {
		t.Fatalf("err = %v, want ErrProtocolVersion", err)
	}
	for _, want := range []string{"version 1", "version 2", "same Spool release"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
	t.Logf("the dialing node says: %v", err)
}

// A snapshot larger than one chunk arrives whole; one above the receiver's
// limit is refused and reported to the sender.
func TestGRPCStreamsSnapshotInChunks(t *testing.T) {
	nodes := cluster(t, 2, func(c *GRPCConfig) {
		c.Limits.SnapshotChunkBytes = 64 << 10
		if c.NodeID == 2 {
			c.Limits.MaxSnapshotBytes = 4 << 20
		}
	})
	a, b := nodes[0], nodes[1]
	data := bytes.Repeat([]byte("snapshot-data-"), (3<<20)/14) // ~3 MiB: ~48 chunks
	snap := func(group uint64, data []byte) Message {
		return Message{Group: group, Msg: raftpb.Message{Type: raftpb.MsgSnap, From: 1, To: 2, Term: 4,
			Snapshot: &raftpb.Snapshot{Data: data, Metadata: raftpb.SnapshotMetadata{Index: 100, Term: 4, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}}}
	}
	a.t.Send([]Message{snap(9, data), snap(10, make([]byte, 5<<20))})
	waitFor(t, "two outcomes", func() bool {
		a.h.mu.Lock()
		defer a.h.mu.Unlock()
		return len(a.h.snapDone) == 2
	})
	a.h.mu.Lock()
	done := append([]snapOutcome(nil), a.h.snapDone...)
	a.h.mu.Unlock()
	if done[0].group != 9 || done[0].err != nil {
		t.Fatalf("first snapshot: %+v", done[0])
	}
	if done[1].group != 10 || status.Code(errors.Unwrap(done[1].err)) != codes.ResourceExhausted {
		t.Fatalf("oversized snapshot: %+v", done[1])
	}
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	if len(b.h.snaps) != 1 || !bytes.Equal(b.h.snaps[0].Msg.Snapshot.Data, data) || b.h.snaps[0].Msg.Snapshot.Metadata.Index != 100 || b.h.snaps[0].Group != 9 {
		t.Fatalf("received %d snapshots", len(b.h.snaps))
	}
}

// rawStream dials node n as a hand-written peer (node from) and completes
// the handshake.
func rawStream(t *testing.T, n *node, from uint64) (clusterv1.PeerService_RaftClient, func()) {
	t.Helper()
	cc, err := grpc.NewClient(n.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	s, err := clusterv1.NewPeerServiceClient(cc).Raft(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Hello{Hello: &clusterv1.Hello{
		ClusterId: "test", FromNode: from, ToNode: n.id, ProtocolVersion: ProtocolVersion}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	return s, func() { cancel(); cc.Close() }
}

// Hostile frames never crash the node: undecodable messages, messages from
// or to another node, local-only types and unknown groups are dropped and
// counted while the good messages of the same frame are delivered; an
// oversized frame ends that stream only.
func TestGRPCSurvivesHostileFrames(t *testing.T) {
	n := startNode(t, 1, "127.0.0.1:0", func(c *GRPCConfig) { c.Limits.MaxBatchBytes = 64 << 10; c.Limits.MaxMessageBytes = 32 << 10 })
	defer n.stop(t)
	n.h.unknown[99] = true
	s, closeS := rawStream(t, n, 5)
	defer closeS()
	enc := func(m raftpb.Message) []byte { b, _ := m.Marshal(); return b }
	good := enc(raftpb.Message{Type: raftpb.MsgApp, From: 5, To: 1, Index: 7})
	batch := &clusterv1.Batch{
		Heartbeats: &clusterv1.Heartbeats{ // the first from another node than the stream's
			GroupIds: []uint64{1, 1}, Froms: []uint64{6, 5}, Tos: []uint64{1, 1}, Terms: []uint64{0, 2}, Commits: []uint64{0, 0}, Responses: []bool{false, false}},
		Messages: []*clusterv1.GroupMessage{
			{GroupId: 1, Message: []byte{0xff, 0xff, 0xff}},
			{GroupId: 1, Message: enc(raftpb.Message{Type: raftpb.MsgApp, From: 6, To: 1})},
			{GroupId: 1, Message: enc(raftpb.Message{Type: raftpb.MsgApp, From: 5, To: 2})},
			{GroupId: 1, Message: enc(raftpb.Message{Type: raftpb.MsgHup, From: 5, To: 1})},
			{GroupId: 1, Message: enc(raftpb.Message{Type: 999, From: 5, To: 1})},
			{GroupId: 1, Message: enc(raftpb.Message{Type: raftpb.MsgSnap, From: 5, To: 1, Snapshot: &raftpb.Snapshot{}})},
			{GroupId: 99, Message: good},
			{GroupId: 1, Message: good},
		},
	}
	if err := s.Send(&clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Batch{Batch: batch}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the good messages", func() bool { return len(n.h.messages()) == 2 })
	st := n.t.Stats()
	if st.Malformed != 7 || st.UnknownGroup != 1 || st.MessagesReceived != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A second Hello ends the stream with INVALID_ARGUMENT.
	if err := s.Send(&clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Hello{Hello: &clusterv1.Hello{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("second hello: %v", err)
	}
	// An oversized frame ends its stream; the node serves the next one.
	s2, close2 := rawStream(t, n, 5)
	defer close2()
	big := &clusterv1.Batch{Messages: []*clusterv1.GroupMessage{{GroupId: 1, Message: make([]byte, 2<<20)}}}
	_ = s2.Send(&clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Batch{Batch: big}})
	if _, err := s2.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized frame: %v", err)
	}
	s3, close3 := rawStream(t, n, 5)
	defer close3()
	if err := s3.Send(&clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Batch{Batch: &clusterv1.Batch{Messages: []*clusterv1.GroupMessage{{GroupId: 1, Message: good}}}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "delivery after hostile streams", func() bool { return len(n.h.messages()) == 3 })
}

// A full queue drops what does not fit and counts it; Send never blocks.
func TestGRPCFullQueueDrops(t *testing.T) {
	ln := startNode(t, 1, "127.0.0.1:0", func(c *GRPCConfig) { c.Limits.QueueLen = 10 })
	defer ln.stop(t)
	// Peer 2's address accepts nothing: the queue fills and stays full
	// between reconnection attempts.
	if err := ln.t.AddPeer(2, "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	var msgs []Message
	for i := range 25 {
		msgs = append(msgs, app(1, 1, 2, uint64(i), "x"))
	}
	ln.t.Send(msgs)
	ln.t.Send([]Message{app(1, 1, 3, 0, "no such peer")})
	s := ln.t.Stats()
	if s.DroppedQueueFull < 15 || s.DroppedNoPeer != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Group 0 has its own queue: a full partition queue does not crowd it out.
	ln.t.Send([]Message{app(0, 1, 2, 0, "controller")})
	if s2 := ln.t.Stats(); s2.DroppedQueueFull != s.DroppedQueueFull {
		t.Fatalf("group 0 dropped behind a full data queue: %+v", s2)
	}
}

// A removed peer gets nothing more and its goroutines end (goleak checks
// at exit); adding it back, at a new address, connects again.
func TestGRPCRemoveAndReAddPeer(t *testing.T) {
	nodes := cluster(t, 2, nil)
	a, b := nodes[0], nodes[1]
	a.t.RemovePeer(2)
	if _, ok := a.t.Peer(2); ok {
		t.Fatal("removed peer still listed")
	}
	a.t.Send([]Message{app(1, 1, 2, 1, "")})
	if s := a.t.Stats(); s.DroppedNoPeer != 1 {
		t.Fatalf("stats %+v", s)
	}
	c := startNode(t, 2, "127.0.0.1:0", nil) // node 2 moved to a new address
	defer c.stop(t)
	if err := a.t.AddPeer(2, b.addr); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, a, 2)
	if err := a.t.AddPeer(2, c.addr); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, a, 2)
	a.t.Send([]Message{app(1, 1, 2, 2, "")})
	waitFor(t, "delivery at the new address", func() bool { return len(c.h.messages()) == 1 })
	if len(b.h.messages()) != 0 {
		t.Fatal("the old address got a message")
	}
}

// A peer that comes back (a restarted node dials us: its Hello arrives) is
// reconnected to at once, not when our backoff toward it — or gRPC's own,
// which reached 120 s — runs out: a restarted node's replicas otherwise
// waited that long for their leaders' messages. Here the backoff is 5-10 s
// per attempt and the peer is back after one failed attempt.
func TestGRPCReconnectsAtOnceWhenThePeerDialsIn(t *testing.T) {
	slow := func(c *GRPCConfig) { c.Backoff = Backoff{Base: 10 * time.Second, Max: 10 * time.Second} }
	a := startNode(t, 1, "127.0.0.1:0", slow)
	defer a.stop(t)
	b := startNode(t, 2, freeAddr(t), slow) // restarted on its address below
	addr := b.addr
	if err := a.t.AddPeer(2, addr); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, a, 2)
	b.stop(t)
	waitFor(t, "unreachable reported", func() bool {
		a.h.mu.Lock()
		defer a.h.mu.Unlock()
		return a.h.unreachable[2] > 0
	})
	b2 := startNode(t, 2, addr, slow)
	defer b2.stop(t)
	start := time.Now()
	if err := b2.t.AddPeer(1, a.addr); err != nil { // b2 dials a: its Hello tells a it is back
		t.Fatal(err)
	}
	waitConnected(t, a, 2)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("reconnected %v after the peer dialed in; want at once, not after the 5-10 s backoff", took)
	}
}

// The restarted peer may dial in while our streams to its old process
// still look up (the old process's connections not yet seen to close, or
// half-open after a crash until keepalive notices). Those streams then
// fail, and their lanes must still reconnect at once, not after their
// backoff: the Hello that arrived meanwhile said the peer is back. Here
// node 2's new process dials node 1 from another address while the old
// one is still connected; then the old one stops and the new one takes
// over its address.
func TestGRPCReconnectsAtOnceWhenThePeerDialedInWhileConnected(t *testing.T) {
	slow := func(c *GRPCConfig) { c.Backoff = Backoff{Base: 10 * time.Second, Max: 10 * time.Second} }
	a := startNode(t, 1, "127.0.0.1:0", slow)
	defer a.stop(t)
	b := startNode(t, 2, freeAddr(t), slow)
	addr := b.addr
	if err := a.t.AddPeer(2, addr); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, a, 2)
	back := startNode(t, 2, "127.0.0.1:0", slow) // node 2's new process, before the old one's streams end
	defer back.stop(t)
	if err := back.t.AddPeer(1, a.addr); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, back, 1) // its Hello reached node 1 while node 1's lanes to 2 were up
	b.stop(t)
	b2 := startNode(t, 2, addr, slow)
	defer b2.stop(t)
	start := time.Now()
	waitFor(t, "node 1's lanes to node 2 reconnected", func() bool {
		s, ok := a.t.Peer(2)
		return ok && s.Connected && a.t.Stats().Connects >= 2*numLanes
	})
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("reconnected %v after the peer's old process stopped; want at once, not after the 5-10 s backoff", took)
	}
}

// freeAddr is an address on 127.0.0.1 for a node that is stopped and
// started again on it: a port from listen(":0") is an ephemeral one, which
// an outgoing connection may take in between (see internal/testport).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testport.Free("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Each node keeps what its peers advertised in their Hellos, from the
// streams it dials and from those it serves; a node that advertises
// nothing (a 0.1.0 node sends no such fields) is kept as zeros, and the
// handshake still succeeds.
func TestGRPCKeepsWhatPeersAdvertise(t *testing.T) {
	adv := map[uint64]Advertised{1: {ClusterVersionMin: 1, ClusterVersionMax: 2, Release: "0.2.0"}, 2: {}}
	nodes := cluster(t, 2, func(c *GRPCConfig) { c.Advertise = adv[c.NodeID] })
	for _, n := range nodes {
		other := 3 - n.id
		waitFor(t, "the peer's hello", func() bool {
			s, _ := n.t.Peer(other)
			return s.Connected && s.Heard != nil
		})
		if s, _ := n.t.Peer(other); *s.Heard != adv[other] {
			t.Fatalf("node %d heard %+v from node %d, want %+v", n.id, *s.Heard, other, adv[other])
		}
	}
}

// A node whose AcceptPeer refuses what a peer advertised refuses its
// streams both ways, and the peer is told why; a node it accepts connects.
func TestGRPCAcceptPeerRefuses(t *testing.T) {
	tooOld := errors.New("the cluster is at cluster version 2, and the node's release speaks cluster versions 1..1")
	a := startNode(t, 1, "127.0.0.1:0", func(c *GRPCConfig) {
		c.Advertise = Advertised{ClusterVersionMin: 1, ClusterVersionMax: 2}
		c.AcceptPeer = func(peer uint64, adv Advertised) error {
			if adv.ClusterVersionMax < 2 {
				return tooOld
			}
			return nil
		}
	})
	defer a.stop(t)
	b := startNode(t, 2, "127.0.0.1:0", nil) // advertises nothing, as 0.1.0
	defer b.stop(t)
	if err := b.t.AddPeer(1, a.addr); err != nil {
		t.Fatal(err)
	}
	if err := a.t.AddPeer(2, b.addr); err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		n    *node
		peer uint64
		want string
	}{{b, 1, "node 1 at " + a.addr + ": it refuses this node's release: " + tooOld.Error()}, {a, 2, "node 2 at " + b.addr + ": " + tooOld.Error()}} {
		var err error
		waitFor(t, "refusal", func() bool {
			s, _ := side.n.t.Peer(side.peer)
			err = s.LastErr
			return errors.Is(err, ErrPeerRefused)
		})
		if !strings.Contains(err.Error(), side.want) {
			t.Fatalf("node %d says %q, want it to contain %q", side.n.id, err, side.want)
		}
		t.Logf("node %d says: %v", side.n.id, err)
	}
	if s, _ := b.t.Peer(1); s.Connected {
		t.Fatal("the refused node is connected")
	}
}
