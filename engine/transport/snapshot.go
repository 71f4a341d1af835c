package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// snapshotQueueLen bounds the snapshots waiting for one peer; more are
// refused with ErrSnapshotBusy (raft asks again later).
const snapshotQueueLen = 64

// snapQueue holds one peer's snapshots to send, one at a time, and the
// refusals to report (never reported from Send, which the raft layer calls
// with its own state in hand).
type snapQueue struct {
	mu      sync.Mutex
	pending []Message
	refused []Message
	signal  chan struct{}
}

func newSnapQueue() *snapQueue { return &snapQueue{signal: make(chan struct{}, 1)} }

func (q *snapQueue) push(m Message) {
	q.mu.Lock()
	if len(q.pending) < snapshotQueueLen {
		q.pending = append(q.pending, m)
	} else {
		q.refused = append(q.refused, m)
	}
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *snapQueue) take() (refused []Message, next *Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	refused, q.refused = q.refused, nil
	if len(q.pending) > 0 {
		m := q.pending[0]
		q.pending = q.pending[1:]
		next = &m
	}
	return refused, next
}

func (t *GRPC) queueSnapshot(m Message) {
	t.mu.Lock()
	p := t.peers[NodeOf(m.Msg.To)]
	t.mu.Unlock()
	if p == nil {
		t.c.droppedNoPeer.Add(1)
		return
	}
	p.snaps.push(m)
}

// runSnapshots sends p's snapshots one after the other and reports each
// outcome to the Handler.
func (t *GRPC) runSnapshots(ctx context.Context, p *peer) {
	client := clusterv1.NewPeerServiceClient(p.conn[laneData])
	for {
		refused, next := p.snaps.take()
		for _, m := range refused {
			t.c.snapshotsFailed.Add(1)
			t.cfg.Handler.SnapshotDone(m.Group, m.Msg.To, ErrSnapshotBusy)
		}
		if next == nil {
			select {
			case <-ctx.Done():
				return
			case <-p.snaps.signal:
			}
			continue
		}
		err := t.sendSnapshot(ctx, client, p, *next)
		if err != nil {
			t.c.snapshotsFailed.Add(1)
			t.cfg.Logger.Warn("spool transport: sending a snapshot failed", "peer", p.id, "group", next.Group, "err", err)
		} else {
			t.c.snapshotsSent.Add(1)
		}
		t.cfg.Handler.SnapshotDone(next.Group, next.Msg.To, err)
	}
}

// sendSnapshot streams one MsgSnap: a header with the message minus its
// data, then the data in chunks of SnapshotChunkBytes.
func (t *GRPC) sendSnapshot(ctx context.Context, client clusterv1.PeerServiceClient, p *peer, m Message) error {
	var data []byte
	hdr := m.Msg
	if hdr.Snapshot != nil {
		snap := *hdr.Snapshot
		data, snap.Data = snap.Data, nil
		hdr.Snapshot = &snap
	}
	if int64(len(data)) > t.cfg.Limits.MaxSnapshotBytes {
		return fmt.Errorf("group %d: %d bytes, limit %d: %w", m.Group, len(data), t.cfg.Limits.MaxSnapshotBytes, ErrSnapshotTooBig)
	}
	hb, err := hdr.Marshal()
	if err != nil {
		return err
	}
	stream, err := client.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("peer %d at %s: opening the Snapshot stream: %w", p.id, p.addr, err)
	}
	fail := func(err error) error {
		if _, rerr := stream.CloseAndRecv(); rerr != nil {
			err = rerr // the server's reason is the better one
		}
		if e := refusedBy(err, p.id, p.addr); e != nil {
			return e
		}
		return fmt.Errorf("peer %d at %s: snapshot of group %d: %w", p.id, p.addr, m.Group, err)
	}
	if err := stream.Send(&clusterv1.SnapshotRequest{Frame: &clusterv1.SnapshotRequest_Header{Header: &clusterv1.SnapshotHeader{
		Hello: t.hello(p.id), GroupId: m.Group, Message: hb, DataBytes: uint64(len(data)),
	}}}); err != nil {
		return fail(err)
	}
	for off := 0; off < len(data); off += t.cfg.Limits.SnapshotChunkBytes {
		end := min(off+t.cfg.Limits.SnapshotChunkBytes, len(data))
		if err := stream.Send(&clusterv1.SnapshotRequest{Frame: &clusterv1.SnapshotRequest_Chunk{Chunk: data[off:end]}}); err != nil {
			return fail(err)
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		if e := refusedBy(err, p.id, p.addr); e != nil {
			return e
		}
		return fmt.Errorf("peer %d at %s: snapshot of group %d: %w", p.id, p.addr, m.Group, err)
	}
	return nil
}

// maxSnapshotPrealloc caps what a header's announced size may make the
// receiver allocate up front; a hostile header gets no more.
const maxSnapshotPrealloc = 4 << 20

// decodeSnapshotHeader checks a snapshot header whose Hello passed, from
// peer to local: the data it announces within maxBytes
// (RESOURCE_EXHAUSTED), its message a MsgSnap with a snapshot from peer to
// local (INVALID_ARGUMENT). It returns the message and the data's length.
// It never panics on any input (FuzzSnapshotHeader).
func decodeSnapshotHeader(hdr *clusterv1.SnapshotHeader, peer, local uint64, maxBytes int64) (raftpb.Message, int, error) {
	var m raftpb.Message
	if n := hdr.GetDataBytes(); n > uint64(maxBytes) {
		return m, 0, status.Errorf(codes.ResourceExhausted, "snapshot of group %d from node %d announces %d bytes, above this node's limit of %d (MaxSnapshotBytes): raise the limit on every node",
			hdr.GetGroupId(), peer, n, maxBytes)
	}
	if err := m.Unmarshal(hdr.GetMessage()); err != nil {
		return m, 0, status.Errorf(codes.InvalidArgument, "snapshot header of group %d: undecodable raft message: %v", hdr.GetGroupId(), err)
	}
	if err := checkMessage(&m, peer, local); err != nil || m.Type != raftpb.MsgSnap || m.Snapshot == nil {
		return m, 0, status.Errorf(codes.InvalidArgument, "snapshot header of group %d: not a MsgSnap from node %d to node %d (type %v, from %d, to %d)",
			hdr.GetGroupId(), peer, local, m.Type, m.From, m.To)
	}
	return m, int(hdr.GetDataBytes()), nil
}

// Snapshot receives one MsgSnap: the header is checked like a Hello and a
// message, the data must be exactly as long as announced and within
// MaxSnapshotBytes, then the Handler takes it.
func (s *server) Snapshot(stream clusterv1.PeerService_SnapshotServer) error {
	t := s.t
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hdr := first.GetHeader()
	if hdr == nil {
		return status.Error(codes.InvalidArgument, "the first frame of a Snapshot stream must be a SnapshotHeader")
	}
	peer := hdr.GetHello().GetFromNode()
	if err := t.admit(stream.Context(), hdr.GetHello()); err != nil {
		return err
	}
	m, want, err := decodeSnapshotHeader(hdr, peer, t.cfg.NodeID, t.cfg.Limits.MaxSnapshotBytes)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			t.c.malformed.Add(1)
		}
		return err
	}
	data := make([]byte, 0, min(want, maxSnapshotPrealloc))
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		chunk := req.GetChunk()
		if req.GetHeader() != nil || len(data)+len(chunk) > want {
			t.c.malformed.Add(1)
			return status.Errorf(codes.InvalidArgument, "snapshot of group %d: more data than the %d bytes announced, or a second header", hdr.GetGroupId(), want)
		}
		data = append(data, chunk...)
	}
	if len(data) != want {
		t.c.malformed.Add(1)
		return status.Errorf(codes.InvalidArgument, "snapshot of group %d ended after %d of the %d bytes announced", hdr.GetGroupId(), len(data), want)
	}
	m.Snapshot.Data = data
	if err := t.cfg.Handler.HandleSnapshot(stream.Context(), Message{Group: hdr.GetGroupId(), Msg: m}); err != nil {
		if errors.Is(err, ErrUnknownGroup) {
			t.c.unknownGroup.Add(1)
			return status.Errorf(codes.NotFound, "snapshot of group %d: %v", hdr.GetGroupId(), err)
		}
		t.c.handlerErrors.Add(1)
		return status.Errorf(codes.Unavailable, "snapshot of group %d: %v", hdr.GetGroupId(), err)
	}
	t.c.snapshotsReceived.Add(1)
	return stream.SendAndClose(&clusterv1.SnapshotResponse{})
}
