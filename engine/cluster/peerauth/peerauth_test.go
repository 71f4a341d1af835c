package peerauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"
)

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T) ca {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return ca{c, key}
}

func (c ca) issue(t *testing.T, uris []string, eku ...x509.ExtKeyUsage) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: eku,
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

var both = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

// A certificate of the cluster's CA is a node's only when it is good for
// both ends of a connection and names an identity the policy accepts: the
// certificates that a shared CA signs for anything else are refused.
func TestVerify(t *testing.T) {
	good, other := newCA(t), newCA(t)
	roots := x509.NewCertPool()
	roots.AddCert(good.cert)
	shared := Policy{URIPrefix: "spiffe://shop.example/spool/orders"}
	perNode := Policy{URIPrefix: "spiffe://shop.example/spool/orders/"}
	for _, tc := range []struct {
		name   string
		pol    Policy
		cert   []byte
		want   string
		refuse string
	}{
		{"shared identity", shared, good.issue(t, []string{"spiffe://shop.example/spool/orders"}, both...), "spiffe://shop.example/spool/orders", ""},
		{"node identity under the prefix", perNode, good.issue(t, []string{"spiffe://other/x", "spiffe://shop.example/spool/orders/spool-1"}, both...), "spiffe://shop.example/spool/orders/spool-1", ""},
		{"another CA", shared, other.issue(t, []string{"spiffe://shop.example/spool/orders"}, both...), "", "unknown authority"},
		{"client auth only", shared, good.issue(t, []string{"spiffe://shop.example/spool/orders"}, x509.ExtKeyUsageClientAuth), "", "both server and client"},
		{"server auth only", shared, good.issue(t, []string{"spiffe://shop.example/spool/orders"}, x509.ExtKeyUsageServerAuth), "", "both server and client"},
		{"no identity", shared, good.issue(t, nil, both...), "", "carries no URI SAN"},
		{"another workload of the CA", shared, good.issue(t, []string{"spiffe://shop.example/ns/shop/sa/checkout"}, both...), "", "carries no URI SAN"},
		{"a sibling of a shared identity", shared, good.issue(t, []string{"spiffe://shop.example/spool/orders-evil"}, both...), "", "carries no URI SAN"},
		{"the prefix itself is no node", perNode, good.issue(t, []string{"spiffe://shop.example/spool/orders/"}, both...), "", "carries no URI SAN"},
		{"a sibling of a node prefix", perNode, good.issue(t, []string{"spiffe://shop.example/spool/ordersx/1"}, both...), "", "carries no URI SAN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.pol.Verify([][]byte{tc.cert}, roots)
			if tc.refuse == "" {
				if err != nil || id != tc.want {
					t.Fatalf("Verify = %q, %v; want %q", id, err, tc.want)
				}
				return
			}
			if !errors.Is(err, ErrNotPeer) || !strings.Contains(err.Error(), tc.refuse) {
				t.Fatalf("Verify = %q, %v; want ErrNotPeer with %q", id, err, tc.refuse)
			}
		})
	}
	if _, err := shared.Verify(nil, roots); !errors.Is(err, ErrNotPeer) {
		t.Fatalf("no certificate: %v", err)
	}
	if _, err := shared.Verify([][]byte{[]byte("not der")}, roots); !errors.Is(err, ErrNotPeer) {
		t.Fatalf("garbage: %v", err)
	}
}

// Without a configured prefix a node accepts its own identity only; a
// configured prefix must be a spiffe URI its own certificate falls under.
func TestPolicyFor(t *testing.T) {
	c := newCA(t)
	parse := func(der []byte) *x509.Certificate {
		x, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	own := parse(c.issue(t, []string{"spiffe://td/spool/a/spool-0"}, both...))
	if p, err := PolicyFor(own, ""); err != nil || p.URIPrefix != "spiffe://td/spool/a/spool-0" {
		t.Fatalf("derived: %+v, %v", p, err)
	}
	if p, err := PolicyFor(own, "spiffe://td/spool/a/"); err != nil || p.URIPrefix != "spiffe://td/spool/a/" {
		t.Fatalf("configured: %+v, %v", p, err)
	}
	for _, bad := range []string{"https://td/spool/a/", "spiffe:///x", "spiffe://td/spool/b/", strings.Repeat("x", MaxIdentityBytes+1)} {
		if _, err := PolicyFor(own, bad); err == nil {
			t.Fatalf("prefix %q accepted", bad)
		}
	}
	if _, err := PolicyFor(parse(c.issue(t, nil, both...)), ""); err == nil || !strings.Contains(err.Error(), "no spiffe:// URI SAN") {
		t.Fatalf("a certificate without identity: %v", err)
	}
}
