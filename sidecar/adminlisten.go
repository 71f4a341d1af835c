package sidecar

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/spoolmq/spool/sidecar/config"
)

// listenAdmin opens node.admin_listen: a Unix socket with
// admin.socket_mode, or TCP, wrapped in TLS when admin.tls is set.
func listenAdmin(cfg *config.Config) (net.Listener, error) {
	addr := cfg.Node.AdminListen
	l, err := listen(addr, os.FileMode(cfg.Admin.SocketFileMode()))
	if err != nil {
		return nil, err
	}
	if cfg.Admin.TLS.CertFile == "" {
		return l, nil
	}
	tc, err := adminTLSConfig(cfg.Admin)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return tls.NewListener(l, tc), nil
}

// listenUnixMode opens a Unix socket at path that has mode from the start:
// it binds a name no one can guess in the same directory, sets the mode,
// then renames the socket into place, so no connection is made to it
// before the mode applies. A stale socket at path is replaced. Closing the
// listener removes path.
func listenUnixMode(path string, mode os.FileMode) (net.Listener, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("listen on unix://%s: %w", path, err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+hex.EncodeToString(b))
	if len(tmp) > config.MaxUnixPathBytes {
		return nil, fmt.Errorf("listen on unix://%s: the directory's path is too long for a socket path (at most %d bytes with a 17-byte name)", path, config.MaxUnixPathBytes)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("listen on unix://%s: a file that is not a socket is in the way", path)
	}
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on unix://%s: %w (check the directory exists and is writable)", path, err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, mode); err != nil {
		_ = ul.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("listen on unix://%s: setting mode %v: %w", path, mode, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = ul.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("listen on unix://%s: %w", path, err)
	}
	return &unixListener{UnixListener: ul, path: path}, nil
}

// unixListener reports the socket's final path and removes it on Close.
type unixListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { _ = os.Remove(l.path) })
	return err
}

// adminTLSConfig is the admin listener's TLS: TLS 1.2 or later, HTTP/2 by
// ALPN, and with admin.tls.client_ca_file client certificates verified
// against it: required when no tokens file offers another way in.
func adminTLSConfig(ac config.AdminConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(ac.TLS.CertFile, ac.TLS.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("admin.tls: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	if ac.TLS.ClientCAFile == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(ac.TLS.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("admin.tls.client_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("admin.tls.client_ca_file " + ac.TLS.ClientCAFile + ": no PEM certificate in it")
	}
	tc.ClientCAs = pool
	tc.ClientAuth = tls.RequireAndVerifyClientCert
	if ac.TokensFile != "" {
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}
