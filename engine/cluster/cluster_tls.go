package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spoolmq/spool/engine/cluster/peerauth"
)

// ClusterTLS turns on mutual TLS between the nodes of a cluster: every
// connection (raft streams, joins, forwarded publishes, remote reads) is
// TLS 1.3, and each side must present a certificate signed by the CA, good
// for server and client authentication, naming a node of this cluster
// (package peerauth). The files are read again when they change (checked
// at most once per tlsReloadInterval, on a new connection), so
// certificates rotate without a restart.
type ClusterTLS struct {
	CertFile string // this node's certificate (PEM), with its chain
	KeyFile  string // its private key (PEM)
	CAFile   string // the CA certificates peers' certificates must chain to (PEM)
	// PeerURIPrefix names the identities (URI SANs) of the cluster's
	// nodes: equal to it, or any URI below it when it ends in "/". Empty:
	// this node's own identity (every node shares one).
	PeerURIPrefix string
}

// Enabled reports whether TLS is configured.
func (c ClusterTLS) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// tlsReloadInterval bounds how often the files' modification times are
// checked.
const tlsReloadInterval = time.Second

// tlsFiles holds the current certificate and CA pool, reloaded from their
// files when they change.
type tlsFiles struct {
	cfg ClusterTLS
	now func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	pool    *x509.CertPool
	policy  peerauth.Policy // from cfg.PeerURIPrefix and the certificate
	stamp   string          // the files' sizes and modification times when loaded
	checked time.Time
}

// newTLSFiles loads the files once: a missing or bad file is an error at
// start, with what to fix.
func newTLSFiles(cfg ClusterTLS) (*tlsFiles, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" || cfg.CAFile == "" {
		return nil, errors.New("engine: cluster TLS needs cert_file, key_file and ca_file (all three, or none)")
	}
	f := &tlsFiles{cfg: cfg, now: time.Now}
	if err := f.reload(true); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *tlsFiles) fileStamp() (string, error) {
	var s string
	for _, p := range []string{f.cfg.CertFile, f.cfg.KeyFile, f.cfg.CAFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

// reload reads the files if they changed since the last load (or always,
// with force). A failed reload keeps the previous certificate and pool:
// a half-written file during a rotation must not cut the node off.
func (f *tlsFiles) reload(force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if !force && now.Sub(f.checked) < tlsReloadInterval {
		return nil
	}
	f.checked = now
	stamp, err := f.fileStamp()
	if err != nil {
		return fmt.Errorf("engine: cluster TLS: %w", err)
	}
	if stamp == f.stamp && !force {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(f.cfg.CertFile, f.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("engine: cluster TLS: certificate %s with key %s: %w", f.cfg.CertFile, f.cfg.KeyFile, err)
	}
	caPEM, err := os.ReadFile(f.cfg.CAFile)
	if err != nil {
		return fmt.Errorf("engine: cluster TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("engine: cluster TLS: %s holds no PEM certificate", f.cfg.CAFile)
	}
	pol, err := peerauth.PolicyFor(cert.Leaf, f.cfg.PeerURIPrefix)
	if err != nil {
		return fmt.Errorf("engine: cluster TLS: %s: %w", f.cfg.CertFile, err)
	}
	f.cert, f.pool, f.policy, f.stamp = &cert, pool, pol, stamp
	return nil
}

// current returns the certificate and pool after a reload check.
func (f *tlsFiles) current() (*tls.Certificate, *x509.CertPool) {
	_ = f.reload(false) // on failure the previous files stay in use
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cert, f.pool
}

// peerPolicy is the policy peers' certificates are checked against.
func (f *tlsFiles) peerPolicy() peerauth.Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.policy
}

// verifyPeer checks a peer's certificate, on either end of a connection.
func (f *tlsFiles) verifyPeer(raw [][]byte, _ [][]*x509.Certificate) error {
	_, pool := f.current()
	if _, err := f.peerPolicy().Verify(raw, pool); err != nil {
		return fmt.Errorf("engine: cluster TLS: the peer: %w", err)
	}
	return nil
}

// serverConfig requires a client certificate on every inbound connection
// and verifies it as verifyPeer does (chain, both usages, identity).
func (f *tlsFiles) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, _ := f.current()
			return &tls.Config{
				MinVersion:            tls.VersionTLS13,
				Certificates:          []tls.Certificate{*cert},
				ClientAuth:            tls.RequireAnyClientCert, // verified below
				VerifyPeerCertificate: f.verifyPeer,
			}, nil
		},
	}
}

// clientConfig presents this node's certificate and verifies the peer's.
// Peers are dialled at addresses the controller recorded (often pod IPs),
// so no host name is checked: the chain and the identity are, and which
// node answered is checked by the raft handshake (node ids) against the
// identity the controller recorded for it.
func (f *tlsFiles) clientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := f.current()
			return cert, nil
		},
		InsecureSkipVerify:    true, // verified below, against the CA pool and the policy
		VerifyPeerCertificate: f.verifyPeer,
	}
}
