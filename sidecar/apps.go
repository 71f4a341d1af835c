package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"google.golang.org/grpc/credentials"

	"github.com/spoolmq/spool/sidecar/apps"
	"github.com/spoolmq/spool/sidecar/authn"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// newGate reads apps.tokens_file and builds the gate of the app port
// (sidecar/apps): authentication, scopes, publish rates. Callback
// subscriptions the scopes do not allow stop the start here, before
// anything is opened.
func newGate(cfg *config.Config, opts Options, m *metrics.Metrics, logger *slog.Logger) (*apps.Gate, error) {
	var tokens *authn.File
	if f := cfg.Apps.TokensFile; f != "" {
		var err error
		if tokens, err = apps.OpenTokens(f, logger); err != nil {
			return nil, err
		}
	}
	g := apps.NewGate(apps.Config{Apps: &cfg.Apps, Tokens: tokens, MaxMessageBytes: cfg.Limits.MaxMessageBytes, Metrics: m, Now: opts.Clock})
	if err := g.CheckCallbacks(cfg.Subscriptions); err != nil {
		return nil, err
	}
	for _, a := range cfg.Node.AppListen {
		switch {
		case !config.BeyondLoopback(a):
		case tokens == nil && cfg.Apps.TLSClientCAFile == "":
			logger.Warn("INSECURE: the app port listens beyond loopback without authentication (apps.allow_insecure_tcp): any host that reaches it may publish and consume as the default identity; for development only",
				"app_listen", a, "identity", cfg.Apps.DefaultIdentity)
		case cfg.Apps.TLSCertFile == "":
			logger.Info("the app port listens beyond loopback: callers from other hosts need a token of apps.tokens_file, which travels in clear text (set apps.tls_cert_file, or keep the port on a network you trust)",
				"app_listen", a)
		default:
			logger.Info("the app port listens beyond loopback over TLS: callers from other hosts need a token or a client certificate", "app_listen", a)
		}
	}
	return g, nil
}

// appTLS is the TLS configuration of app addresses beyond loopback
// (apps.tls_*), or nil. A client certificate is asked for when a client CA
// is set, and verified if given: a caller without one may still present a
// token.
func appTLS(a *config.AppsConfig) (*tls.Config, error) {
	if a.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(a.TLSCertFile, a.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("apps.tls_cert_file, apps.tls_key_file: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if f := a.TLSClientCAFile; f != "" {
		pemBytes, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("apps.tls_client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("apps.tls_client_ca_file %s: no PEM certificate in it", f)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return c, nil
}

// appCreds serves TLS on the connections of the app listeners that need it
// (tlsConn: addresses beyond loopback, with apps.tls_*) and plaintext on the
// others (Unix sockets, loopback), on one gRPC server.
type appCreds struct {
	tls credentials.TransportCredentials
}

// tlsConn marks a connection accepted by an app listener that serves TLS.
type tlsConn struct{ net.Conn }

type tlsListener struct{ net.Listener }

func (l tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tlsConn{c}, nil
}

// plainInfo is the AuthInfo of a plaintext app connection.
type plainInfo struct{ credentials.CommonAuthInfo }

func (plainInfo) AuthType() string { return "insecure" }

func (c appCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if tc, ok := conn.(tlsConn); ok {
		return c.tls.ServerHandshake(tc.Conn)
	}
	return conn, plainInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (appCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("app credentials are for spoold's app server only")
}

func (c appCreds) Info() credentials.ProtocolInfo { return c.tls.Info() }
func (c appCreds) Clone() credentials.TransportCredentials {
	return appCreds{c.tls.Clone()}
}
func (appCreds) OverrideServerName(string) error { return nil }
