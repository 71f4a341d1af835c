package transport

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// FuzzDecodeFrame feeds arbitrary bytes to what a node does with a frame
// from the network: decode the RaftRequest, then check and expand its
// batch. It must never panic, and whatever it delivers must have passed
// the checks (from the stream's peer, to this node, a type a peer may send,
// not a snapshot). Seeds: testdata/fuzz/FuzzDecodeFrame.
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
		msgs, _ := decodeBatch(req.GetBatch(), 2, 1, 4096, nil)
		for _, m := range msgs {
			if checkMessage(&m.Msg, 2, 1) != nil || m.Msg.Type == raftpb.MsgSnap {
				t.Fatalf("delivered a message that fails the checks: %+v", m.Msg)
			}
		}
	})
}
