package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/spoolmq/spool/proto/grpcbuf"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// DefaultAddr is the sidecar address used when Dial gets "" and SPOOL_ADDR is unset.
const DefaultAddr = "127.0.0.1:7070"

// EnvAddr names the environment variable holding the sidecar address.
const EnvAddr = "SPOOL_ADDR"

// The connection's connect backoff: how soon gRPC tries the sidecar again
// after a failed connect. gRPC's default grows to 120 s (1 s, ×1.6), which
// kept an app away from a restarted sidecar for seconds after it was ready;
// the sidecar is local, so a retry every ConnectBackoffMax costs nothing.
// With gRPC's ±20 % jitter the retries are at most 600 ms apart, so an app
// is connected again within 600 ms of its sidecar being ready, and
// Subscribe resumes at once (docs/sdk-go.md, "Reconnecting"). Replace them
// with WithGRPCDialOptions(grpc.WithConnectParams(...)).
const (
	ConnectBackoffBase = 100 * time.Millisecond
	ConnectBackoffMax  = 500 * time.Millisecond
	// MinConnectTimeout bounds one connect attempt (a TLS handshake
	// beyond loopback included); gRPC's default is 20 s.
	MinConnectTimeout = 5 * time.Second
)

// The connection's keepalive: after KeepaliveTime without a frame from the
// sidecar, gRPC pings it, and a ping not answered within KeepaliveTimeout
// (or written data the peer has not acknowledged for that long: gRPC sets
// TCP_USER_TIMEOUT to it) closes the connection, so that an app whose
// connection to spoold crosses a network notices a cut within
// KeepaliveTime+KeepaliveTimeout (13 s) rather than waiting out TCP's
// retransmissions, and Subscribe reconnects. Pings are sent with no call
// in progress too (a publish-only app). KeepaliveTime is gRPC-go's minimum;
// spoold permits pings every 5 s (its keepalive enforcement policy).
// Replace them with WithGRPCDialOptions(grpc.WithKeepaliveParams(...)).
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 3 * time.Second
)

// keepaliveParams is the keepalive above, as gRPC takes it.
var keepaliveParams = keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}

// connectParams is the connect backoff above, as gRPC takes it.
var connectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: ConnectBackoffBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ConnectBackoffMax},
	MinConnectTimeout: MinConnectTimeout,
}

// Client is a connection to the local Spool sidecar. It is safe for
// concurrent use; one per process is enough.
type Client struct {
	addr string
	conn *grpc.ClientConn
	pub  spoolv1.PublisherServiceClient
	sub  spoolv1.SubscriberServiceClient
}

type dialConfig struct {
	connectTimeout time.Duration
	grpcOpts       []grpc.DialOption
}

// DialOption configures Dial.
type DialOption func(*dialConfig)

// WithConnectTimeout bounds how long Dial waits for the sidecar to answer
// when ctx has no deadline (default 10 s). 0 makes Dial return at once and
// connect lazily on first use.
func WithConnectTimeout(d time.Duration) DialOption {
	return func(c *dialConfig) { c.connectTimeout = d }
}

// WithGRPCDialOptions adds gRPC dial options (interceptors, message size
// limits, grpc.WithConnectParams to replace the connect backoff,
// grpc.WithKeepaliveParams the keepalive). They come after the SDK's own
// (plaintext credentials, the sidecar's codec, the connect backoff, the
// keepalive) and win.
func WithGRPCDialOptions(opts ...grpc.DialOption) DialOption {
	return func(c *dialConfig) { c.grpcOpts = append(c.grpcOpts, opts...) }
}

// Dial connects to the sidecar at addr: "host:port" or "unix:///path/to.sock".
// An empty addr means $SPOOL_ADDR, else DefaultAddr. Unless
// WithConnectTimeout(0) is given, Dial waits until the sidecar answers (until
// ctx ends, or 10 s when ctx has no deadline) so that a missing sidecar shows
// up at startup.
func Dial(ctx context.Context, addr string, opts ...DialOption) (*Client, error) {
	cfg := dialConfig{connectTimeout: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if addr == "" {
		addr = os.Getenv(EnvAddr)
	}
	if addr == "" {
		addr = DefaultAddr
	}
	// The sidecar's codec: vtproto's generated code instead of protobuf-go's
	// reflection for the delivery frames read and the acks and publish
	// batches written (options given by the caller come after, and win).
	gopts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpcbuf.ClientCodec(),
		grpc.WithConnectParams(connectParams), grpc.WithKeepaliveParams(keepaliveParams),
	}, cfg.grpcOpts...)
	conn, err := grpc.NewClient(addr, gopts...)
	if err != nil {
		return nil, fmt.Errorf("spool: dial %q: %w: give host:port or unix:///path/to.sock (or set %s)", addr, err, EnvAddr)
	}
	c := &Client{
		addr: addr,
		conn: conn,
		pub:  spoolv1.NewPublisherServiceClient(conn),
		sub:  spoolv1.NewSubscriberServiceClient(conn),
	}
	if cfg.connectTimeout == 0 {
		return c, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.connectTimeout)
		defer cancel()
	}
	if err := c.waitReady(ctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return c, nil
}

// waitReady waits for the connection to be ready, riding out transient
// failures (the sidecar may start a moment after the app) until ctx ends.
func (c *Client) waitReady(ctx context.Context) error {
	c.conn.Connect()
	for {
		s := c.conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			return c.unreachable(ctx.Err())
		}
	}
}

// awaitReconnect waits d, or less: until the connection to the sidecar,
// down when the wait starts, is ready again. The subscriber's backoff paces
// its attempts at a sidecar that does not answer, and a sidecar that comes
// back is used as soon as gRPC has connected to it. A connection that is
// ready already (the sidecar answered and refused) waits the full d, so
// that attempts never spin.
func (c *Client) awaitReconnect(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	s := c.conn.GetState()
	if s == connectivity.Ready {
		<-ctx.Done()
		return
	}
	for {
		if s == connectivity.Idle {
			c.conn.Connect() // an idle channel waits for a call to try again
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			return
		}
		if s = c.conn.GetState(); s == connectivity.Ready {
			return
		}
	}
}

// unreachable is the error for a sidecar that does not answer.
func (c *Client) unreachable(cause error) error {
	return fmt.Errorf("spool: no sidecar answering at %s (%w): is spoold running there? start it with `spoold --dev`, or point %s at it", c.addr, cause, EnvAddr)
}

// Addr is the sidecar address the client dialled.
func (c *Client) Addr() string { return c.addr }

// Close closes the connection. Calls in progress fail; Subscribe calls
// should have returned first.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("spool: close: %w", err)
	}
	return nil
}
