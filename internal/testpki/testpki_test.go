package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

// A node certificate verifies against its CA for both ends of a
// connection, carries its URIs, and loads as a key pair from its files.
func TestWriteFiles(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Node("spiffe://td/spool/node-1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.WriteFiles(t.TempDir(), "node-1", tmpl)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, ku := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool, KeyUsages: []x509.ExtKeyUsage{ku}}); err != nil {
			t.Fatalf("usage %v: %v", ku, err)
		}
	}
	if len(pair.Leaf.URIs) != 1 || pair.Leaf.URIs[0].String() != "spiffe://td/spool/node-1" || pair.Leaf.Subject.CommonName != "node-1" {
		t.Fatalf("certificate: %v %v", pair.Leaf.URIs, pair.Leaf.Subject)
	}
}
