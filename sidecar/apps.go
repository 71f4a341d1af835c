package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"

	"github.com/spoolmq/spool/sidecar/apps"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// newGate reads apps.tokens_file and builds the gate of the app port
// (sidecar/apps): authentication, scopes, publish rates. Callback
// subscriptions the scopes do not allow stop the start here, before
// anything is opened.
func newGate(cfg *config.Config, opts Options, m *metrics.Metrics, logger *slog.Logger) (*apps.Gate, error) {
	var tokens *apps.Tokens
	if f := cfg.Apps.TokensFile; f != "" {
		var err error
		if tokens, err = apps.LoadTokens(f); err != nil {
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
		case tokens == nil:
			logger.Warn("INSECURE: the app port listens beyond loopback without authentication (apps.allow_insecure_tcp): any host that reaches it may publish and consume as the default identity; for development only",
				"app_listen", a, "identity", cfg.Apps.DefaultIdentity)
		default:
			logger.Info("the app port listens beyond loopback: callers from other hosts need a token of apps.tokens_file (it travels in clear text: keep the port on a network you trust)",
				"app_listen", a, "tokens", len(tokens.Identities()))
		}
	}
	return g, nil
}

// listenUnix opens a Unix socket with file mode mode, whatever the umask.
// The socket's inode gets the mode before bind (Linux gives the bound
// file that mode less the umask), so no connection can be made while the
// file is wider than configured; a chmod after bind then sets it exactly.
func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = syscall.Fchmod(int(fd), uint32(mode)) }); cerr != nil {
			return cerr
		}
		return err
	}}
	l, err := lc.Listen(context.Background(), "unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("apps.socket_mode %#o: %w", mode, err)
	}
	return l, nil
}
