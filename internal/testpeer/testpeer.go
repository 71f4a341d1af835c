// Package testpeer plays a process that reaches a Spool cluster's peer
// port, for tests that attack real spoold processes (sidecar/e2e): it
// encodes what a peer sends (a controller record, raft heartbeats on a
// transport stream that claims a node id) and reads the raft term a node
// saved. It holds the engine's peer-side encodings so that the tests above
// the engine need not import them (scripts/banned.sh). Nothing here is for
// a deployment.
package testpeer

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	slog "github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/raft"
	"github.com/spoolmq/spool/engine/transport"
)

// ProtocolVersion is the cluster protocol this release speaks (a
// JoinRequest's protocol_version).
const ProtocolVersion = transport.ProtocolVersion

// ControllerGroup is the raft group of the cluster's controller.
const ControllerGroup = 0

// DeleteTopicRecord is a record batch holding a controller command that
// deletes topic, as a peer's Produce to group 0 carries it.
func DeleteTopicRecord(topic string) ([]byte, error) {
	cmd, err := meta.EncodeCommand(meta.Command{DeleteTopic: &meta.DeleteTopic{Name: topic}})
	if err != nil {
		return nil, err
	}
	return Record(cmd), nil
}

// Record is a record batch of one record holding value.
func Record(value []byte) []byte {
	return slog.EncodeRecords(nil, slog.BatchHeader{}, []slog.Record{{Value: value}}, time.Now().UnixMilli())
}

// Heartbeat is a raft heartbeat of a group from replica From to To.
type Heartbeat struct {
	Group, From, To, Term, Commit uint64
}

// Transport is a peer transport whose streams claim to be one node.
type Transport struct {
	tr     *transport.GRPC
	cancel context.CancelFunc
	done   chan struct{}
}

// Dial starts a transport that says it is node claim of cluster
// clusterID, with creds; Close stops it.
func Dial(clusterID string, claim uint64, creds credentials.TransportCredentials) (*Transport, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr, err := transport.NewGRPC(transport.GRPCConfig{
		ClusterID: clusterID, NodeID: claim, Handler: dropAll{}, Listener: l,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(creds)},
	})
	if err != nil {
		l.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{tr: tr, cancel: cancel, done: make(chan struct{})}
	go func() { _ = tr.Run(ctx); close(t.done) }()
	return t, nil
}

// Send opens (in the background, retrying) a stream to node at addr and
// queues the heartbeats on it.
func (t *Transport) Send(node uint64, addr string, beats ...Heartbeat) error {
	if err := t.tr.AddPeer(node, addr); err != nil {
		return err
	}
	msgs := make([]transport.Message, len(beats))
	for i, b := range beats {
		msgs[i] = transport.Message{Group: b.Group, Msg: raftpb.Message{Type: raftpb.MsgHeartbeat, From: b.From, To: b.To, Term: b.Term, Commit: b.Commit}}
	}
	t.tr.Send(msgs)
	return nil
}

// Close stops the transport and waits for it.
func (t *Transport) Close() {
	t.cancel()
	<-t.done
}

// dropAll takes whatever the transport receives and drops it.
type dropAll struct{}

func (dropAll) HandleMessage(transport.Message) error                   { return nil }
func (dropAll) HandleSnapshot(context.Context, transport.Message) error { return nil }
func (dropAll) PeerUnreachable(uint64)                                  {}
func (dropAll) SnapshotDone(uint64, uint64, error)                      {}

// SavedTerm is the raft term of group that the node with data directory
// dataDir last saved (its raft/<group>/raft.state).
func SavedTerm(dataDir string, group uint64) (uint64, error) {
	s, st, err := raft.OpenStateStore(slog.OSFS{}, filepath.Join(dataDir, "raft", fmt.Sprint(group)))
	if err != nil {
		return 0, err
	}
	s.Close()
	return st.HardState.Term, nil
}
