package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
)

// testCA is a certificate authority for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a node certificate signed by ca and the CA file into dir.
func (ca *testCA) issue(t *testing.T, dir, name string, caPEM []byte) ClusterTLS {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := ClusterTLS{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), CAFile: filepath.Join(dir, name+"-ca.crt")}
	for path, b := range map[string][]byte{
		out.CertFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		out.KeyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
		out.CAFile:   caPEM,
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// With cluster TLS, nodes whose certificates chain to the cluster's CA
// form a cluster and replicate; a node whose certificate another CA signed
// cannot join, and says why.
func TestClusterMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "spool-test-ca")
	tc := newTestCluster(t, 3, func(i int, cn *clusterNode) { cn.tls = ca.issue(t, dir, "node"+string(rune('a'+i)), ca.pem) })
	if err := tc.nodes[1].n.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "a publish over mutual TLS", func() error { _, err := produce(tc.nodes[2].n, "orders", 0, "x"); return err })

	other := newTestCA(t, "another-ca")
	intruder := &clusterNode{dir: t.TempDir(), addr: freeTCPAddr(t), join: []string{tc.nodes[0].addr},
		tls: other.issue(t, dir, "intruder", other.pem), joinWait: 2 * time.Second}
	tc.start(intruder)
	err := <-intruder.done
	_ = intruder.n.Close()
	intruder.n = nil
	if err == nil || !strings.Contains(err.Error(), "could not join") {
		t.Fatalf("a node with another CA's certificate: %v; want a refused join", err)
	}
	t.Logf("the intruder's error: %v", err)
}

// Rotated files are picked up without a restart: a new certificate is
// served once its files change, and a half-written file keeps the old one.
func TestClusterTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	files := ca.issue(t, dir, "node", ca.pem)
	f, err := newTLSFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.now = func() time.Time { return now }
	first, _ := f.current()
	ca.issue(t, dir, "node", ca.pem) // rotate: same paths, new certificate
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
