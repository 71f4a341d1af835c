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

// appendHeartbeat adds m to the columns of hs.
func appendHeartbeat(hs *clusterv1.Heartbeats, m *Message) {
	hs.GroupIds = append(hs.GroupIds, m.Group)
	hs.Froms = append(hs.Froms, m.Msg.From)
	hs.Tos = append(hs.Tos, m.Msg.To)
	hs.Terms = append(hs.Terms, m.Msg.Term)
	hs.Commits = append(hs.Commits, m.Msg.Commit)
	hs.Responses = append(hs.Responses, m.Msg.Type == raftpb.MsgHeartbeatResp)
}

// heartbeatAt is heartbeat i of hs as a raft message.
func heartbeatAt(hs *clusterv1.Heartbeats, i int) Message {
	t := raftpb.MsgHeartbeat
	if hs.Responses[i] {
		t = raftpb.MsgHeartbeatResp
	}
	return Message{Group: hs.GroupIds[i], Msg: raftpb.Message{
		Type: t, From: hs.Froms[i], To: hs.Tos[i], Term: hs.Terms[i], Commit: hs.Commits[i],
	}}
}

// heartbeatCount is the number of heartbeats in hs, or -1 if its columns
// differ in length.
func heartbeatCount(hs *clusterv1.Heartbeats) int {
	n := len(hs.GetGroupIds())
	if len(hs.GetFroms()) != n || len(hs.GetTos()) != n || len(hs.GetTerms()) != n || len(hs.GetCommits()) != n || len(hs.GetResponses()) != n {
		return -1
	}
	return n
}

// Encoded sizes of a frame's parts, for closing a frame at MaxBatchBytes.
func groupMessageSize(group uint64, n int) int {
	inner := protowire.SizeTag(1) + protowire.SizeVarint(group) + protowire.SizeTag(2) + protowire.SizeBytes(n)
	return protowire.SizeTag(2) + protowire.SizeBytes(inner)
}

const heartbeatSizeMax = 5*10 + 1 // five varints of at most 10 bytes and a bool, packed

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
		if cur.Heartbeats != nil || len(cur.Messages) > 0 {
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
			if cur.Heartbeats == nil {
				cur.Heartbeats = &clusterv1.Heartbeats{}
			}
			appendHeartbeat(cur.Heartbeats, m)
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
	errColumns     = errors.New("heartbeat columns of different lengths (all the frame's heartbeats refused)")
	errSnapOnRaft  = errors.New("MsgSnap on the Raft stream (snapshots travel on the Snapshot RPC)")
)

// checkMessage refuses what no peer may send us: messages from another
// node than the stream's peer, for another node than this one, of a type
// raft only uses locally (MsgHup, MsgStorageAppend, ...) or of no known type.
func checkMessage(m *raftpb.Message, peer, local uint64) error {
	switch {
	case NodeOf(m.From) != peer:
		return errSender
	case NodeOf(m.To) != local:
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
	if hs := b.GetHeartbeats(); hs != nil {
		n := heartbeatCount(hs)
		if n < 0 {
			bad = append(bad, errColumns)
		}
		for i := range n {
			m := heartbeatAt(hs, i)
			if err := checkMessage(&m.Msg, peer, local); err != nil {
				bad = append(bad, fmt.Errorf("heartbeat of group %d: %w", m.Group, err))
				continue
			}
			msgs = append(msgs, m)
		}
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
