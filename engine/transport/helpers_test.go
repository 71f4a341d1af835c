package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// recorder is a Handler that keeps what it gets.
type recorder struct {
	mu          sync.Mutex
	msgs        []Message
	snaps       []Message
	unreachable map[uint64]int
	snapDone    []snapOutcome
	unknown     map[uint64]bool // groups answered with ErrUnknownGroup
	changed     chan struct{}
}

type snapOutcome struct {
	group, peer uint64
	err         error
}

func newRecorder() *recorder {
	return &recorder{unreachable: map[uint64]int{}, unknown: map[uint64]bool{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) HandleMessage(m Message) error {
	r.mu.Lock()
	defer r.poke()
	defer r.mu.Unlock()
	if r.unknown[m.Group] {
		return fmt.Errorf("group %d: %w", m.Group, ErrUnknownGroup)
	}
	r.msgs = append(r.msgs, m)
	return nil
}

func (r *recorder) HandleSnapshot(_ context.Context, m Message) error {
	r.mu.Lock()
	defer r.poke()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, m)
	return nil
}

func (r *recorder) PeerUnreachable(peer uint64) {
	r.mu.Lock()
	defer r.poke()
	defer r.mu.Unlock()
	r.unreachable[peer]++
}

func (r *recorder) SnapshotDone(group, peer uint64, err error) {
	r.mu.Lock()
	defer r.poke()
	defer r.mu.Unlock()
	r.snapDone = append(r.snapDone, snapOutcome{group, peer, err})
}

func (r *recorder) messages() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Message(nil), r.msgs...)
}

// waitFor polls cond until it holds or the test's deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// node is one GRPC transport running on 127.0.0.1.
type node struct {
	id     uint64
	addr   string
	t      *GRPC
	h      *recorder
	cancel context.CancelFunc
	done   chan error
}

func (n *node) stop(tb testing.TB) {
	tb.Helper()
	n.cancel()
	if err := <-n.done; err != nil {
		tb.Errorf("node %d: Run: %v", n.id, err)
	}
}

// startNode starts a transport for id on addr ("127.0.0.1:0" for a new port).
func startNode(tb testing.TB, id uint64, addr string, mod func(*GRPCConfig)) *node {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	h := newRecorder()
	cfg := GRPCConfig{ClusterID: "test", NodeID: id, Handler: h, Listener: ln,
		Backoff: Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := NewGRPC(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{id: id, addr: ln.Addr().String(), t: tr, h: h, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- tr.Run(ctx) }()
	return n
}

// cluster starts n nodes that all know each other and waits until every
// stream is up.
func cluster(tb testing.TB, n int, mod func(*GRPCConfig)) []*node {
	tb.Helper()
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = startNode(tb, uint64(i+1), "127.0.0.1:0", mod)
	}
	tb.Cleanup(func() {
		for _, x := range nodes {
			x.stop(tb)
		}
	})
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				if err := a.t.AddPeer(b.id, b.addr); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				waitConnected(tb, a, b.id)
			}
		}
	}
	return nodes
}

func waitConnected(tb testing.TB, a *node, peer uint64) {
	tb.Helper()
	waitFor(tb, fmt.Sprintf("node %d connected to %d", a.id, peer), func() bool {
		s, ok := a.t.Peer(peer)
		return ok && s.Connected
	})
}

func app(group, from, to, index uint64, data string) Message {
	return Message{Group: group, Msg: raftpb.Message{Type: raftpb.MsgApp, From: from, To: to, Term: 1, Index: index,
		Entries: []raftpb.Entry{{Term: 1, Index: index + 1, Data: []byte(data)}}}}
}

func heartbeat(group, from, to, term, commit uint64) Message {
	return Message{Group: group, Msg: raftpb.Message{Type: raftpb.MsgHeartbeat, From: from, To: to, Term: term, Commit: commit}}
}
