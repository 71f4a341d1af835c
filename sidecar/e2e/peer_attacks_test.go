package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/internal/release"
	"github.com/spoolmq/spool/internal/testpeer"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// The attacks of docs/security.md's "Peers" table, from a process that is
// not a member, against real spoold processes started with mutual TLS, a
// certificate per node and a join secret. The attacker holds what a
// storage-off sidecar holds: a certificate of the cluster's CA under the
// nodes' peer_uri_prefix (no member's identity) and the join secret. Each
// attack is refused, the receiving node logs why and counts it
// (spool_cluster_peer_refusals_total), and nothing changes: the
// topic keeps its records, the members their addresses, group 0 its term,
// and every node serves publishes.
func TestClusterRefusesNonMemberAttacks(t *testing.T) {
	sc := &spoolCluster{t: t, creds: newPeerCreds(t), tail: clusterTopics}
	sc.creds.perNode = true
	for range 3 {
		sc.addNode()
	}
	awaitPlaced(t, sc.nodes[0])
	topicBefore := topicOffsets(t, sc.nodes[0], "orders")
	membersBefore := memberAddrs(t, sc.nodes[0])
	ids := map[*node]uint64{}
	for _, n := range sc.nodes {
		for id, addr := range membersBefore {
			if addr == n.peer {
				ids[n] = id
			}
		}
	}
	if len(ids) != 3 {
		t.Fatalf("members %v: not the three nodes", membersBefore)
	}
	termsBefore := map[*node]uint64{}
	for _, n := range sc.nodes {
		termsBefore[n] = controllerTerm(t, n)
	}

	sc.creds.issue(t, "attacker", peerIdentity+"/attacker")
	cert, err := tls.LoadX509KeyPair(filepath.Join(sc.creds.dir, "attacker.crt"), filepath.Join(sc.creds.dir, "attacker.key"))
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	victim := sc.nodes[0]
	cl := peerClient(t, victim.peer, creds)
	md, err := cl.Metadata(ctx, &clusterv1.MetadataRequest{})
	if err != nil {
		t.Fatalf("the attacker's certificate is a storage-off node's, which reads the metadata: %v", err)
	}
	clusterID := md.GetClusterId()

	// Group 0: a DeleteTopic of a declared topic, and a record that is no
	// controller command.
	del, err := testpeer.DeleteTopicRecord("orders")
	if err != nil {
		t.Fatal(err)
	}
	for name, records := range map[string][]byte{"DeleteTopic": del, "undecodable": testpeer.Record([]byte("not a controller command"))} {
		resp, err := cl.Produce(ctx, &clusterv1.ProduceRequest{ClusterId: clusterID, Group: testpeer.ControllerGroup, Records: records})
		if err != nil || resp.GetError() != clusterv1.ProduceError_PRODUCE_ERROR_INVALID {
			t.Fatalf("a %s record to group 0: %v, %v; want PRODUCE_ERROR_INVALID", name, resp, err)
		}
	}
	awaitLogLines(t, victim, 1, "spool cluster: refused a peer's produce", "only the cluster's members change it")
	awaitLogLines(t, victim, 1, "spool cluster: refused a peer's produce", "no command of this log")

	// The transport: a stream whose Hello claims to be node 1, carrying a
	// heartbeat of term 1,000,000 and one committing index 999999999.
	beats := func(claim, to uint64) []testpeer.Heartbeat {
		return []testpeer.Heartbeat{
			{Group: testpeer.ControllerGroup, From: claim, To: to, Term: 1_000_000},
			{Group: testpeer.ControllerGroup, From: claim, To: to, Term: 1, Commit: 999_999_999},
		}
	}
	impersonator := attackTransport(t, clusterID, ids[sc.nodes[0]], creds)
	for _, n := range sc.nodes[1:] {
		if err := impersonator.Send(ids[n], n.peer, beats(ids[sc.nodes[0]], ids[n])...); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range sc.nodes[1:] {
		awaitLogLines(t, n, 1, "spool transport: refused an inbound stream: the peer is not the node it claims to be", "claimed_node=1")
	}

	// A stream claiming a node id no member has (a node admitted a moment
	// ago looks the same to a node that has not applied its admission).
	stranger := attackTransport(t, clusterID, 9, creds)
	for _, n := range sc.nodes {
		if err := stranger.Send(ids[n], n.peer, beats(9, ids[n])...); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range sc.nodes {
		awaitLogLines(t, n, 1, "spool transport: refused an inbound stream", "claims a node id that is no member's")
	}

	// The join token node 3 was admitted with (its identity file), sent
	// with the join secret and another address, to every node, by a
	// joiner of this release (its cluster versions: an older release's is
	// refused for that first).
	var ident struct {
		Token string `json:"token"`
	}
	b, err := os.ReadFile(filepath.Join(sc.nodes[2].dataDir, "cluster", "identity.json"))
	if err == nil {
		err = json.Unmarshal(b, &ident)
	}
	if err != nil || ident.Token == "" {
		t.Fatalf("node 3's identity file: %v", err)
	}
	secret, err := os.ReadFile(sc.creds.secret)
	if err != nil {
		t.Fatal(err)
	}
	jctx := metadata.AppendToOutgoingContext(ctx, "spool-join-secret", strings.TrimSpace(string(secret)))
	const rogueAddr = "127.0.0.1:9"
	lowest, highest := release.ClusterVersions()
	for _, n := range sc.nodes {
		_, err := peerClient(t, n.peer, creds).Join(jctx, &clusterv1.JoinRequest{Addr: rogueAddr, Token: ident.Token, ProtocolVersion: testpeer.ProtocolVersion,
			ClusterVersionMin: lowest, ClusterVersionMax: highest})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("node 3's join token from another identity, via %s: %v; want PermissionDenied", n.peer, err)
		}
	}
	// The controller's leader decides joins and logs each refusal (the
	// three in one log unless leadership moved meanwhile).
	eventually(t, 10*time.Second, "the refusals of node 3's token in the controller leader's log", func() bool {
		total := 0
		for _, n := range sc.nodes {
			total += logCount(t, n, "spool cluster: refused a join", "addr="+rogueAddr, "the join token is node")
		}
		return total >= 3
	})

	// Each refusal is counted where it was made.
	refusals := func(n *node, reason string) float64 {
		return metricValue(t, n, fmt.Sprintf("spool_cluster_peer_refusals_total{reason=%q}", reason))
	}
	eventually(t, 10*time.Second, "the refusals in spool_cluster_peer_refusals_total", func() bool {
		joins := 0.0
		for _, n := range sc.nodes {
			joins += refusals(n, "join")
		}
		return refusals(victim, "produce") >= 2 && refusals(victim, "identity") >= 1 && // the stranger
			refusals(sc.nodes[1], "identity") >= 2 && refusals(sc.nodes[2], "identity") >= 2 && joins >= 3
	})

	// Nothing changed.
	if got := topicOffsets(t, sc.nodes[0], "orders"); got != topicBefore {
		t.Fatalf("topic orders after the attacks: %s, before: %s", got, topicBefore)
	}
	if got := memberAddrs(t, sc.nodes[0]); fmt.Sprint(got) != fmt.Sprint(membersBefore) {
		t.Fatalf("members after the attacks: %v, before: %v", got, membersBefore)
	}
	for _, n := range sc.nodes {
		// Unchanged but for an election or two that a loaded machine may
		// hold meanwhile; the attacks' heartbeats carry term 1,000,000.
		if term := controllerTerm(t, n); term >= termsBefore[n]+maxElections {
			t.Fatalf("node %d's group 0 is at term %d, %d before the attacks: raised by the attacker", ids[n], term, termsBefore[n])
		}
		select {
		case <-n.exited:
			t.Fatalf("node %d exited", ids[n])
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := n.client(pctx).Publish(pctx, "orders", []byte("k"), []byte("after the attacks"))
		pcancel()
		if err != nil {
			t.Fatalf("publish through node %d after the attacks: %v", ids[n], err)
		}
	}
}

// maxElections bounds the elections a stable cluster may hold while the
// attacks run (a term raised by the attacker is 1,000,000).
const maxElections = 10

// peerClient is a NodeService client of the peer port addr with creds.
func peerClient(t *testing.T, addr string, creds credentials.TransportCredentials) clusterv1.NodeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return clusterv1.NewNodeServiceClient(conn)
}

// attackTransport is a peer transport that says it is node claim, with
// creds; it runs until the test ends.
func attackTransport(t *testing.T, clusterID string, claim uint64, creds credentials.TransportCredentials) *testpeer.Transport {
	t.Helper()
	tr, err := testpeer.Dial(clusterID, claim, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// logCount counts the lines of n's log holding every one of parts.
func logCount(t *testing.T, n *node, parts ...string) int {
	t.Helper()
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			count++
		}
	}
	return count
}

// awaitLogLines waits until n's log has at least k lines holding every
// one of parts.
func awaitLogLines(t *testing.T, n *node, k int, parts ...string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d log lines with %q", k, parts), func() bool { return logCount(t, n, parts...) >= k })
}

// topicOffsets is a topic's partitions' start and end offsets as n's
// admin API lists them.
func topicOffsets(t *testing.T, n *node, topic string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := n.adminClient().ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range resp.GetTopics() {
		if tp.GetName() == topic {
			var s []string
			for _, p := range tp.GetPartitions() {
				s = append(s, fmt.Sprintf("%d:[%d,%d)", p.GetPartition(), p.GetStartOffset(), p.GetEndOffset()))
			}
			return strings.Join(s, " ")
		}
	}
	t.Fatalf("no topic %s", topic)
	return ""
}

// memberAddrs is the members' peer addresses by node id, as n's admin API
// lists them.
func memberAddrs(t *testing.T, n *node) map[uint64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := n.adminClient().ClusterStatus(ctx, &spoolv1.ClusterStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint64]string{}
	for _, nd := range st.GetNodes() {
		id, err := strconv.ParseUint(nd.GetId(), 10, 64)
		if err != nil {
			t.Fatalf("node id %q: %v", nd.GetId(), err)
		}
		m[id] = nd.GetAddress()
	}
	return m
}

// controllerTerm is the term of raft group 0 (the controller) that node n
// last saved to disk.
func controllerTerm(t *testing.T, n *node) uint64 {
	t.Helper()
	term, err := testpeer.SavedTerm(n.dataDir, testpeer.ControllerGroup)
	if err != nil {
		t.Fatal(err)
	}
	return term
}
