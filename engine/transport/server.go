package transport

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// server is the receiving side of the peer protocol.
type server struct {
	clusterv1.UnimplementedPeerServiceServer
	t *GRPC
}

// Raft receives one peer's stream: its Hello, then batches, each message
// checked and handed to the Handler. Nothing a peer sends can crash this
// node: a frame that is not a batch ends the stream with INVALID_ARGUMENT;
// a message that fails its checks is dropped and counted (Stats.Malformed).
func (s *server) Raft(stream clusterv1.PeerService_RaftServer) error {
	t := s.t
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHello()
	if h == nil {
		return status.Error(codes.InvalidArgument, "the first frame of a Raft stream must be a Hello")
	}
	peer := h.GetFromNode()
	if err := t.admit(stream.Context(), h); err != nil {
		return err
	}
	if err := stream.Send(&clusterv1.RaftResponse{Hello: t.hello(peer)}); err != nil {
		return err
	}
	t.heardFrom(peer, h)
	t.peerBack(peer)
	life := t.live.of(peer)
	t.live.heard(life)
	var (
		buf    []Message
		warned bool
	)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b := req.GetBatch()
		if b == nil {
			return status.Error(codes.InvalidArgument, "a Raft stream carries one Hello, then only Batches")
		}
		t.c.framesReceived.Add(1)
		t.live.heard(life)
		msgs, bad := decodeBatch(b, peer, t.cfg.NodeID, t.cfg.Limits.MaxMessageBytes, buf)
		if len(bad) > 0 {
			t.c.malformed.Add(uint64(len(bad)))
			if !warned { // once per stream: a broken peer must not flood the log
				warned = true
				t.cfg.Logger.Warn("spool transport: dropped malformed messages from a peer", "peer", peer, "count", len(bad), "first", bad[0])
			}
		}
		for i := range msgs {
			t.deliver(msgs[i])
		}
		clear(msgs)
		buf = msgs
	}
}

// admit checks an inbound stream's Hello: same cluster and protocol,
// addressed to this node, and (Authorize) from the node it claims to be.
func (t *GRPC) admit(ctx context.Context, h *clusterv1.Hello) error {
	peer := h.GetFromNode()
	refuse := func(e *HandshakeError) error {
		t.c.handshakesRefused.Add(1)
		t.cfg.Logger.Error("spool transport: refused an inbound stream: "+e.Error(), "peer", peer)
		return refusal(e, t.cfg.NodeID)
	}
	if e := checkHello(t.cfg.ClusterID, t.cfg.protocolVersion, t.cfg.NodeID, h, peer, true); e != nil {
		return refuse(e)
	}
	// Who the peer is before what its release may do: a stream that is not
	// the node it claims learns nothing of the cluster's version.
	if t.cfg.Authorize != nil {
		if err := t.cfg.Authorize(ctx, peer); err != nil {
			t.c.unauthorized.Add(1)
			t.cfg.Logger.Error("spool transport: refused an inbound stream: the peer is not the node it claims to be", "claimed_node", peer, "err", err)
			return status.Errorf(codes.PermissionDenied, "this node does not take the stream as node %d: %v", peer, err)
		}
	}
	if e := t.accept(peer, h); e != nil {
		return refuse(e)
	}
	return nil
}

func (t *GRPC) deliver(m Message) {
	err := t.cfg.Handler.HandleMessage(m)
	switch {
	case err == nil:
		t.c.messagesReceived.Add(1)
	case errors.Is(err, ErrUnknownGroup):
		t.c.unknownGroup.Add(1)
	default:
		t.c.handlerErrors.Add(1)
	}
}
