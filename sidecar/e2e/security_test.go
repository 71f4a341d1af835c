package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/internal/testpki"
	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

// peerIdentity is the certificate identity of the test clusters' nodes.
const peerIdentity = "spiffe://spool.e2e/cluster"

// peerCreds are a test cluster's credentials, as the chart mounts them: a
// CA, one node certificate every node shares, a join secret. yaml is the
// cluster section's lines that use them.
type peerCreds struct {
	dir    string
	ca     *testpki.CA
	yaml   string
	secret string // the join secret file
	// perNode gives each node a certificate of its own, identity
	// peerIdentity/<node name>, and the nodes peer_uri_prefix
	// peerIdentity/ (nodeYAML): a holder of another certificate under the
	// prefix is a valid peer but no member, as a storage-off sidecar.
	perNode bool
}

func newPeerCreds(t *testing.T) *peerCreds {
	t.Helper()
	ca, err := testpki.NewCA("spool e2e CA")
	if err != nil {
		t.Fatal(err)
	}
	pc := &peerCreds{dir: t.TempDir(), ca: ca}
	pc.issue(t, "node", peerIdentity)
	pc.secret = filepath.Join(pc.dir, "join-secret")
	writeFile(t, pc.secret, []byte("e2e-join-secret-0123456789\n"))
	pc.yaml = pc.section("node", "", pc.secret)
	return pc
}

// nodeYAML is the cluster section's lines of the node named name: the
// shared certificate's, or with perNode a certificate of its own.
func (pc *peerCreds) nodeYAML(t *testing.T, name string) string {
	t.Helper()
	if !pc.perNode {
		return pc.yaml
	}
	pc.issue(t, name, peerIdentity+"/"+name)
	return pc.section(name, peerIdentity+"/", pc.secret)
}

// section is the cluster section's lines for certificate name, a
// peer_uri_prefix (the default when empty) and a join secret file (none
// when empty).
func (pc *peerCreds) section(name, prefix, secretFile string) string {
	s := fmt.Sprintf("  tls:\n    cert_file: %s\n    key_file: %s\n    ca_file: %s\n",
		filepath.Join(pc.dir, name+".crt"), filepath.Join(pc.dir, name+".key"), filepath.Join(pc.dir, name+"-ca.crt"))
	if prefix != "" {
		s += fmt.Sprintf("    peer_uri_prefix: %s\n", prefix)
	}
	if secretFile != "" {
		s += fmt.Sprintf("  join_secret_file: %s\n", secretFile)
	}
	return s
}

// issue writes name.crt, name.key and name-ca.crt: a certificate of the CA
// with uri as its identity, good for both ends of a connection.
func (pc *peerCreds) issue(t *testing.T, name, uri string) {
	t.Helper()
	tmpl, err := testpki.Node(uri)
	if err == nil {
		_, err = pc.ca.WriteFiles(pc.dir, name, tmpl)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A cluster started as the chart starts it (mutual TLS, a join secret) is
// closed to a process without its credentials: a plaintext client gets no
// metadata; a spoold with a certificate of the cluster's own CA but without
// the join secret, and one with the secret but another identity, are not
// admitted and say why; the cluster keeps its members.
func TestClusterRefusesOutsiders(t *testing.T) {
	sc := startCluster(t, 3, "  produce_timeout: 3s\n")
	awaitPlaced(t, sc.nodes[0])

	conn, err := grpc.NewClient("passthrough:///"+sc.seed, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := clusterv1.NewNodeServiceClient(conn).Metadata(ctx, &clusterv1.MetadataRequest{}); err == nil {
		t.Fatal("a plaintext client read the cluster's metadata")
	}

	// A certificate of the cluster's CA naming another workload: refused
	// in the TLS handshake (the member's verdict comes on the first read).
	sc.creds.issue(t, "other", "spiffe://spool.e2e/checkout")
	cert, err := tls.LoadX509KeyPair(filepath.Join(sc.creds.dir, "other.crt"), filepath.Join(sc.creds.dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tls.Dial("tcp", sc.seed, &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err == nil {
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = tc.Read(make([]byte, 1))
		tc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a certificate of the CA naming another workload: %v, want a refused handshake", err)
	}

	// A spoold with the cluster's own certificate but no join secret (and
	// the opt-out that lets it start without one).
	dir := t.TempDir()
	n := &node{t: t, dataDir: filepath.Join(dir, "data"), cfgPath: filepath.Join(dir, "spool.yaml"), logPath: filepath.Join(dir, "spoold.log")}
	addrs := freeAddrs(t, 3)
	n.app, n.admin = addrs[0], addrs[1]
	cfg := fmt.Sprintf("node:\n  id: outsider\n  data_dir: %s\n  app_listen: [%q]\n  admin_listen: %q\n  drain_timeout: 5s\ncluster:\n  listen: %q\n  join: [%q]\n%s",
		n.dataDir, n.app, n.admin, addrs[2], sc.seed, sc.creds.section("node", "", "")+"  insecure_no_join_secret: true\n") + clusterTopics
	writeFile(t, n.cfgPath, []byte(cfg))
	t.Cleanup(n.kill)
	n.launch()
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("a spoold without the join secret is still running: admitted?")
	}
	if b, _ := os.ReadFile(n.logPath); !strings.Contains(string(b), "the join secret is missing or wrong") {
		t.Fatalf("the outsider's log does not say why:\n%s", tail(string(b), 20))
	}
	if ids, _, _ := clusterMembers(t, sc.nodes[0]); len(ids) != 3 {
		t.Fatalf("the cluster's members after the outsiders: %v, want 3", ids)
	}
}
