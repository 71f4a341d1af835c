package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spoolmq/spool/proto/grpcbuf"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
)

// appsConfig is a single node with topics orders and secret, stream
// subscriptions orders:mail and secret:spy, its app port on a Unix socket
// and its admin port on a free loopback port.
func appsConfig(t *testing.T) *config.Config {
	t.Helper()
	c := config.Default()
	dir := t.TempDir()
	c.Node.ID = "apps"
	c.Node.DataDir = filepath.Join(dir, "data")
	c.Node.AppListen = []string{"unix://" + filepath.Join(dir, "app.sock")}
	c.Node.AdminListen = "127.0.0.1:0"
	c.Node.DrainTimeout = 2 * time.Second
	c.Storage.Fsync = config.FsyncInterval
	c.Topics = []config.TopicConfig{config.NewTopic("orders", 2), config.NewTopic("secret", 1)}
	c.Subscriptions = []config.SubscriptionConfig{config.NewSubscription("orders", "mail"), config.NewSubscription("secret", "spy")}
	c.ApplyDefaults()
	return &c
}

// runSidecar runs a sidecar with cfg in this process until the test ends,
// and returns its addresses; or the error Run returned before it was ready.
func runSidecar(t *testing.T, cfg *config.Config, opts Options) (Addrs, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.Ready = func(a Addrs) { ready <- a }
	go func() { done <- Run(ctx, cfg, opts) }()
	select {
	case a := <-ready:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("sidecar stopped with %v", err)
			}
		})
		return a, nil
	case err := <-done:
		cancel()
		return Addrs{}, err
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the sidecar did not start within 30s")
		return Addrs{}, nil
	}
}

// dialApp connects to a sidecar's app address as an SDK does.
func dialApp(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	target := addr
	if !strings.HasPrefix(addr, "unix://") {
		target = "passthrough:///" + addr
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpcbuf.ClientCodec())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func publishOne(ctx context.Context, conn *grpc.ClientConn, topic string) error {
	_, err := spoolv1.NewPublisherServiceClient(conn).Publish(ctx, &spoolv1.PublishRequest{Topic: topic, Messages: []*spoolv1.PublishMessage{{Payload: []byte("x")}}})
	return err
}

func metadataOf(err error) map[string]string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetMetadata()
		}
	}
	return nil
}

// nonLoopbackIP returns an address of this machine that is not loopback,
// or skips the test.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no IPv4 address beyond loopback")
	return ""
}

// An app port beyond loopback without authentication is refused at start,
// with what to do; apps.allow_insecure_tcp is the explicit opt-out.
func TestAppPortBeyondLoopbackNeedsAuth(t *testing.T) {
	cfg := appsConfig(t)
	cfg.Node.AppListen = []string{"0.0.0.0:0"}
	_, err := runSidecar(t, cfg, Options{})
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "node.app_listen[0]" || !strings.Contains(err.Error(), "apps.tokens_file") || !strings.Contains(err.Error(), "apps.allow_insecure_tcp") {
		t.Fatalf("start with app_listen 0.0.0.0:0 and no tokens: %v, want a refusal naming node.app_listen[0], apps.tokens_file and apps.allow_insecure_tcp", err)
	}
	cfg = appsConfig(t)
	cfg.Node.AppListen = []string{"0.0.0.0:0"}
	cfg.Apps.AllowInsecureTCP = true
	if _, err := runSidecar(t, cfg, Options{}); err != nil {
		t.Fatalf("with apps.allow_insecure_tcp: %v", err)
	}
}

const (
	shopToken  = "shop-0123456789abcdef0123456789abcdef"
	otherToken = "nope-0123456789abcdef0123456789abcdef"
)

// A caller beyond loopback without a token, or with a token the tokens file
// does not have, is UNAUTHENTICATED on every RPC; with a good token it is
// served. On the Unix socket no token is needed, but a wrong one is refused.
func TestAppTokens(t *testing.T) {
	ip := nonLoopbackIP(t)
	cfg := appsConfig(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# app tokens\n"+shopToken+" shop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Apps.TokensFile = tokens
	cfg.Node.AppListen = append(cfg.Node.AppListen, ip+":0")
	addrs, err := runSidecar(t, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	unix, tcp := dialApp(t, addrs.App[0]), dialApp(t, addrs.App[1])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	unauthenticated := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.Unauthenticated || reasonOf(err) != "UNAUTHENTICATED" {
			t.Errorf("%s: %v (reason %q), want UNAUTHENTICATED", what, err, reasonOf(err))
		}
		if err != nil && (strings.Contains(err.Error(), otherToken) || strings.Contains(err.Error(), shopToken)) {
			t.Errorf("%s: the error quotes a token: %v", what, err)
		}
	}
	unauthenticated("publish from "+ip+" without a token", publishOne(ctx, tcp, "orders"))
	unauthenticated("publish with a wrong token", publishOne(withToken(ctx, otherToken), tcp, "orders"))
	unauthenticated("publish on the socket with a wrong token", publishOne(withToken(ctx, otherToken), unix, "orders"))
	s, err := spoolv1.NewSubscriberServiceClient(tcp).Subscribe(ctx)
	if err == nil {
		_, err = s.Recv()
	}
	unauthenticated("subscribe without a token", err)
	if err := publishOne(withToken(ctx, shopToken), tcp, "orders"); err != nil {
		t.Errorf("publish with the shop token: %v", err)
	}
	if err := publishOne(ctx, unix, "orders"); err != nil {
		t.Errorf("publish on the socket without a token: %v", err)
	}
}

// The app socket gets apps.socket_mode, owner-only by default, whatever
// the process's umask.
func TestAppSocketMode(t *testing.T) {
	for _, c := range []struct {
		mode string
		want os.FileMode
	}{{"", 0o600}, {"0660", 0o660}} {
		cfg := appsConfig(t)
		if c.mode != "" {
			cfg.Apps.SocketMode = c.mode
		}
		addrs, err := runSidecar(t, cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(strings.TrimPrefix(addrs.App[0], "unix://"))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.want {
			t.Errorf("socket_mode %q: the socket's mode is %#o, want %#o", c.mode, got, c.want)
		}
	}
}

// stepClock is a clock the test moves.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Publishes past an identity's burst are RESOURCE_EXHAUSTED with
// RATE_LIMITED and a retry hint, on Publish and in band on PublishStream;
// once the bucket refills they pass again.
func TestAppPublishRate(t *testing.T) {
	cfg := appsConfig(t)
	cfg.Apps.PublishRate = 1
	cfg.Apps.PublishBurst = 3
	clock := &stepClock{now: time.Unix(1_800_000_000, 0)}
	addrs, err := runSidecar(t, cfg, Options{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	conn := dialApp(t, addrs.App[0])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		if err := publishOne(ctx, conn, "orders"); err != nil {
			t.Fatalf("publish %d within the burst: %v", i, err)
		}
	}
	err = publishOne(ctx, conn, "orders")
	if status.Code(err) != codes.ResourceExhausted || reasonOf(err) != "RATE_LIMITED" || metadataOf(err)["retry_after_ms"] != "1000" {
		t.Fatalf("publish past the burst: %v (reason %q, metadata %v), want RESOURCE_EXHAUSTED RATE_LIMITED retry_after_ms 1000", err, reasonOf(err), metadataOf(err))
	}
	stream, err := spoolv1.NewPublisherServiceClient(conn).PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&spoolv1.PublishStreamRequest{Sequence: 1, Topic: "orders", Messages: []*spoolv1.PublishMessage{{Payload: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || resp.GetError().GetReason() != "RATE_LIMITED" || codes.Code(resp.GetError().GetCode()) != codes.ResourceExhausted {
		t.Fatalf("stream publish past the burst: %v, %v; want an in-band RATE_LIMITED", resp, err)
	}
	clock.Add(time.Second)
	if err := stream.Send(&spoolv1.PublishStreamRequest{Sequence: 2, Topic: "orders", Messages: []*spoolv1.PublishMessage{{Payload: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.GetError() != nil {
		t.Fatalf("stream publish a second later: %v, %v; want it stored", resp, err)
	}
	if err := publishOne(ctx, conn, "orders"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the bucket's one token went to the stream: %v, want RATE_LIMITED", err)
	}
	clock.Add(time.Second)
	if err := publishOne(ctx, conn, "orders"); err != nil {
		t.Fatalf("publish once the bucket refilled: %v", err)
	}
	_ = stream.CloseSend()
}

// A callback subscription the default identity's scopes do not allow is
// refused at start.
func TestAppCallbackScopesCheckedAtStart(t *testing.T) {
	cfg := appsConfig(t)
	cfg.Subscriptions[1].Delivery = config.DeliveryCallback
	cfg.Subscriptions[1].AppAddress = "unix:///nonexistent/app.sock"
	only := []string{"orders:mail"}
	cfg.Apps.Identities = []config.AppIdentityConfig{{Name: "local", Subscribe: &only}}
	_, err := runSidecar(t, cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "secret:spy") || !strings.Contains(err.Error(), "apps.identities") {
		t.Fatalf("start with a callback subscription out of scope: %v, want a refusal naming secret:spy", err)
	}
}

// With apps.tls_* an app address beyond loopback serves TLS; a client
// certificate the CA signed names the caller's identity (its URI SAN), whose
// scopes then apply; a caller without a certificate or token is
// UNAUTHENTICATED, a certificate of another CA fails the handshake, and the
// Unix socket stays plaintext.
func TestAppClientCertificates(t *testing.T) {
	ip := nonLoopbackIP(t)
	pki := newTestPKI(t)
	pki.issue(t, "server", &x509.Certificate{IPAddresses: []net.IP{net.ParseIP(ip)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	shopURI, _ := url.Parse("spiffe://test/ns/shop/sa/orders")
	shop := pki.issue(t, "shop", &x509.Certificate{Subject: pkix.Name{CommonName: "ignored"}, URIs: []*url.URL{shopURI}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	rogue := newTestPKI(t).issue(t, "rogue", &x509.Certificate{URIs: []*url.URL{shopURI}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	cfg := appsConfig(t)
	cfg.Node.AppListen = append(cfg.Node.AppListen, ip+":0")
	cfg.Apps.TLSCertFile = filepath.Join(pki.dir, "server.crt")
	cfg.Apps.TLSKeyFile = filepath.Join(pki.dir, "server.key")
	cfg.Apps.TLSClientCAFile = filepath.Join(pki.dir, "ca.crt")
	only := []string{"orders"}
	cfg.Apps.Identities = []config.AppIdentityConfig{{Name: "spiffe://test/ns/shop/sa/orders", Publish: &only}}
	addrs, err := runSidecar(t, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dialTLS := func(certs ...tls.Certificate) *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///"+addrs.App[1], grpcbuf.ClientCodec(),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.caPool, Certificates: certs, ServerName: ip})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	withCert := dialTLS(shop)
	if err := publishOne(ctx, withCert, "orders"); err != nil {
		t.Errorf("publish to orders with the shop certificate: %v", err)
	}
	if err := publishOne(ctx, withCert, "secret"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "spiffe://test/ns/shop/sa/orders") {
		t.Errorf("publish to secret with the shop certificate: %v, want PERMISSION_DENIED for the certificate's identity", err)
	}
	if err := publishOne(ctx, dialTLS(), "orders"); status.Code(err) != codes.Unauthenticated || reasonOf(err) != "UNAUTHENTICATED" {
		t.Errorf("publish over TLS without a certificate or token: %v, want UNAUTHENTICATED", err)
	}
	if err := publishOne(ctx, dialTLS(rogue), "orders"); err == nil || status.Code(err) == codes.OK {
		t.Errorf("publish with a certificate of another CA: %v, want the handshake refused", err)
	}
	if err := publishOne(ctx, dialApp(t, addrs.App[1]), "orders"); err == nil {
		t.Error("a plaintext publish to the TLS address was served")
	}
	if err := publishOne(ctx, dialApp(t, addrs.App[0]), "orders"); err != nil {
		t.Errorf("plaintext publish on the Unix socket: %v", err)
	}
}
