package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// peerCerts writes a run's cluster credentials into dir/peer-tls: a CA and
// one node certificate every node shares (identity spiffe://loadtest/spool,
// good for both ends of a connection), as a deployment's would be.
func peerCerts(dir string) (string, error) {
	out := filepath.Join(dir, "peer-tls")
	if err := os.MkdirAll(out, 0o700); err != nil {
		return "", err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "loadtest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	id, _ := url.Parse("spiffe://loadtest/spool")
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "spool"}, URIs: []*url.URL{id},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", err
	}
	for name, block := range map[string]*pem.Block{
		"ca.crt": {Type: "CERTIFICATE", Bytes: caDER}, "node.crt": {Type: "CERTIFICATE", Bytes: der}, "node.key": {Type: "EC PRIVATE KEY", Bytes: kb},
	} {
		if err := os.WriteFile(filepath.Join(out, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return "", err
		}
	}
	return out, nil
}
