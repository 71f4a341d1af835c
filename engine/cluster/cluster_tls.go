package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ClusterTLS turns on mutual TLS between the nodes of a cluster: every
// connection (raft streams, joins, forwarded publishes, remote reads) is
// TLS 1.3, and each side must present a certificate signed by the CA. The
// files are read again when they change (checked at most once per
// tlsReloadInterval, on a new connection), so certificates rotate without
// a restart.
type ClusterTLS struct {
	CertFile string // this node's certificate (PEM), with its chain
	KeyFile  string // its private key (PEM)
	CAFile   string // the CA certificates peers' certificates must chain to (PEM)
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
	stamp   string // the files' sizes and modification times when loaded
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
	f.cert, f.pool, f.stamp = &cert, pool, stamp
	return nil
}

// current returns the certificate and pool after a reload check.
func (f *tlsFiles) current() (*tls.Certificate, *x509.CertPool) {
	_ = f.reload(false) // on failure the previous files stay in use
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cert, f.pool
}

// serverConfig requires and verifies a client certificate on every
// inbound connection.
func (f *tlsFiles) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := f.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
			}, nil
		},
	}
}

// clientConfig presents this node's certificate and verifies the peer's
// chain against the CA. Peers are dialled at addresses the controller
// recorded (often pod IPs), so the chain is what is checked, not a host
// name; which node answered is checked by the raft handshake (node ids).
func (f *tlsFiles) clientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := f.current()
			return cert, nil
		},
		InsecureSkipVerify: true, // the chain is verified below, against the CA pool
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, pool := f.current()
			if len(raw) == 0 {
				return errors.New("engine: cluster TLS: the peer presented no certificate")
			}
			certs := make([]*x509.Certificate, len(raw))
			for i, b := range raw {
				c, err := x509.ParseCertificate(b)
				if err != nil {
					return fmt.Errorf("engine: cluster TLS: the peer's certificate: %w", err)
				}
				certs[i] = c
			}
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("engine: cluster TLS: the peer's certificate is not signed by cluster.tls.ca_file: %w", err)
			}
			return nil
		},
	}
}
