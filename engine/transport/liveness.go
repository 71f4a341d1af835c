package transport

import (
	"sync"
	"sync/atomic"
	"time"
)

// Node-level liveness: one heartbeat per pair of nodes, not one per raft
// group, so that idle groups can stop theirs (quiescence, engine/raft).
// Every outbound stream sends an empty batch when it has sent nothing for
// a LivenessInterval; the receiving node takes any frame from a peer as a
// sign of life. A peer heard from once and then silent for LivenessTimeout
// is declared dead: the Handler is told (PeerUnreachable), as when its
// connection fails, and Live answers false until a frame arrives again.
// The empty batches are frames every release accepts (a batch of nothing),
// so this needs no protocol change; they also keep bytes flowing on idle
// connections, so that a partition breaks them within the socket's
// TCP_USER_TIMEOUT (PeerKeepaliveTimeout) rather than at gRPC's next ping.
const (
	// DefaultLivenessInterval is the longest an outbound stream stays
	// silent: it then sends an empty batch.
	DefaultLivenessInterval = 500 * time.Millisecond
	// DefaultLivenessTimeout: a peer not heard from this long is declared
	// dead (elections in a quiet group whose leader's node is partitioned
	// away start within this plus an election timeout).
	DefaultLivenessTimeout = 2 * time.Second
)

// liveness records when each peer was last heard from.
type liveness struct {
	timeout time.Duration
	now     func() time.Time

	mu    sync.RWMutex // read on every Live (raft's status reads), written when a peer appears
	peers map[uint64]*peerLife
}

type peerLife struct {
	heard atomic.Int64 // UnixNano of the last frame received
	dead  bool         // declared dead and not heard from since; guarded by liveness.mu
}

func newLiveness(timeout time.Duration) *liveness {
	return &liveness{timeout: timeout, now: time.Now, peers: map[uint64]*peerLife{}}
}

// of returns peer's record, made on first use.
func (l *liveness) of(peer uint64) *peerLife {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.peers[peer]
	if p == nil {
		p = &peerLife{}
		l.peers[peer] = p
	}
	return p
}

// heard notes a frame from p.
func (l *liveness) heard(p *peerLife) { p.heard.Store(l.now().UnixNano()) }

// live says whether peer was heard from within the timeout.
func (l *liveness) live(peer uint64) bool {
	l.mu.RLock()
	p := l.peers[peer]
	l.mu.RUnlock()
	return p != nil && l.now().UnixNano()-p.heard.Load() < int64(l.timeout)
}

// expired returns the peers that have just gone silent for the timeout
// (each once, until heard from again).
func (l *liveness) expired() []uint64 {
	now := l.now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for id, p := range l.peers {
		silent := now-p.heard.Load() >= int64(l.timeout)
		if silent && !p.dead {
			out = append(out, id)
		}
		p.dead = silent
	}
	return out
}

// forget drops peer (RemovePeer).
func (l *liveness) forget(peer uint64) {
	l.mu.Lock()
	delete(l.peers, peer)
	l.mu.Unlock()
}

// Live says whether node id was heard from within LivenessTimeout: its
// process runs and this node reaches it (engine/raft's NodeLive).
func (t *GRPC) Live(id uint64) bool { return t.live.live(id) }

// watchLiveness declares dead, every LivenessInterval, the peers silent
// for LivenessTimeout, until ctx ends.
func (t *GRPC) watchLiveness(done <-chan struct{}) {
	tick := time.NewTicker(t.cfg.LivenessInterval)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		for _, id := range t.live.expired() {
			t.c.peersDeclaredDead.Add(1)
			t.cfg.Logger.Warn("spool transport: a peer's node is silent; declared dead until heard from again", "peer", id, "timeout", t.cfg.LivenessTimeout)
			t.cfg.Handler.PeerUnreachable(id)
		}
	}
}
