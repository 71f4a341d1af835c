package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/spoolmq/spool/proto/grpcbuf"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// GRPCConfig configures a GRPC transport. ClusterID, NodeID, Handler and
// Listener are required; the rest have defaults.
type GRPCConfig struct {
	ClusterID string
	NodeID    uint64
	Handler   Handler
	// Listener is where peers reach this node; Run serves on it and closes it.
	Listener net.Listener
	Limits   Limits
	Backoff  Backoff
	// HandshakeTimeout bounds the wait for a peer's Hello.
	HandshakeTimeout time.Duration
	// DialOptions come after the defaults (plaintext, keepalive): pass
	// grpc.WithTransportCredentials here for mTLS.
	DialOptions []grpc.DialOption
	// ServerOptions come after the defaults (message size limits,
	// keepalive): pass grpc.Creds here for mTLS.
	ServerOptions []grpc.ServerOption
	// Authorize, if set, decides whether the peer of an inbound stream
	// (its TLS identity, read from ctx) is the node its Hello claims to
	// be; a refused stream ends with PERMISSION_DENIED before anything it
	// carries reaches raft. Nil: the claim is believed (a cluster without
	// TLS, whose network is its only boundary).
	Authorize func(ctx context.Context, node uint64) error
	// Register, if set, registers more services on the transport's gRPC
	// server (engine's NodeService), so that a node has one cluster port.
	Register func(*grpc.Server)
	// LivenessInterval is the longest an outbound stream stays silent (it
	// then sends an empty batch); LivenessTimeout, how long a peer may stay
	// silent before it is declared dead (Handler.PeerUnreachable, Live).
	// Defaults DefaultLivenessInterval and DefaultLivenessTimeout
	// (liveness.go); the timeout must exceed the interval.
	LivenessInterval, LivenessTimeout time.Duration
	// Mute, if set, is fault injection for tests: while it returns true no
	// liveness frame is sent, as from a stopped process (the caller stops
	// its raft messages itself).
	Mute func() bool
	// DisableHeartbeatCoalescing sends heartbeats as full messages (for
	// benchmarks and as an escape hatch).
	DisableHeartbeatCoalescing bool
	// Logger receives connection events; nil means slog.Default().
	Logger *slog.Logger
	// Advertise is what this node says of its release in every Hello; the
	// transport carries it and keeps each peer's (PeerStatus.Heard)
	// without reading it.
	Advertise Advertised
	// AcceptPeer, if set, decides from what a peer advertised in its Hello
	// whether to talk to it, on streams this node dials and serves alike; an
	// error refuses the stream (ErrPeerRefused, its text sent to the peer).
	// The transport retries with backoff, so a refusal heals once the
	// answer changes.
	AcceptPeer func(peer uint64, a Advertised) error

	protocolVersion uint32 // ProtocolVersion; tests set another to play a peer of another release
}

func (c *GRPCConfig) validate() error {
	switch {
	case c.ClusterID == "":
		return errors.New("transport: ClusterID is empty: every node of a cluster must be given the same cluster id")
	case c.NodeID == 0:
		return errors.New("transport: NodeID is 0: node ids start at 1 (raft reserves 0)")
	case c.Handler == nil:
		return errors.New("transport: Handler is nil")
	case c.Listener == nil:
		return errors.New("transport: Listener is nil")
	}
	if c.protocolVersion == 0 {
		c.protocolVersion = ProtocolVersion
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.LivenessInterval == 0 {
		c.LivenessInterval = DefaultLivenessInterval
	}
	if c.LivenessTimeout == 0 {
		c.LivenessTimeout = DefaultLivenessTimeout
	}
	if c.LivenessInterval < 0 || c.LivenessTimeout <= c.LivenessInterval {
		return fmt.Errorf("transport: LivenessInterval %v, LivenessTimeout %v: need 0 < interval < timeout", c.LivenessInterval, c.LivenessTimeout)
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	return c.Backoff.validate()
}

// Lanes: raft group 0 (the controller) has its own connection and queue
// per peer, so a busy partition never delays or crowds out the cluster's
// metadata.
const (
	laneSystem = 0
	laneData   = 1
	numLanes   = 2
)

func laneOf(group uint64) int {
	if group == 0 {
		return laneSystem
	}
	return laneData
}

// GRPC is the real Transport: one Raft stream per peer and lane, dialed by
// the sending node, plus the server side for streams dialed to this node.
type GRPC struct {
	cfg    GRPCConfig
	c      counters
	server *grpc.Server
	enc    encoder
	live   *liveness

	started atomic.Bool
	rndMu   sync.Mutex
	rnd     *rand.Rand

	mu     sync.Mutex
	peers  map[uint64]*peer
	runCtx context.Context // set by Run; nil before
	wg     sync.WaitGroup  // every goroutine the transport starts
}

// How every gRPC channel between peers (this transport's lanes and the
// cluster's forwarding clients, PeerDialOptions) notices a peer gone
// silent and dials it again: after a network partition heals, a channel
// must carry calls again within about PeerConnectTimeout plus
// PeerReconnectMax, not when a TCP connection stuck in retransmission
// backoff happens to retransmit (the kernel doubles that wait, up to two
// minutes: after a 7-14 s one-way cut, 5-12.6 s after the heal).
const (
	// PeerKeepaliveTime: a channel that read nothing for this long pings
	// the peer (10 s is the least gRPC allows a client; the server side
	// permits pings every PeerKeepaliveTime/2). This notices a peer whose
	// TCP still acknowledges but which answers nothing (a stopped process).
	PeerKeepaliveTime = 10 * time.Second
	// PeerKeepaliveTimeout: a ping unanswered this long closes the
	// connection; so do bytes sent and not acknowledged by the peer's TCP
	// this long (gRPC sets it as the socket's TCP_USER_TIMEOUT), which is
	// what notices a partition: its connections die 2 s into it, not
	// after the kernel's retransmissions.
	PeerKeepaliveTimeout = 2 * time.Second
	// PeerConnectTimeout bounds one connection attempt (TCP and TLS
	// handshakes): a SYN lost to a partition is not waited on for the
	// kernel's own 1, 3, 7 s retries.
	PeerConnectTimeout = 2 * time.Second
	// PeerReconnectMax caps the wait between connection attempts (100 ms
	// growing by 1.6; gRPC's default grows to 120 s).
	PeerReconnectMax = time.Second
)

// PeerServerOptions are the keepalive settings of the server peers dial
// (this transport's, which serves NodeService too): it permits the pings
// PeerDialOptions sends, and closes a connection whose bytes the client's
// TCP has not acknowledged for PeerKeepaliveTimeout.
func PeerServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: PeerKeepaliveTimeout}),
		// Peers ping every PeerKeepaliveTime: allow it, with room for
		// timers firing early.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: PeerKeepaliveTime / 2, PermitWithoutStream: true}),
	}
}

// PeerDialOptions are the keepalive and reconnect settings of every
// channel to a peer (see PeerKeepaliveTime).
func PeerDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: PeerKeepaliveTime, Timeout: PeerKeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: PeerReconnectMax},
			MinConnectTimeout: PeerConnectTimeout,
		}),
	}
}

type peer struct {
	id     uint64
	addr   string
	lanes  [numLanes]*lane
	snaps  *snapQueue
	conn   [numLanes]*grpc.ClientConn
	cancel context.CancelFunc // nil until started
	heard  atomic.Pointer[Advertised]
}

type lane struct {
	q *queue
	// back (capacity 1) cuts the lane's backoff short: the peer dialed us,
	// so it is up again (peerBack); sent while the lane is up too, it cuts
	// the backoff after the lane's stream fails.
	back      chan struct{}
	connected atomic.Bool
	lastErr   atomic.Pointer[errBox]
}

type errBox struct{ err error }

// Advertised is what a node says of its release in its Hello: the cluster
// versions it speaks (engine/meta; both 0 from a 0.1.0 node, which says
// nothing) and its release's semantic version.
type Advertised struct {
	ClusterVersionMin, ClusterVersionMax uint32
	Release                              string
}

func advertisedIn(h *clusterv1.Hello) *Advertised {
	return &Advertised{ClusterVersionMin: h.GetClusterVersionMin(), ClusterVersionMax: h.GetClusterVersionMax(), Release: h.GetReleaseVersion()}
}

// heardFrom keeps what peer id advertised in the Hello it just sent.
func (t *GRPC) heardFrom(id uint64, h *clusterv1.Hello) {
	t.mu.Lock()
	p, ok := t.peers[id]
	t.mu.Unlock()
	if ok {
		p.heard.Store(advertisedIn(h))
	}
}

var _ Transport = (*GRPC)(nil)

// NewGRPC returns a transport that serves on cfg.Listener once Run starts.
func NewGRPC(cfg GRPCConfig) (*GRPC, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &GRPC{
		cfg:   cfg,
		peers: make(map[uint64]*peer),
		enc:   encoder{maxBatchBytes: cfg.Limits.MaxBatchBytes, coalesce: !cfg.DisableHeartbeatCoalescing},
		live:  newLiveness(cfg.LivenessTimeout),
		rnd:   rand.New(rand.NewPCG(cfg.NodeID, uint64(time.Now().UnixNano()))),
	}
	opts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.Limits.maxFrameBytes()),
		grpcbuf.ServerOption(),
		grpcbuf.ServerCodec(),
		grpc.WaitForHandlers(true),
	}, PeerServerOptions()...)
	opts = append(opts, cfg.ServerOptions...)
	t.server = grpc.NewServer(opts...)
	clusterv1.RegisterPeerServiceServer(t.server, &server{t: t})
	if cfg.Register != nil {
		cfg.Register(t.server)
	}
	return t, nil
}

// Stats returns the counters so far.
func (t *GRPC) Stats() Stats { return t.c.stats() }

// PeerStatus is what the transport knows of one peer's connections.
type PeerStatus struct {
	ID        uint64
	Addr      string
	Connected bool  // both lanes' streams completed the handshake and are up
	LastErr   error // the last connection failure (a *HandshakeError for a refusal), nil if none
	// Heard is what the peer advertised in its last Hello (nil: no
	// handshake completed yet since this node started).
	Heard *Advertised
}

// Peer returns the status of peer id.
func (t *GRPC) Peer(id uint64) (PeerStatus, bool) {
	t.mu.Lock()
	p, ok := t.peers[id]
	t.mu.Unlock()
	if !ok {
		return PeerStatus{}, false
	}
	s := PeerStatus{ID: id, Addr: p.addr, Connected: true, Heard: p.heard.Load()}
	for _, l := range p.lanes {
		s.Connected = s.Connected && l.connected.Load()
		if b := l.lastErr.Load(); b != nil && s.LastErr == nil {
			s.LastErr = b.err
		}
	}
	return s, true
}

// AddPeer makes node id reachable at addr.
func (t *GRPC) AddPeer(id uint64, addr string) error {
	if id == 0 || id == t.cfg.NodeID {
		return fmt.Errorf("transport: AddPeer(%d, %q): a peer id must be non-zero and not this node's own (%d)", id, addr, t.cfg.NodeID)
	}
	p := &peer{id: id, addr: addr, snaps: newSnapQueue()}
	// PeerDialOptions: keepalive, and a TCP connection tried again at most
	// every second (gRPC's own backoff grows to 120 s); the lanes' Backoff
	// spaces the streams.
	dial := append(append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(t.cfg.Limits.maxFrameBytes())),
		grpcbuf.DialOption(),
		grpcbuf.ClientCodec(),
	}, PeerDialOptions()...), t.cfg.DialOptions...)
	for i := range p.lanes {
		p.lanes[i] = &lane{q: newQueue(t.cfg.Limits), back: make(chan struct{}, 1)}
		cc, err := grpc.NewClient(addr, dial...)
		if err != nil {
			for _, c := range p.conn[:i] {
				c.Close()
			}
			return fmt.Errorf("transport: AddPeer(%d, %q): %w", id, addr, err)
		}
		p.conn[i] = cc
	}
	t.mu.Lock()
	old := t.peers[id]
	if old != nil && old.addr == addr {
		t.mu.Unlock()
		for _, c := range p.conn {
			c.Close()
		}
		return nil
	}
	t.peers[id] = p
	if t.runCtx != nil {
		t.startPeerLocked(p)
	}
	t.mu.Unlock()
	if old != nil {
		t.stopPeer(old)
	}
	return nil
}

// RemovePeer forgets peer id and closes its connections.
func (t *GRPC) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	t.live.forget(id)
	if p != nil {
		t.stopPeer(p)
	}
}

func (t *GRPC) stopPeer(p *peer) {
	if p.cancel != nil {
		p.cancel() // its goroutines close the connections when they end
		return
	}
	for _, c := range p.conn {
		c.Close()
	}
}

// startPeerLocked starts p's sender goroutines; t.mu is held and Run is on.
func (t *GRPC) startPeerLocked(p *peer) {
	ctx, cancel := context.WithCancel(t.runCtx)
	p.cancel = cancel
	var pwg sync.WaitGroup
	for i := range p.lanes {
		pwg.Add(1)
		t.goFunc(func() { defer pwg.Done(); t.runLane(ctx, p, i) })
	}
	pwg.Add(1)
	t.goFunc(func() { defer pwg.Done(); t.runSnapshots(ctx, p) })
	t.goFunc(func() {
		pwg.Wait()
		for _, c := range p.conn {
			c.Close()
		}
	})
}

func (t *GRPC) goFunc(f func()) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
}

// Run serves peers on the listener and keeps a stream to every peer until
// ctx ends. It returns nil then, after every goroutine it started ended.
func (t *GRPC) Run(ctx context.Context) error {
	if !t.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serveErr := make(chan error, 1)
	t.goFunc(func() { serveErr <- t.server.Serve(t.cfg.Listener) })
	t.goFunc(func() { t.watchLiveness(ctx.Done()) })
	t.mu.Lock()
	t.runCtx = ctx
	for _, p := range t.peers {
		t.startPeerLocked(p)
	}
	t.mu.Unlock()
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("transport: serving peers on %v: %w", t.cfg.Listener.Addr(), err)
	}
	cancel()
	t.server.Stop()
	t.mu.Lock()
	t.runCtx = nil // AddPeer after Run only records the peer
	t.mu.Unlock()
	t.wg.Wait()
	return err
}

// Send queues msgs for their peers without blocking.
func (t *GRPC) Send(msgs []Message) {
	sizes := make([]int, len(msgs))
	single := true // every message to one (peer, lane), nothing set aside: the common case
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Msg.Type == raftpb.MsgSnap:
			sizes[i], single = -1, false
		case coalescable(&m.Msg):
			sizes[i] = heartbeatSizeMax
		default:
			sizes[i] = m.Msg.Size()
			if sizes[i] > t.cfg.Limits.MaxMessageBytes {
				sizes[i], single = -1, false
			}
		}
		if single && i > 0 && (NodeOf(m.Msg.To) != NodeOf(msgs[0].Msg.To) || laneOf(m.Group) != laneOf(msgs[0].Group)) {
			single = false
		}
	}
	if single && len(msgs) > 0 {
		t.push(NodeOf(msgs[0].Msg.To), laneOf(msgs[0].Group), msgs, sizes)
		return
	}
	// Group by (peer, lane) so one call's messages to one peer are queued
	// together; calls name few peers, so a slice beats a map.
	type batch struct {
		peer  uint64
		lane  int
		msgs  []Message
		sizes []int
	}
	var batches []batch
	for i := range msgs {
		m := &msgs[i]
		if m.Msg.Type == raftpb.MsgSnap {
			t.queueSnapshot(*m)
			continue
		}
		if sizes[i] < 0 {
			t.c.droppedTooLarge.Add(1)
			continue
		}
		to, ln := NodeOf(m.Msg.To), laneOf(m.Group)
		j := 0
		for j < len(batches) && (batches[j].peer != to || batches[j].lane != ln) {
			j++
		}
		if j == len(batches) {
			batches = append(batches, batch{peer: to, lane: ln})
		}
		batches[j].msgs = append(batches[j].msgs, *m)
		batches[j].sizes = append(batches[j].sizes, sizes[i])
	}
	for _, b := range batches {
		t.push(b.peer, b.lane, b.msgs, b.sizes)
	}
}

func (t *GRPC) push(peer uint64, lane int, msgs []Message, sizes []int) {
	t.mu.Lock()
	p := t.peers[peer]
	t.mu.Unlock()
	if p == nil {
		t.c.droppedNoPeer.Add(uint64(len(msgs)))
		return
	}
	if d := p.lanes[lane].q.push(msgs, sizes); d > 0 {
		t.c.droppedQueueFull.Add(uint64(d))
	}
}

// peerBack is called when a peer's Raft stream to us passed its handshake:
// the peer is up, so our lanes to it retry at once instead of waiting out
// their backoff (their next stream waits for gRPC's channel, which retries
// within a second), and a restarted node's replicas hear from their leaders
// as soon as it dials them. (gRPC's ResetConnectBackoff would be quicker
// still, but in grpc-go 1.85 it reads the channel's connection map without
// its lock: a data race the race detector caught.)
//
// A lane that still looks connected gets the signal too: a restarted peer
// may dial us before we see its old process's streams end (at once on a
// busy machine, or only when keepalive gives up on a half-open connection
// after a crash); the signal then waits in l.back and cuts the backoff
// after that stream fails. A lane drops a signal that predates its
// handshake (session). One left by a peer that dialed in long before its
// stream fails costs one retry without backoff (DefaultBackoffBase is
// 100 ms), waiting for the channel for up to HandshakeTimeout.
func (t *GRPC) peerBack(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	t.mu.Unlock()
	if p == nil {
		return
	}
	for _, l := range p.lanes {
		select {
		case l.back <- struct{}{}:
		default:
		}
	}
}

func (t *GRPC) hello(to uint64) *clusterv1.Hello {
	a := t.cfg.Advertise
	return &clusterv1.Hello{ClusterId: t.cfg.ClusterID, FromNode: t.cfg.NodeID, ToNode: to, ProtocolVersion: t.cfg.protocolVersion,
		ClusterVersionMin: a.ClusterVersionMin, ClusterVersionMax: a.ClusterVersionMax, ReleaseVersion: a.Release}
}

func (t *GRPC) backoff(attempt int) time.Duration {
	t.rndMu.Lock()
	r := t.rnd.Float64()
	t.rndMu.Unlock()
	return t.cfg.Backoff.Delay(attempt, r)
}

// runLane keeps one stream to p for one lane: connect, send until the
// stream fails, drop what was queued, tell the handler, back off, again.
func (t *GRPC) runLane(ctx context.Context, p *peer, li int) {
	l := p.lanes[li]
	client := clusterv1.NewPeerServiceClient(p.conn[li])
	attempt, back := 0, false
	for {
		established, err := t.session(ctx, client, p, l, back)
		back = false
		l.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		l.lastErr.Store(&errBox{err})
		t.c.droppedUnsent.Add(uint64(l.q.clear()))
		if established {
			attempt = 0
		}
		attempt++
		switch {
		case isHandshakeRefusal(err):
			t.cfg.Logger.Error("spool transport: "+err.Error(), "peer", p.id, "addr", p.addr)
		case attempt == 1:
			t.cfg.Logger.Warn("spool transport: lost the stream to a peer; reconnecting with backoff", "peer", p.id, "addr", p.addr, "lane", li, "err", err)
		}
		t.cfg.Handler.PeerUnreachable(p.id)
		timer := time.NewTimer(t.backoff(attempt))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-l.back:
			timer.Stop()
			back = true
		}
	}
}

// session runs one stream: handshake, then flushes until it fails.
// established says whether the handshake completed. back: the peer just
// dialed us, so the stream waits (up to HandshakeTimeout) for gRPC's
// channel to reconnect rather than failing at once while the channel is
// between attempts.
func (t *GRPC) session(ctx context.Context, client clusterv1.PeerServiceClient, p *peer, l *lane, back bool) (established bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	opening := time.AfterFunc(t.cfg.HandshakeTimeout, cancel)
	stream, err := client.Raft(sctx, grpc.WaitForReady(back))
	opening.Stop()
	if err != nil {
		return false, fmt.Errorf("peer %d at %s: opening the Raft stream: %w", p.id, p.addr, err)
	}
	if err := stream.Send(&clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Hello{Hello: t.hello(p.id)}}); err != nil {
		_, rerr := stream.Recv() // the real reason, when the server refused
		return false, t.handshakeErr(p, rerr)
	}
	timer := time.AfterFunc(t.cfg.HandshakeTimeout, cancel)
	resp, err := stream.Recv()
	timer.Stop()
	if err != nil {
		return false, t.handshakeErr(p, err)
	}
	h := resp.GetHello()
	e := checkHello(t.cfg.ClusterID, t.cfg.protocolVersion, t.cfg.NodeID, h, p.id, true)
	if e == nil && h.GetFromNode() == p.id {
		e = t.accept(p.id, h)
	}
	if e != nil {
		e.Addr = p.addr
		t.c.handshakesRefused.Add(1)
		return false, e
	}
	if h.GetFromNode() != p.id {
		t.c.handshakesRefused.Add(1)
		return false, &HandshakeError{Kind: ErrWrongNode, Local: fmt.Sprint(p.id), Remote: fmt.Sprint(h.GetFromNode()), Peer: p.id, Addr: p.addr}
	}
	p.heard.Store(advertisedIn(h))
	l.connected.Store(true)
	l.lastErr.Store(nil)
	t.c.connects.Add(1)
	// A peerBack signal from before this handshake is spent: the lane is
	// up. One that arrives from now on cuts the backoff after this stream.
	select {
	case <-l.back:
	default:
	}

	// The server sends nothing after its Hello: a Recv that returns means
	// the stream is gone, which ends the session.
	recvErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := stream.Recv()
		if err == nil {
			err = errors.New("peer sent a frame after its hello")
		}
		recvErr <- err
		cancel()
	}()
	var buf []Message
	alive := time.NewTicker(t.cfg.LivenessInterval)
	defer alive.Stop()
	sent := false // since the last liveness tick
	for {
		var frames []*clusterv1.Batch
		var st frameStats
		select {
		case <-sctx.Done():
			select {
			case err := <-recvErr:
				return true, fmt.Errorf("peer %d at %s: stream ended: %w", p.id, p.addr, err)
			default:
				return true, sctx.Err()
			}
		case <-alive.C:
			if sent || (t.cfg.Mute != nil && t.cfg.Mute()) {
				sent = false
				continue
			}
			buf = nil // silent for a liveness interval: the buffers of the last burst go
			l.q.release()
			frames = []*clusterv1.Batch{{}} // an empty batch: this node lives (liveness.go)
		case <-l.q.signal:
			buf = l.q.drain(buf)
			frames, st = t.enc.encode(buf)
			clear(buf)
		}
		sent = true
		for _, f := range frames {
			req := &clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Batch{Batch: f}}
			n := proto.Size(req)
			if err := stream.Send(req); err != nil {
				t.c.droppedUnsent.Add(uint64(len(f.GetHeartbeats().GetGroupIds()) + len(f.Messages)))
				return true, fmt.Errorf("peer %d at %s: send: %w", p.id, p.addr, err)
			}
			t.c.framesSent.Add(1)
			t.c.bytesSent.Add(uint64(n))
		}
		t.c.messagesSent.Add(uint64(st.messages))
		t.c.heartbeatsCoalesced.Add(uint64(st.heartbeats))
	}
}

func (t *GRPC) handshakeErr(p *peer, err error) error {
	if e := refusedBy(err, p.id, p.addr); e != nil {
		t.c.handshakesRefused.Add(1)
		return e
	}
	return fmt.Errorf("peer %d at %s: handshake: %w", p.id, p.addr, err)
}
