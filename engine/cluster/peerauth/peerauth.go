// Package peerauth decides which certificates belong to the nodes of one
// Spool cluster and who each of them is.
//
// Chaining to the cluster's CA is not enough: a CA often signs
// certificates for many workloads, and any of them would then be a member.
// A node's certificate must also carry a URI SAN (SPIFFE style,
// spiffe://<trust-domain>/<path>) that the cluster's policy names, and be
// good for both ends of a TLS connection (every node dials and is dialed).
// The URI is the node's identity: the controller records it when the node
// joins, and the transport and the node service check that a node claiming
// an id holds the certificate recorded for it (docs/security.md, "Peers").
//
// The package is pure (no I/O, no clock beyond what x509 verification
// reads): it imports only the standard library and gRPC's credentials.
package peerauth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// MaxIdentityBytes bounds an identity (a URI SAN) the cluster records.
const MaxIdentityBytes = 512

// ErrNotPeer: the certificate (or the connection) is not a member's of
// this cluster.
var ErrNotPeer = errors.New("not a certificate of this cluster's nodes")

// Policy is what a node's certificate must carry.
type Policy struct {
	// URIPrefix names the identities of the cluster's nodes: a URI SAN
	// equal to it or, when it ends in "/", any URI below it.
	URIPrefix string
}

// PolicyFor is the policy a node derives from its own certificate when none
// is configured: exactly its own identity (every node shares one
// certificate identity). Nodes with identities of their own configure a
// prefix ending in "/".
func PolicyFor(own *x509.Certificate, configured string) (Policy, error) {
	if configured != "" {
		if err := checkURI(configured); err != nil {
			return Policy{}, fmt.Errorf("peer identity prefix %q: %w", configured, err)
		}
		p := Policy{URIPrefix: configured}
		if _, err := p.Identity(own); err != nil {
			return Policy{}, fmt.Errorf("this node's own certificate: %w", err)
		}
		return p, nil
	}
	for _, u := range own.URIs {
		if s := u.String(); checkURI(s) == nil {
			return Policy{URIPrefix: s}, nil
		}
	}
	return Policy{}, errors.New("this node's certificate carries no spiffe:// URI SAN: each node's certificate must name it (spiffe://<trust-domain>/...), so that peers tell the cluster's nodes from other holders of the CA's certificates (docs/security.md, \"Peers\")")
}

func checkURI(s string) error {
	if len(s) > MaxIdentityBytes || !utf8.ValidString(s) {
		return fmt.Errorf("want a URI of at most %d bytes", MaxIdentityBytes)
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "spiffe" || u.Host == "" {
		return errors.New("want spiffe://<trust-domain>/<path>")
	}
	return nil
}

// Identity returns the leaf's URI SAN the policy accepts.
func (p Policy) Identity(leaf *x509.Certificate) (string, error) {
	for _, u := range leaf.URIs {
		if s := u.String(); p.match(s) {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: it carries no URI SAN %s (it has %v)", ErrNotPeer, p.describe(), leaf.URIs)
}

func (p Policy) match(s string) bool {
	if len(s) > MaxIdentityBytes || p.URIPrefix == "" {
		return false
	}
	if strings.HasSuffix(p.URIPrefix, "/") {
		return strings.HasPrefix(s, p.URIPrefix) && len(s) > len(p.URIPrefix)
	}
	return s == p.URIPrefix
}

func (p Policy) describe() string {
	if strings.HasSuffix(p.URIPrefix, "/") {
		return "under " + p.URIPrefix
	}
	return "equal to " + p.URIPrefix
}

// Verify checks a peer's certificate chain as presented in a TLS handshake
// (leaf first): it chains to roots, its leaf is good for both server and
// client authentication, and it carries an identity the policy accepts,
// which it returns.
func (p Policy) Verify(raw [][]byte, roots *x509.CertPool) (string, error) {
	if len(raw) == 0 {
		return "", fmt.Errorf("%w: the peer presented no certificate", ErrNotPeer)
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return "", fmt.Errorf("%w: the peer's certificate does not parse: %v", ErrNotPeer, err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	// x509 accepts a chain good for any one of KeyUsages: ask for each.
	for _, ku := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{ku}}); err != nil {
			return "", fmt.Errorf("%w: %v (a node's certificate must chain to the cluster's CA and allow both server and client authentication)", ErrNotPeer, err)
		}
	}
	return p.Identity(certs[0])
}

// FromContext returns the identity of the peer of a gRPC call or stream, as
// the policy reads it from its verified certificate; ok is false when the
// connection is not TLS (a cluster running without it) and err says why a
// TLS peer is not one of the cluster's nodes.
func (p Policy) FromContext(ctx context.Context) (id string, ok bool, err error) {
	pr, found := peer.FromContext(ctx)
	if !found || pr.AuthInfo == nil {
		return "", false, nil
	}
	info, isTLS := pr.AuthInfo.(credentials.TLSInfo)
	if !isTLS {
		return "", false, nil
	}
	if len(info.State.PeerCertificates) == 0 {
		return "", true, fmt.Errorf("%w: the peer presented no certificate", ErrNotPeer)
	}
	id, err = p.Identity(info.State.PeerCertificates[0])
	return id, true, err
}
