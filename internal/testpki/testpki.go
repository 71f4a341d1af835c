// Package testpki makes the certificate authorities and certificates that
// Spool's tests and load runs need (peer mTLS, the admin and app ports,
// Redis TLS), as PEM files. Keys are P-256 and certificates valid for a
// day around now: nothing here is for a deployment.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte         // Cert, PEM-encoded
	Pool *x509.CertPool // holding Cert
}

var serial atomic.Int64

func init() { serial.Store(time.Now().UnixNano()) }

// NewCA makes a CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Pool: pool}, nil
}

// Node is the template of a cluster node's certificate: good for both
// ends of a connection, with uris as its URI SANs.
func Node(uris ...string) (*x509.Certificate, error) {
	t := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		t.URIs = append(t.URIs, u)
	}
	return t, nil
}

// Issue signs tmpl (a copy: its serial, validity and key usage are filled
// in, its subject defaults to name) and returns the certificate and its
// key, PEM-encoded.
func (ca *CA) Issue(name string, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	t := *tmpl
	t.SerialNumber = big.NewInt(serial.Add(1))
	t.NotBefore, t.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if t.KeyUsage == 0 {
		t.KeyUsage = x509.KeyUsageDigitalSignature
	}
	if t.Subject.CommonName == "" {
		t.Subject.CommonName = name
	}
	der, err := x509.CreateCertificate(rand.Reader, &t, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// Files are the paths WriteFiles wrote.
type Files struct{ Cert, Key, CA string }

// WriteFiles issues a certificate as Issue does and writes dir/name.crt,
// dir/name.key and the CA as dir/name-ca.crt (mode 0600; certificates of
// other CAs may share dir), replacing what is there.
func (ca *CA) WriteFiles(dir, name string, tmpl *x509.Certificate) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(name, tmpl)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, name+"-ca.crt")}
	for path, b := range map[string][]byte{f.Cert: certPEM, f.Key: keyPEM, f.CA: ca.PEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return Files{}, fmt.Errorf("testpki: %w", err)
		}
	}
	return f, nil
}
