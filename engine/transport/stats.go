package transport

import "sync/atomic"

// Stats are a transport's counters since it was created.
type Stats struct {
	MessagesSent        uint64 // raft messages written to a stream (heartbeats included)
	HeartbeatsCoalesced uint64 // of those, sent in the compact heartbeat form
	FramesSent          uint64 // batches written
	BytesSent           uint64 // encoded frame bytes written
	DroppedQueueFull    uint64 // Send found the peer's queue full
	DroppedTooLarge     uint64 // a message above MaxMessageBytes
	DroppedNoPeer       uint64 // Send to a node that is not a peer
	DroppedUnsent       uint64 // queued when a connection failed, never sent
	MessagesReceived    uint64 // handed to the Handler
	FramesReceived      uint64
	Malformed           uint64 // received messages refused: undecodable, wrong sender or receiver, local type
	UnknownGroup        uint64 // Handler answered ErrUnknownGroup
	HandlerErrors       uint64 // Handler answered another error
	HandshakesRefused   uint64 // by this node (inbound) or by the peer (outbound)
	Unauthorized        uint64 // inbound streams whose peer is not the node it claims (GRPCConfig.Authorize)
	Connects            uint64 // outbound streams that completed the handshake
	PeersDeclaredDead   uint64 // peers found silent for LivenessTimeout (liveness.go)
	SnapshotsSent       uint64
	SnapshotsFailed     uint64
	SnapshotsReceived   uint64
	// The twin's faults (zero for gRPC).
	FaultDropped    uint64
	FaultDuplicated uint64
	FaultCut        uint64
}

type counters struct {
	messagesSent, heartbeatsCoalesced, framesSent, bytesSent                       atomic.Uint64
	droppedQueueFull, droppedTooLarge, droppedNoPeer, droppedUnsent                atomic.Uint64
	messagesReceived, framesReceived, malformed, unknownGroup, handlerErrors       atomic.Uint64
	handshakesRefused, connects, snapshotsSent, snapshotsFailed, snapshotsReceived atomic.Uint64
	unauthorized, peersDeclaredDead                                                atomic.Uint64
	faultDropped, faultDuplicated, faultCut                                        atomic.Uint64
}

func (c *counters) stats() Stats {
	return Stats{
		MessagesSent: c.messagesSent.Load(), HeartbeatsCoalesced: c.heartbeatsCoalesced.Load(),
		FramesSent: c.framesSent.Load(), BytesSent: c.bytesSent.Load(),
		DroppedQueueFull: c.droppedQueueFull.Load(), DroppedTooLarge: c.droppedTooLarge.Load(),
		DroppedNoPeer: c.droppedNoPeer.Load(), DroppedUnsent: c.droppedUnsent.Load(),
		MessagesReceived: c.messagesReceived.Load(), FramesReceived: c.framesReceived.Load(),
		Malformed:    c.malformed.Load(),
		UnknownGroup: c.unknownGroup.Load(), HandlerErrors: c.handlerErrors.Load(),
		HandshakesRefused: c.handshakesRefused.Load(), Unauthorized: c.unauthorized.Load(), Connects: c.connects.Load(),
		PeersDeclaredDead: c.peersDeclaredDead.Load(),
		SnapshotsSent:     c.snapshotsSent.Load(), SnapshotsFailed: c.snapshotsFailed.Load(),
		SnapshotsReceived: c.snapshotsReceived.Load(),
		FaultDropped:      c.faultDropped.Load(), FaultDuplicated: c.faultDuplicated.Load(), FaultCut: c.faultCut.Load(),
	}
}
