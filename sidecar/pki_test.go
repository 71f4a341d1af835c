package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/spoolmq/spool/internal/testpki"
)

// testPKI is a CA that issues the server and client certificates of
// tests, written as PEM files (ca.crt, name.crt, name.key) in dir.
type testPKI struct {
	dir    string
	ca     *testpki.CA
	caPool *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := testpki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: t.TempDir(), ca: ca, caPool: ca.Pool}
	if err := os.WriteFile(filepath.Join(p.dir, "ca.crt"), ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue makes a certificate signed by the CA and returns it as a
// tls.Certificate, also writing name.crt and name.key.
func (p *testPKI) issue(t *testing.T, name string, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	f, err := p.ca.WriteFiles(p.dir, name, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
