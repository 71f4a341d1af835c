package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/internal/testpki"
)

// testCA is a certificate authority for tests.
type testCA struct{ *testpki.CA }

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	ca, err := testpki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{ca}
}

// testIdentity is the identity the test clusters' certificates carry.
const testIdentity = "spiffe://spool.test/cluster"

// certShape is what a test certificate carries beyond its name.
type certShape struct {
	uris []string
	eku  []x509.ExtKeyUsage
}

// issue writes a node certificate signed by ca into dir (name.crt,
// name.key, name-ca.crt): by default with the test clusters' identity,
// good for both ends of a connection.
func (ca testCA) issue(t *testing.T, dir, name string, shape ...certShape) ClusterTLS {
	t.Helper()
	sh := certShape{uris: []string{testIdentity}, eku: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if len(shape) > 0 {
		sh = shape[0]
	}
	tmpl := &x509.Certificate{ExtKeyUsage: sh.eku}
	for _, s := range sh.uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	f, err := ca.WriteFiles(dir, name, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return ClusterTLS{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
}

// With cluster TLS, nodes whose certificates chain to the cluster's CA
// form a cluster and replicate; a node whose certificate another CA signed
// cannot join, and says why.
func TestClusterMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "spool-test-ca")
	tc := newTestCluster(t, 3, func(i int, cn *clusterNode) { cn.tls = ca.issue(t, dir, "node"+string(rune('a'+i))) })
	if err := tc.nodes[1].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "a publish over mutual TLS", func() error { _, err := produce(tc.nodes[2].n, "orders", 0, "x"); return err })

	other := newTestCA(t, "another-ca")
	intruder := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: []string{tc.nodes[0].addr},
		tls: other.issue(t, dir, "intruder"), joinWait: 2 * time.Second}
	tc.start(intruder)
	err := <-intruder.done
	_ = intruder.n.Close()
	intruder.n = nil
	if err == nil || !strings.Contains(err.Error(), "could not join") {
		t.Fatalf("a node with another CA's certificate: %v; want a refused join", err)
	}
	t.Logf("the intruder's error: %v", err)
}

// A certificate of the cluster's own CA is not enough to talk to a node:
// one that names another workload, one without identity and one good for
// client authentication only are refused in the TLS handshake by the node
// (a CA that signs for other workloads must not let them in).
func TestClusterTLSRefusesOtherCertificatesOfTheCA(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "spool-test-ca")
	tc := newTestCluster(t, 1, func(i int, cn *clusterNode) { cn.tls = ca.issue(t, dir, "member") })
	awaitCond(t, 20*time.Second, "the first node leads", func() error { return tc.nodes[0].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}) })
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if err := tlsHandshake(t, tc.nodes[0].addr, ca.issue(t, dir, "another-member")); err != nil {
		t.Fatalf("a member's certificate: %v", err)
	}
	for name, shape := range map[string]certShape{
		"another-workload": {uris: []string{"spiffe://spool.test/checkout"}, eku: both},
		"a-sibling":        {uris: []string{testIdentity + "-evil"}, eku: both},
		"no-identity":      {eku: both},
		"client-auth-only": {uris: []string{testIdentity}, eku: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		err := tlsHandshake(t, tc.nodes[0].addr, ca.issue(t, dir, name, shape))
		if err == nil {
			t.Fatalf("%s: the node accepted the certificate", name)
		}
		t.Logf("%s: %v", name, err)
	}
}

// tlsHandshake connects to a node with files' certificate, as any process
// holding it could, and returns the node's verdict: TLS 1.3 reports a
// refused client certificate on the first read, a kept connection times
// out.
func tlsHandshake(t *testing.T, addr string, files ClusterTLS) error {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		return nil // the server spoke (HTTP/2 settings): accepted
	}
	return err
}

// Rotated files are picked up without a restart: a new certificate is
// served once its files change, and a half-written file keeps the old one.
func TestClusterTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	files := ca.issue(t, dir, "node")
	f, err := newTLSFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.now = func() time.Time { return now }
	first, _ := f.current()
	ca.issue(t, dir, "node") // rotate: same paths, new certificate
	if c, _ := f.current(); c != first {
		t.Fatal("reloaded before tlsReloadInterval passed")
	}
	now = now.Add(2 * tlsReloadInterval)
	second, _ := f.current()
	if second == first || string(second.Certificate[0]) == string(first.Certificate[0]) {
		t.Fatal("the rotated certificate was not loaded")
	}
	if err := os.WriteFile(files.CertFile, []byte("-----BEGIN CERT"), 0o600); err != nil { // torn write
		t.Fatal(err)
	}
	now = now.Add(2 * tlsReloadInterval)
	if c, _ := f.current(); c != second {
		t.Fatal("a half-written certificate file replaced the working one")
	}
	if _, err := newTLSFiles(files); err == nil {
		t.Fatal("a node started with a damaged certificate file")
	}
}
