package transport

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// The codec is pure: messages in, frames out, and back. No I/O, no clock.

// coalescable reports whether m can travel in the compact heartbeat form:
// a heartbeat or heartbeat response with nothing but From, To, Term and
// Commit set. A heartbeat that carries a read-index context (ReadOnlySafe)
// goes as a full message.
func coalescable(m *raftpb.Message) bool {
	if m.Type != raftpb.MsgHeartbeat && m.Type != raftpb.MsgHeartbeatResp {
		return false
	}
	return m.LogTerm == 0 && m.Index == 0 && len(m.Entries) == 0 && m.Vote == 0 &&
		m.Snapshot == nil && !m.Reject && m.RejectHint == 0 && len(m.Context) == 0 && len(m.Responses) == 0
}

func heartbeatOf(m *Message) *clusterv1.Heartbeat {
	return &clusterv1.Heartbeat{
		GroupId: m.Group, From: m.Msg.From, To: m.Msg.To, Term: m.Msg.Term, Commit: m.Msg.Commit,
		Response: m.Msg.Type == raftpb.MsgHeartbeatResp,
	}
}

func messageOf(h *clusterv1.Heartbeat) Message {
	t := raftpb.MsgHeartbeat
	if h.GetResponse() {
		t = raftpb.MsgHeartbeatResp
	}
	return Message{Group: h.GetGroupId(), Msg: raftpb.Message{
		Type: t, From: h.GetFrom(), To: h.GetTo(), Term: h.GetTerm(), Commit: h.GetCommit(),
	}}
}

// Encoded sizes of a frame's parts, for closing a frame at MaxBatchBytes.
func groupMessageSize(group uint64, n int) int {
	inner := protowire.SizeTag(1) + protowire.SizeVarint(group) + protowire.SizeTag(2) + protowire.SizeBytes(n)
	return protowire.SizeTag(2) + protowire.SizeBytes(inner)
}

const heartbeatSizeMax = 2 + 6*11 // tag and length, six fields of at most 11 bytes

// encoder turns queued messages into frames. Reused across flushes by one
// sender goroutine.
type encoder struct {
	maxBatchBytes int
	coalesce      bool
}

// frameStats says what went into the frames of one encode.
type frameStats struct {
	messages, heartbeats int
}

// encode packs msgs into batches of at most maxBatchBytes each (a message
// larger than that alone in its batch). Heartbeats that can be coalesced go
// into the batch's compact list; every other message keeps its order.
// Messages that fail to marshal (cannot happen for raftpb) are skipped.
func (e encoder) encode(msgs []Message) ([]*clusterv1.Batch, frameStats) {
	var (
		out  []*clusterv1.Batch
		cur  = &clusterv1.Batch{}
		size int
		st   frameStats
	)
	closeFrame := func() {
		if len(cur.Heartbeats)+len(cur.Messages) > 0 {
			out = append(out, cur)
		}
		cur, size = &clusterv1.Batch{}, 0
	}
	for i := range msgs {
		m := &msgs[i]
		if e.coalesce && coalescable(&m.Msg) {
			if size+heartbeatSizeMax > e.maxBatchBytes && size > 0 {
				closeFrame()
			}
			cur.Heartbeats = append(cur.Heartbeats, heartbeatOf(m))
			size += heartbeatSizeMax
			st.heartbeats++
			st.messages++
			continue
		}
		b, err := m.Msg.Marshal()
		if err != nil {
			continue
		}
		n := groupMessageSize(m.Group, len(b))
		if size+n > e.maxBatchBytes && size > 0 {
			closeFrame()
		}
		cur.Messages = append(cur.Messages, &clusterv1.GroupMessage{GroupId: m.Group, Message: b})
		size += n
		st.messages++
	}
	closeFrame()
	return out, st
}

// decodeError says why a received message was refused.
var (
	errUndecodable = errors.New("undecodable raft message")
	errTooLarge    = errors.New("raft message above MaxMessageBytes")
	errSender      = errors.New("raft message not from the peer of this stream")
	errReceiver    = errors.New("raft message not for this node")
	errLocalType   = errors.New("raft message of a local-only or unknown type")
	errSnapOnRaft  = errors.New("MsgSnap on the Raft stream (snapshots travel on the Snapshot RPC)")
)

// checkMessage refuses what no peer may send us: messages from another
// node than the stream's peer, for another node than this one, of a type
// raft only uses locally (MsgHup, MsgStorageAppend, ...) or of no known type.
func checkMessage(m *raftpb.Message, peer, local uint64) error {
	switch {
	case m.From != peer:
		return errSender
	case m.To != local:
		return errReceiver
	case raftpb.MessageType_name[int32(m.Type)] == "" || raft.IsLocalMsg(m.Type):
		return errLocalType
	}
	return nil
}

// decodeBatch turns a received batch into messages for the Handler:
// heartbeats first (expanded into ordinary raft messages), then the other
// messages in order. Each message that fails a check is left out and its
// reason appended to bad; the rest are delivered. It never panics on any
// input (FuzzDecodeBatch).
func decodeBatch(b *clusterv1.Batch, peer, local uint64, maxMessageBytes int, out []Message) (msgs []Message, bad []error) {
	msgs = out[:0]
	for _, h := range b.GetHeartbeats() {
		m := messageOf(h)
		if err := checkMessage(&m.Msg, peer, local); err != nil {
			bad = append(bad, fmt.Errorf("heartbeat of group %d: %w", h.GetGroupId(), err))
			continue
		}
		msgs = append(msgs, m)
	}
	for _, gm := range b.GetMessages() {
		if len(gm.GetMessage()) > maxMessageBytes {
			bad = append(bad, fmt.Errorf("group %d: %d bytes: %w", gm.GetGroupId(), len(gm.GetMessage()), errTooLarge))
			continue
		}
		var m raftpb.Message
		if err := m.Unmarshal(gm.GetMessage()); err != nil {
			bad = append(bad, fmt.Errorf("group %d: %w: %v", gm.GetGroupId(), errUndecodable, err))
			continue
		}
		if err := checkMessage(&m, peer, local); err != nil {
			bad = append(bad, fmt.Errorf("group %d, %v: %w", gm.GetGroupId(), m.Type, err))
			continue
		}
		if m.Type == raftpb.MsgSnap {
			bad = append(bad, fmt.Errorf("group %d: %w", gm.GetGroupId(), errSnapOnRaft))
			continue
		}
		msgs = append(msgs, Message{Group: gm.GetGroupId(), Msg: m})
	}
	return msgs, bad
}
