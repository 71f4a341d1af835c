package apps

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/authn"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// OtherApp is the app label of refusals of an identity the configuration
// does not name (and of callers not authenticated): labels never come
// from requests.
const OtherApp = "__other"

// Config configures a Gate.
type Config struct {
	Apps *config.AppsConfig
	// Tokens from apps.tokens_file; nil: none (only the default identity).
	Tokens *authn.File
	// MaxMessageBytes is limits.max_message_bytes: a byte bucket always
	// holds at least one largest message.
	MaxMessageBytes int
	Metrics         *metrics.Metrics
	// Now is the clock of the rate buckets; nil: time.Now.
	Now func() time.Time
}

// Gate authenticates the callers of the app port and admits what their
// identity may do.
type Gate struct {
	policy  *Policy
	tokens  *authn.File
	apps    *config.AppsConfig
	maxMsg  float64
	m       *metrics.Metrics
	now     func() time.Time
	known   map[string]bool            // identities named by the config: metric labels
	rates   map[string]*config.AppRate // of the identities listed
	mu      sync.Mutex                 // guards buckets
	buckets map[string]*limiter        // made on first publish; keys from known only
}

// limiter is one identity's buckets; a nil bucket is unlimited.
type limiter struct{ msgs, bytes *Bucket }

// NewGate builds a gate over a validated apps section.
func NewGate(cfg Config) *Gate {
	a := cfg.Apps
	g := &Gate{policy: NewPolicy(a), tokens: cfg.Tokens, apps: a, maxMsg: float64(cfg.MaxMessageBytes), m: cfg.Metrics, now: cfg.Now,
		known: map[string]bool{a.DefaultIdentity: true}, rates: map[string]*config.AppRate{}, buckets: map[string]*limiter{}}
	if g.now == nil {
		g.now = time.Now
	}
	for i := range a.Identities {
		id := &a.Identities[i]
		r := a.RateOf(id)
		g.rates[id.Name] = &r
		if id.Name != config.AnyAppIdentity {
			g.known[id.Name] = true
		}
	}
	if g.tokens != nil {
		for _, id := range g.tokens.Current().Names() {
			g.known[id] = true
		}
	}
	return g
}

type identityKey struct{}

// WithIdentity returns ctx carrying the caller's identity.
func WithIdentity(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// identity is the caller's identity in ctx; the default identity when the
// call did not pass the gate's interceptor (a test, an in-process caller).
func (g *Gate) identity(ctx context.Context) string {
	if id, ok := ctx.Value(identityKey{}).(string); ok {
		return id
	}
	return g.apps.DefaultIdentity
}

func (g *Gate) label(id string) string {
	if g.known[id] {
		return id
	}
	return OtherApp
}

func (g *Gate) deny(id string, err *apierr.Error) error {
	if g.m != nil {
		g.m.AppDenied.WithLabelValues(g.label(id), string(err.Reason)).Inc()
	}
	return err
}

// Authenticate says who the caller of ctx is. A bearer token, when sent,
// must be one of apps.tokens_file (on any listener); without one, a client
// certificate verified against apps.tls_client_ca_file names it; else a caller
// on a Unix socket or from a loopback address is apps.default_identity,
// and one from beyond loopback is refused unless apps.allow_insecure_tcp.
// Errors never quote the token.
func (g *Gate) Authenticate(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	switch vals := md.Get("authorization"); {
	case len(vals) > 1:
		return "", g.deny("", apierr.New(apierr.Unauthenticated, "%d authorization values: send one, \"Bearer <token>\"", len(vals)))
	case len(vals) == 1:
		scheme, tok, _ := strings.Cut(vals[0], " ")
		if !strings.EqualFold(scheme, "bearer") || tok == "" {
			return "", g.deny("", apierr.New(apierr.Unauthenticated, "the authorization metadata is not \"Bearer <token>\""))
		}
		if g.tokens == nil {
			return "", g.deny("", apierr.New(apierr.Unauthenticated, "a token was sent, but this sidecar has no apps.tokens_file: send none on its Unix socket or loopback, or configure the tokens"))
		}
		e, ok := g.tokens.Lookup(strings.TrimSpace(tok))
		id := e.Name
		if !ok {
			return "", g.deny("", apierr.New(apierr.Unauthenticated, "the token is not one of spoold's apps.tokens_file"))
		}
		return id, nil
	}
	p, ok := peer.FromContext(ctx)
	if ti, isTLS := peerTLS(p); isTLS && len(ti.State.VerifiedChains) > 0 {
		id, named := CertIdentity(ti.State.VerifiedChains[0][0])
		if !named {
			return "", g.deny("", apierr.New(apierr.Unauthenticated, "the client certificate (signed by apps.tls_client_ca_file) names no identity: give it a URI SAN, a DNS SAN or a common name of 1 to %d bytes of a-z A-Z 0-9 . _ - @ : /", config.MaxAppIdentityBytes))
		}
		return id, nil
	}
	// The opt-out stands in for authentication only where none is
	// configured: with tokens or client certificates, they are required.
	insecure := g.apps.AllowInsecureTCP && g.tokens == nil && g.apps.TLSClientCAFile == ""
	if (ok && local(p.Addr)) || insecure {
		return g.apps.DefaultIdentity, nil
	}
	from := "an unknown address"
	if ok {
		from = p.Addr.String()
	}
	return "", g.deny("", apierr.New(apierr.Unauthenticated, "a call from %s, beyond loopback, needs a token (\"authorization: Bearer <token>\" with a token of spoold's apps.tokens_file) or a client certificate signed by apps.tls_client_ca_file", from))
}

func peerTLS(p *peer.Peer) (credentials.TLSInfo, bool) {
	if p == nil {
		return credentials.TLSInfo{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	return ti, ok
}

// CertIdentity is the identity a verified client certificate names: its
// first URI SAN (a SPIFFE id), else its first DNS SAN, else its subject's
// common name; false if that is not a valid identity.
func CertIdentity(c *x509.Certificate) (string, bool) {
	var id string
	switch {
	case len(c.URIs) > 0:
		id = c.URIs[0].String()
	case len(c.DNSNames) > 0:
		id = c.DNSNames[0]
	default:
		id = c.Subject.CommonName
	}
	return id, config.ValidAppIdentity(id)
}

// local reports whether a caller at addr is in the pod: on a Unix socket
// (guarded by its file mode) or at a loopback address.
func local(addr net.Addr) bool {
	if addr == nil {
		return false
	}
	if addr.Network() == "unix" {
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// UnaryInterceptor authenticates every unary call.
func (g *Gate) UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, err := g.Authenticate(ctx)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	return handler(WithIdentity(ctx, id), req)
}

// StreamInterceptor authenticates every stream before its first frame.
func (g *Gate) StreamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id, err := g.Authenticate(ss.Context())
	if err != nil {
		return apierr.ToStatus(err)
	}
	return handler(srv, identityStream{ss, WithIdentity(ss.Context(), id)})
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s identityStream) Context() context.Context { return s.ctx }

// AdmitPublish decides a publish request of n messages and size bytes to
// topic (already validated): the caller's scopes, then its rate.
func (g *Gate) AdmitPublish(ctx context.Context, topic string, n, size int) error {
	id := g.identity(ctx)
	if !g.policy.CanPublish(id, topic) {
		return g.deny(id, apierr.New(apierr.PublishNotAllowed, "app %q may not publish to topic %q: the publish scopes of its entry in spoold's apps.identities do not include it", id, topic).With("topic", topic))
	}
	return g.take(id, n, size)
}

// AdmitSubscribe decides a subscription of group to topics.
func (g *Gate) AdmitSubscribe(ctx context.Context, group string, topics []string) error {
	id := g.identity(ctx)
	for _, t := range topics {
		if !g.policy.CanSubscribe(id, t, group) {
			return g.deny(id, apierr.New(apierr.SubscribeNotAllowed, "app %q may not consume topic %q as group %q: the subscribe scopes of its entry in spoold's apps.identities do not include %s:%s", id, t, group, t, group).
				With("topic", t).With("group", group))
		}
	}
	return nil
}

// CheckCallbacks refuses, at start, callback subscriptions (the sidecar
// calls the app's Handle) that the default identity's scopes do not
// allow: the app they deliver to is the pod's own.
func (g *Gate) CheckCallbacks(subs []config.SubscriptionConfig) error {
	id := g.apps.DefaultIdentity
	for i, s := range subs {
		if s.Delivery == config.DeliveryCallback && !g.policy.CanSubscribe(id, s.Topic, s.Group) {
			return fmt.Errorf("config: subscriptions[%d] (%s:%s, delivery: callback) delivers to the app as %q, whose subscribe scopes in apps.identities do not include it: add %s:%s to them, or remove the subscription",
				i, s.Topic, s.Group, id, s.Topic, s.Group)
		}
	}
	return nil
}

// take takes n messages and size bytes from id's buckets, both or none.
func (g *Gate) take(id string, n, size int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.limiterOf(id)
	if l.msgs == nil && l.bytes == nil {
		return nil
	}
	now := g.now()
	var wait time.Duration
	if l.msgs != nil {
		if ok, w := l.msgs.Take(now, float64(n)); !ok {
			wait = w
		}
	}
	if l.bytes != nil && wait == 0 {
		if ok, w := l.bytes.Take(now, float64(size)); !ok {
			wait = w
			if l.msgs != nil {
				l.msgs.Return(float64(n))
			}
		}
	}
	g.observe(id, l, now)
	if wait > 0 {
		ms := max(wait.Milliseconds(), 1)
		return g.deny(id, apierr.New(apierr.RateLimited, "app %q publishes faster than its rate in spoold's apps section: retry in %dms with the same message ids, or raise its publish_rate", id, ms).
			With("retry_after_ms", strconv.FormatInt(ms, 10)))
	}
	return nil
}

func (g *Gate) observe(id string, l *limiter, now time.Time) {
	if g.m == nil {
		return
	}
	if l.msgs != nil {
		g.m.AppRateTokens.WithLabelValues(g.label(id), "messages").Set(l.msgs.Tokens(now))
	}
	if l.bytes != nil {
		g.m.AppRateTokens.WithLabelValues(g.label(id), "bytes").Set(l.bytes.Tokens(now))
	}
}

// limiterOf returns id's buckets (g.mu held). Identities the config does
// not name share the buckets of OtherApp, so that no request can make the
// map grow.
func (g *Gate) limiterOf(id string) *limiter {
	key := g.label(id)
	if l, ok := g.buckets[key]; ok {
		return l
	}
	r := g.rates[id]
	if r == nil {
		r = g.rates[config.AnyAppIdentity]
	}
	if r == nil {
		d := g.apps.DefaultRate()
		r = &d
	}
	l := &limiter{}
	now := g.now()
	if r.PublishRate > 0 {
		burst := float64(r.PublishBurst)
		if burst == 0 {
			burst = max(r.PublishRate, 1)
		}
		l.msgs = NewBucket(r.PublishRate, burst, now)
	}
	if r.PublishBytesRate > 0 {
		burst := float64(r.PublishBytesBurst)
		if burst == 0 {
			burst = r.PublishBytesRate
		}
		l.bytes = NewBucket(r.PublishBytesRate, max(burst, g.maxMsg), now)
	}
	g.buckets[key] = l
	return l
}
