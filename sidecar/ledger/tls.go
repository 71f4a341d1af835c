package ledger

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles are the files of redis.tls: whom the client trusts and what it
// presents. Without a CA file the system's CAs are trusted, which suits a
// managed Redis with a public certificate; a Redis whose certificate comes
// from the installation's own CA needs CAFile, and one that requires
// client certificates (tls-auth-clients yes) needs CertFile and KeyFile.
type TLSFiles struct {
	CAFile     string // PEM bundle of the CAs that sign Redis's certificate; empty: the system's
	CertFile   string // PEM client certificate (with its chain), with KeyFile
	KeyFile    string // PEM private key of CertFile
	ServerName string // the name Redis's certificate must hold; empty: the host of each address
}

// Config reads the files once and builds the client config (TLS 1.2 or
// later, the certificate chain and the host name verified). A file that is
// missing or holds no PEM is ErrInvalid at start, with the file's name,
// rather than a handshake failure at every call. The files are not read
// again: a rotated client certificate takes a restart.
//
// ServerName is needed when the addresses are IPs that the certificate
// does not list, or with Sentinel and Cluster, whose nodes are reached at
// the addresses they announce.
func (f TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: redis TLS CA file: %v", ErrInvalid, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: redis TLS CA file %s holds no PEM certificate", ErrInvalid, f.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, fmt.Errorf("%w: redis TLS client certificate needs both cert_file and key_file", ErrInvalid)
	}
	if f.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: redis TLS client certificate %s with key %s: %v", ErrInvalid, f.CertFile, f.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
