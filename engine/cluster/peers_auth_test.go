package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups/coord"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/transport"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// nodeClient dials a node's cluster port as any process could.
func nodeClient(t *testing.T, addr string, creds grpc.DialOption) clusterv1.NodeServiceClient {
	t.Helper()
	if creds == nil {
		creds = grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return clusterv1.NewNodeServiceClient(conn)
}

// controllerRecord is a controller proposal as a peer sends it.
func controllerRecord(value []byte) []byte {
	return log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: value}}, time.Now().UnixMilli())
}

// What a process that reaches the cluster port of a cluster without TLS
// can no longer do: read the join tokens (Metadata), write to the
// controller's log what is no controller command, write into an internal
// topic, or join without the join secret. The cluster is unchanged after.
func TestClusterRefusesPeerAttacks(t *testing.T) {
	tc := newTestCluster(t, 3, func(i int, cn *clusterNode) { cn.secret = "s3cret" })
	leader := tc.nodes[0]
	if err := leader.n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for _, cn := range tc.nodes {
		awaitCond(t, 20*time.Second, "every node is a member", func() error { return cn.n.awaitReady(time.Second) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := nodeClient(t, leader.addr, nil)

	md, err := cl.Metadata(ctx, &clusterv1.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := meta.DecodeState(md.GetState())
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range st.Nodes() {
		if real, _ := leader.n.state.Node(nd.ID); nd.Token == real.Token {
			t.Fatalf("Metadata shows node %d's join token", nd.ID)
		}
	}

	var ctrlLeader *clusterNode
	awaitCond(t, 20*time.Second, "a controller leader", func() error {
		for _, cn := range tc.nodes {
			if s, ok := cn.n.asMember().host.Status(controllerGroup); ok && s.IsLeader {
				ctrlLeader = cn
				return nil
			}
		}
		return errNoLeaderYet
	})
	lc := nodeClient(t, ctrlLeader.addr, nil)
	clusterID := ctrlLeader.n.id.ClusterID
	end := ctrlLeader.n.asMember().ctrlCommitted()
	for name, data := range map[string][]byte{
		"undecodable": controllerRecord([]byte("not a controller command")),
		"invalid":     controllerRecord(mustEncode(t, meta.Command{CreateTopic: &meta.CreateTopic{Spec: meta.TopicSpec{Name: "bad name!", Partitions: 1, ReplicationFactor: 1}}})),
		"two records": log.EncodeRecords(nil, log.BatchHeader{}, []log.Record{{Value: mustEncode(t, meta.Command{DeleteTopic: &meta.DeleteTopic{Name: "orders"}})}, {Value: []byte("x")}}, 1),
	} {
		resp, err := lc.Produce(ctx, &clusterv1.ProduceRequest{ClusterId: clusterID, Group: controllerGroup, Records: data})
		if err != nil || resp.GetError() != clusterv1.ProduceError_PRODUCE_ERROR_INVALID {
			t.Fatalf("%s controller record: %v, %v", name, resp, err)
		}
	}
	resp, err := lc.Produce(ctx, &clusterv1.ProduceRequest{ClusterId: clusterID, Topic: meta.GroupsTopic, Partition: 0, Group: 1, Records: controllerRecord([]byte("x"))})
	if err != nil || resp.GetError() != clusterv1.ProduceError_PRODUCE_ERROR_INVALID || !strings.Contains(resp.GetMessage(), "internal") {
		t.Fatalf("a record for the groups' coordinators: %v, %v", resp, err)
	}
	if got := ctrlLeader.n.asMember().ctrlCommitted(); got != end {
		t.Fatalf("the controller's log moved from %d to %d", end, got)
	}

	for _, secret := range []string{"", "wrong"} {
		jctx := ctx
		if secret != "" {
			jctx = metadata.AppendToOutgoingContext(ctx, joinSecretKey, secret)
		}
		_, err := cl.Join(jctx, &clusterv1.JoinRequest{Addr: "127.0.0.1:1", Token: "intruder-token", ProtocolVersion: transport.ProtocolVersion})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a join with secret %q: %v", secret, err)
		}
	}
	if s, _ := leader.n.ClusterStatus(); len(s.Members) != 3 {
		t.Fatalf("members: %+v", s.Members)
	}
	// Counted where refused: the writes at the controller's leader, the
	// joins at the node asked.
	if s, _ := ctrlLeader.n.ClusterStatus(); s.PeerRefusals["produce"] != 4 {
		t.Errorf("the controller leader's refusals %v, want 4 produce", s.PeerRefusals)
	}
	if s, _ := leader.n.ClusterStatus(); s.PeerRefusals["join"] != 2 {
		t.Errorf("node 1's refusals %v, want 2 join", s.PeerRefusals)
	}
}

// errNoLeaderYet: a condition not met yet.
var errNoLeaderYet = errors.New("not yet")

func mustTLS(t *testing.T, c ClusterTLS) *tlsFiles {
	t.Helper()
	f, err := newTLSFiles(c)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func listenTCP(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// nopHandler takes whatever a transport receives and drops it.
type nopHandler struct{}

func (nopHandler) HandleMessage(transport.Message) error                   { return nil }
func (nopHandler) HandleSnapshot(context.Context, transport.Message) error { return nil }
func (nopHandler) PeerUnreachable(uint64)                                  {}
func (nopHandler) SnapshotDone(uint64, uint64, error)                      {}

func mustEncode(t *testing.T, c meta.Command) []byte {
	t.Helper()
	b, err := meta.EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// With per-node certificate identities, a holder of a valid certificate
// of the cluster that is not node 1 cannot speak as node 1: its raft
// stream is refused before raft sees a message; and a storage-off node's
// certificate (a valid one, no member's) may create topics but not delete
// them.
func TestClusterPeerIdentities(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "spool-test-ca")
	both := certShape{eku: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	issue := func(name string) ClusterTLS {
		sh := both
		sh.uris = []string{testIdentity + "/" + name}
		f := ca.issue(t, dir, name, sh)
		f.PeerURIPrefix = testIdentity + "/"
		return f
	}
	tc := newTestCluster(t, 2, func(i int, cn *clusterNode) { cn.tls, cn.logs = issue(fmt.Sprintf("node-%d", i)), &logLines{} })
	for _, cn := range tc.nodes {
		awaitCond(t, 20*time.Second, "every node is a member", func() error { return cn.n.awaitReady(time.Second) })
	}
	for _, cn := range tc.nodes {
		self, _ := cn.n.state.Node(cn.n.id.NodeID)
		if want := fmt.Sprintf("%s/node-%d", testIdentity, cn.n.id.NodeID-1); self.Identity != want {
			t.Fatalf("node %d recorded as %q, want %q", cn.n.id.NodeID, self.Identity, want)
		}
	}

	// An impersonator: a valid certificate, node 1's id; then the same
	// certificate as node 9, which no member is.
	target := tc.nodes[1]
	files := mustTLS(t, issue("evil"))
	awaitCond(t, 20*time.Second, "the target follows the controller's leader", func() error {
		if s, _ := target.n.asMember().host.Status(controllerGroup); s.Leader == 0 {
			return errNoLeaderYet
		}
		return nil
	})
	for _, tcase := range []struct {
		claim uint64
		line  []string
	}{
		{1, []string{"refused an inbound stream: the peer is not the node it claims to be", "claimed_node=1", "node 1 is " + testIdentity + "/node-0"}},
		{9, []string{"refused an inbound stream", "claimed_node=9", "claims a node id that is no member's"}},
	} {
		before := target.n.asMember().tr.Stats()
		imp, err := transport.NewGRPC(transport.GRPCConfig{
			ClusterID: target.n.id.ClusterID, NodeID: tcase.claim, Handler: nopHandler{}, Listener: listenTCP(t),
			DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(files.clientConfig()))},
		})
		if err != nil {
			t.Fatal(err)
		}
		ictx, icancel := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() { _ = imp.Run(ictx); close(ran) }()
		if err := imp.AddPeer(target.n.id.NodeID, target.addr); err != nil {
			t.Fatal(err)
		}
		imp.Send([]transport.Message{{Group: controllerGroup, Msg: raftpb.Message{Type: raftpb.MsgHeartbeat, From: tcase.claim, To: target.n.id.NodeID, Term: 1_000_000}}})
		awaitCond(t, 20*time.Second, "the impersonator is refused", func() error {
			if target.logs.matching(tcase.line...) == 0 {
				return fmt.Errorf("node %d claimed: no log line with %q in %q", tcase.claim, tcase.line, target.logs.all())
			}
			return nil
		})
		icancel()
		<-ran
		if got := target.n.asMember().tr.Stats().Unauthorized; got == before.Unauthorized {
			t.Fatalf("node %d claimed: refused streams still %d", tcase.claim, got)
		}
		if s, _ := target.n.asMember().host.Status(controllerGroup); s.Term >= 1_000_000 {
			t.Fatalf("node %d claimed: the impersonator raised group 0's term to %d", tcase.claim, s.Term)
		}
	}

	// A storage-off node's certificate: valid, no member's identity.
	var ctrlLeader *clusterNode
	awaitCond(t, 20*time.Second, "a controller leader", func() error {
		for _, cn := range tc.nodes {
			if s, ok := cn.n.asMember().host.Status(controllerGroup); ok && s.IsLeader {
				ctrlLeader = cn
				return nil
			}
		}
		return errNoLeaderYet
	})
	client := nodeClient(t, ctrlLeader.addr, grpc.WithTransportCredentials(credentials.NewTLS(mustTLS(t, issue("client")).clientConfig())))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := meta.TopicSpec{Name: "orders", Partitions: 1, ReplicationFactor: 1}
	for _, tcase := range []struct {
		cmd  meta.Command
		want clusterv1.ProduceError
	}{
		{meta.Command{CreateTopic: &meta.CreateTopic{Spec: spec}}, clusterv1.ProduceError_PRODUCE_ERROR_UNSPECIFIED},
		{meta.Command{DeleteTopic: &meta.DeleteTopic{Name: "orders"}}, clusterv1.ProduceError_PRODUCE_ERROR_INVALID},
	} {
		resp, err := client.Produce(ctx, &clusterv1.ProduceRequest{ClusterId: ctrlLeader.n.id.ClusterID, Group: controllerGroup, Records: controllerRecord(mustEncode(t, tcase.cmd))})
		if err != nil || resp.GetError() != tcase.want {
			t.Fatalf("%+v from a storage-off node's certificate: %v, %v", tcase.cmd, resp, err)
		}
	}
	// Applied after the delete was refused: the topic is there for good.
	awaitCond(t, 20*time.Second, "the topic a storage-off node created", func() error {
		ctrlLeader.n.mu.Lock()
		defer ctrlLeader.n.mu.Unlock()
		if _, ok := ctrlLeader.n.state.Topic("orders"); !ok {
			return errNoLeaderYet
		}
		return nil
	})

	// A coordinator command from the storage-off node's certificate: a
	// member on node 1 is refused (it is not node 1), one on no node is
	// not; checkpoints and topic drops are never a peer's to send.
	asClient := peerContext(t, mustTLS(t, issue("client")))
	n := tc.nodes[0].n
	for _, tcase := range []struct {
		cmd    coord.Command
		refuse bool
	}{
		{coord.Command{Group: "g", Join: &coord.Join{Member: "m", Session: "s", Node: 1}}, true},
		{coord.Command{Group: "g", Join: &coord.Join{Member: "m", Session: "s"}}, false},
		{coord.Command{Checkpoint: &coord.Checkpoint{}}, true},
		{coord.Command{DropTopic: &coord.DropTopic{Topic: "orders"}}, true},
	} {
		if err := n.checkCoordinate(asClient, tcase.cmd); (err != nil) != tcase.refuse {
			t.Fatalf("%+v from a storage-off node's certificate: %v", tcase.cmd, err)
		}
	}
	if err := n.checkCoordinate(peerContext(t, mustTLS(t, issue("node-0"))), coord.Command{Group: "g", Join: &coord.Join{Member: "m", Session: "s", Node: 1}}); err != nil {
		t.Fatalf("node 1's own member: %v", err)
	}
}

// peerContext is the context of a call from the holder of files'
// certificate, as the gRPC server gives a handler.
func peerContext(t *testing.T, files *tlsFiles) context.Context {
	t.Helper()
	cert, _ := files.current()
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert.Leaf}}}})
}
