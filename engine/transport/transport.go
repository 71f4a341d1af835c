package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/spoolmq/spool/internal/backoff"
)

// ProtocolVersion is the version of proto/spool/cluster/v1 this code speaks.
// A peer with another version is refused at the handshake (ErrProtocolVersion).
const ProtocolVersion = 1

// Message is one raft message of one raft group. Msg.To and Msg.From are
// replica ids (ReplicaID): the message goes to the node NodeOf(Msg.To).
type Message struct {
	Group uint64
	Msg   raftpb.Message
}

// ReplicaID is the raft id of a replica: the id of the node that holds it
// in the low 32 bits, the replica's incarnation in the high ones. A
// replica placed with its partition has incarnation 0 (its id is the
// node's); one a move gives a node gets a new incarnation
// (meta.Partition.Incarnations), so that raft never takes it for an
// earlier replica of the same group on that node — whose acknowledgements
// may still be in flight, and whose log it does not hold.
func ReplicaID(node uint64, incarnation uint32) uint64 {
	return uint64(incarnation)<<32 | NodeOf(node)
}

// NodeOf is the node that holds replica id.
func NodeOf(replica uint64) uint64 { return replica & (1<<32 - 1) }

// Transport sends raft messages to peers and hands received ones to a
// Handler. GRPC is the real one; Network's endpoints are the in-memory twin.
type Transport interface {
	// Send queues msgs for their destinations (Msg.To) and returns without
	// blocking. A message that cannot be queued (unknown peer, full queue,
	// too large) is dropped and counted in Stats; raft sends again. The
	// messages of one Send call that go to one peer are queued together, so
	// the heartbeats among them leave in one frame. MsgSnap messages go on
	// the snapshot RPC; their outcome is reported to Handler.SnapshotDone.
	// Send may be called before Run and from any goroutine; the caller must
	// not change the messages afterwards.
	Send(msgs []Message)
	// AddPeer makes node id reachable at addr (host:port; the twin ignores
	// it). Adding a known id with a new address replaces the connection.
	AddPeer(id uint64, addr string) error
	// RemovePeer forgets a peer: its queue is dropped and its connections
	// closed. Unknown ids are ignored.
	RemovePeer(id uint64)
	// Run owns the transport's goroutines until ctx ends; it returns nil
	// then, or an error if the transport could not start.
	Run(ctx context.Context) error
	// Stats returns the counters so far.
	Stats() Stats
}

// Handler receives what peers send. Its methods are called from the
// transport's goroutines (one per inbound stream, so concurrently for
// different peers) and must not block for long: a slow handler delays the
// peer's stream, not the others.
type Handler interface {
	// HandleMessage takes one received message; From and To have been
	// checked against the handshake. Return ErrUnknownGroup (wrapped or not)
	// for a group this node does not hold; the transport counts it and
	// carries on, as it does for any other error.
	HandleMessage(m Message) error
	// HandleSnapshot takes a received MsgSnap with its data. An error is
	// reported to the sender, whose raft marks the snapshot failed.
	HandleSnapshot(ctx context.Context, m Message) error
	// PeerUnreachable says the connection to peer failed; what was queued
	// for it was dropped (raft's ReportUnreachable for its groups).
	PeerUnreachable(peer uint64)
	// SnapshotDone reports the outcome of a MsgSnap sent to replica to of
	// group: nil when the peer took it (raft's ReportSnapshot).
	SnapshotDone(group, to uint64, err error)
}

// Errors. Handshake refusals are *HandshakeError values that match
// ErrWrongCluster, ErrProtocolVersion or ErrWrongNode with errors.Is.
var (
	ErrUnknownGroup    = errors.New("transport: no such raft group on this node")
	ErrWrongCluster    = errors.New("transport: peer belongs to another cluster")
	ErrProtocolVersion = errors.New("transport: peer speaks another protocol version")
	ErrWrongNode       = errors.New("transport: peer address reaches another node")
	// ErrPeerRefused: the node refuses what the peer advertised of its
	// release (GRPCConfig.AcceptPeer): the cluster's version is one the
	// peer's release does not speak.
	ErrPeerRefused    = errors.New("transport: peer's release refused")
	ErrSnapshotBusy   = errors.New("transport: a snapshot to this peer is already in flight")
	ErrSnapshotTooBig = errors.New("transport: snapshot larger than the limit")
	ErrAlreadyRunning = errors.New("transport: Run called twice")
)

// Defaults of Limits.
const (
	DefaultQueueLen           = 16384
	DefaultQueueBytes         = 64 << 20
	DefaultMaxMessageBytes    = 16 << 20
	DefaultMaxBatchBytes      = 1 << 20
	DefaultSnapshotChunkBytes = 1 << 20
	DefaultMaxSnapshotBytes   = 1 << 30
	DefaultHandshakeTimeout   = 5 * time.Second
	DefaultBackoffBase        = 100 * time.Millisecond
	DefaultBackoffMax         = 5 * time.Second
)

// frameOverheadBytes is the room a frame keeps beyond its messages' bytes
// (field tags and lengths) when the receiver sizes what it accepts.
const frameOverheadBytes = 64 << 10

// Limits bound what the transport holds and sends. Zero fields mean the
// defaults. Every node of a cluster should use the same limits: a receiver
// refuses a frame larger than max(MaxBatchBytes, MaxMessageBytes) plus a
// small overhead.
type Limits struct {
	// QueueLen is the most messages queued per peer and lane; more are
	// dropped (counted in Stats.DroppedQueueFull). It must exceed the number
	// of groups shared with a peer, whose heartbeats are queued each tick.
	QueueLen int
	// QueueBytes is the most raft message bytes queued per peer and lane.
	QueueBytes int
	// MaxMessageBytes is the largest raft message (encoded) sent or
	// accepted; larger ones are dropped. Keep raft's MaxSizePerMsg plus the
	// largest entry below it.
	MaxMessageBytes int
	// MaxBatchBytes closes a frame: messages are added to a frame while it
	// stays under it (a larger single message travels alone).
	MaxBatchBytes int
	// SnapshotChunkBytes is the size of a snapshot chunk.
	SnapshotChunkBytes int
	// MaxSnapshotBytes is the largest snapshot data sent or accepted.
	MaxSnapshotBytes int64
}

func (l *Limits) validate() error {
	setInt(&l.QueueLen, DefaultQueueLen)
	setInt(&l.QueueBytes, DefaultQueueBytes)
	setInt(&l.MaxMessageBytes, DefaultMaxMessageBytes)
	setInt(&l.MaxBatchBytes, DefaultMaxBatchBytes)
	setInt(&l.SnapshotChunkBytes, DefaultSnapshotChunkBytes)
	if l.MaxSnapshotBytes == 0 {
		l.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	switch {
	case l.QueueLen < 0, l.QueueBytes < 0, l.MaxMessageBytes < 0, l.MaxBatchBytes < 0, l.SnapshotChunkBytes < 0, l.MaxSnapshotBytes < 0:
		return fmt.Errorf("transport: limits %+v: each must be > 0 (0 means the default)", *l)
	case l.QueueBytes < l.MaxMessageBytes:
		return fmt.Errorf("transport: QueueBytes = %d is below MaxMessageBytes = %d: a queue must hold the largest message", l.QueueBytes, l.MaxMessageBytes)
	}
	return nil
}

// maxFrameBytes is the largest frame a receiver accepts.
func (l Limits) maxFrameBytes() int {
	return max(l.MaxBatchBytes, l.MaxMessageBytes, l.SnapshotChunkBytes) + frameOverheadBytes
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

// Backoff spaces reconnection attempts: the delay before attempt n (n ≥ 1)
// is drawn uniformly from [Base·2^(n-1)/2, Base·2^(n-1)], capped at Max.
// The formula is internal/backoff's, with multiplier 2 and jitter 0.5
// (every delay at least half its cap).
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

func (b *Backoff) validate() error {
	if b.Base == 0 {
		b.Base = DefaultBackoffBase
	}
	if b.Max == 0 {
		b.Max = DefaultBackoffMax
	}
	if b.Base < 0 || b.Max < b.Base {
		return fmt.Errorf("transport: backoff base %v, max %v: need 0 < base ≤ max", b.Base, b.Max)
	}
	return nil
}

// Delay is the wait before the given attempt (1 = the first retry) for a
// random draw r in [0, 1): half the capped exponential plus r times the
// other half, so reconnecting peers spread out. Pure: it replays in tests.
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	return backoff.Config{Base: b.Base, Max: b.Max, Multiplier: 2, Jitter: 0.5}.Delay(attempt, r)
}
