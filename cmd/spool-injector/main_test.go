package main

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
)

// The client certificate flags go together, and a CA file that holds no
// certificate stops the injector rather than letting every caller in.
func TestClientCertificateFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "spool-injector"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	kb, _ := x509.MarshalECPrivateKey(key)
	base := []string{
		"--listen", "256.0.0.1:0", // were the flags accepted, serving fails at once rather than blocking the test
		"--tls-cert-file", write("tls.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))),
		"--tls-key-file", write("tls.key", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))),
		"--defaults", write("defaults.yaml", "image: spool/spoold:test\n"),
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--client-names", "kube-apiserver"}, "--client-names needs --client-ca-file"},
		{[]string{"--client-ca-file", write("empty-ca.crt", "not a certificate\n"), "--client-names", "kube-apiserver"}, "no PEM certificate"},
		{[]string{"--client-ca-file", filepath.Join(dir, "tls.crt")}, "client CA and client names go together"},
	} {
		err := run(append(append([]string{}, base...), c.args...))
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%q: %v; want an error saying %q", c.args, err, c.says)
		}
	}
}
