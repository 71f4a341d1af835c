package transport

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// FuzzDecodeFrame feeds arbitrary bytes to what a node does with a frame
// from the network: decode the RaftRequest, then check and expand its
// batch (the compact heartbeats and the full messages). It must never
// panic, and whatever it delivers must have passed the checks (from the
// stream's peer, to this node, a type a peer may send, not a snapshot);
// heartbeats come out first, as heartbeats carrying nothing but their
// columns (none of them when the columns differ in length), and every
// heartbeat and message is either delivered or refused with a reason. Seeds:
// testdata/fuzz/FuzzDecodeFrame.
func FuzzDecodeFrame(f *testing.F) {
	good, _ := (&raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Entries: []raftpb.Entry{{Data: []byte("x")}}}).Marshal()
	seed, _ := proto.Marshal(&clusterv1.RaftRequest{Frame: &clusterv1.RaftRequest_Batch{Batch: &clusterv1.Batch{
		Heartbeats: &clusterv1.Heartbeats{GroupIds: []uint64{3}, Froms: []uint64{2}, Tos: []uint64{1}, Terms: []uint64{5}, Commits: []uint64{9}, Responses: []bool{false}},
		Messages:   []*clusterv1.GroupMessage{{GroupId: 3, Message: good}},
	}}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req clusterv1.RaftRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		b := req.GetBatch()
		msgs, bad := decodeBatch(b, 2, 1, 4096, nil)
		n := heartbeatCount(b.GetHeartbeats())
		for i, m := range msgs {
			if checkMessage(&m.Msg, 2, 1) != nil || m.Msg.Type == raftpb.MsgSnap {
				t.Fatalf("delivered a message that fails the checks: %+v", m.Msg)
			}
			if i < n-len(bad) && !isCompactHeartbeat(m) {
				t.Fatalf("heartbeat %d delivered as %+v", i, m.Msg)
			}
		}
		want := len(b.GetMessages()) + max(n, 0)
		if n < 0 {
			want++ // the columns, refused as one
		}
		if len(msgs)+len(bad) != want {
			t.Fatalf("%d delivered and %d refused of %d heartbeats and %d messages", len(msgs), len(bad), n, len(b.GetMessages()))
		}
	})
}

// isCompactHeartbeat: m is what a column of Heartbeats expands to.
func isCompactHeartbeat(m Message) bool {
	return (m.Msg.Type == raftpb.MsgHeartbeat || m.Msg.Type == raftpb.MsgHeartbeatResp) && coalescable(&m.Msg)
}

// FuzzHello feeds arbitrary bytes to what a node does with the first frame
// of an inbound Raft stream (server.Raft): a Hello checked against this
// node's cluster id, protocol version and node id. It must never panic; a
// Hello it accepts names this cluster, this version and this node; one it
// refuses becomes a FAILED_PRECONDITION the dialing node decodes back to
// the same kind of error, and the refusal's text (logged on both nodes)
// holds no control character whatever the peer sent. Seeds:
// testdata/fuzz/FuzzHello.
func FuzzHello(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var req clusterv1.RaftRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		h := req.GetHello()
		if h == nil {
			return // the server ends the stream: INVALID_ARGUMENT
		}
		e := checkHello("prod", ProtocolVersion, 1, h, h.GetFromNode(), true)
		if e == nil {
			if h.GetClusterId() != "prod" || h.GetProtocolVersion() != ProtocolVersion || h.GetToNode() != 1 {
				t.Fatalf("accepted %v", h)
			}
			return
		}
		if msg := e.Error(); !utf8.ValidString(msg) || strings.ContainsFunc(msg, unicode.IsControl) {
			t.Fatalf("the refusal's text holds a control character or invalid UTF-8: %q", msg)
		}
		st := refusal(e, 1)
		if status.Code(st) != codes.FailedPrecondition {
			t.Fatalf("refusal %v: code %v", e, status.Code(st))
		}
		back := refusedBy(st, 1, "10.0.0.1:7946")
		if back == nil || back.Kind != e.Kind {
			t.Fatalf("refusal %v decodes on the dialing side as %v", e, back)
		}
		if msg := back.Error(); !utf8.ValidString(msg) || strings.ContainsFunc(msg, unicode.IsControl) {
			t.Fatalf("the dialing side's text holds a control character or invalid UTF-8: %q", msg)
		}
	})
}

// FuzzSnapshotHeader feeds arbitrary bytes to what a node does with the
// header of an inbound Snapshot stream whose Hello passed: the announced
// size is capped before anything is allocated, and only a MsgSnap with a
// snapshot, from the stream's peer to this node, gets through. It must
// never panic. Seeds: testdata/fuzz/FuzzSnapshotHeader.
func FuzzSnapshotHeader(f *testing.F) {
	const maxBytes = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		var req clusterv1.SnapshotRequest
		if err := proto.Unmarshal(data, &req); err != nil || req.GetHeader() == nil {
			return
		}
		m, want, err := decodeSnapshotHeader(req.GetHeader(), 2, 1, maxBytes)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
				t.Fatalf("refused with %v: %v", c, err)
			}
			return
		}
		if m.Type != raftpb.MsgSnap || m.Snapshot == nil || checkMessage(&m, 2, 1) != nil || want < 0 || want > maxBytes {
			t.Fatalf("accepted a header announcing %d bytes with %+v", want, m)
		}
	})
}
