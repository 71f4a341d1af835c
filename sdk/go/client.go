package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/internal/grpcbuf"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// DefaultAddr is the sidecar address used when Dial gets "" and SPOOL_ADDR is unset.
const DefaultAddr = "127.0.0.1:7070"

// EnvAddr names the environment variable holding the sidecar address.
const EnvAddr = "SPOOL_ADDR"

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
// limits). The transport stays insecure: the sidecar is local.
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
	gopts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpcbuf.ClientCodec()}, cfg.grpcOpts...)
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
