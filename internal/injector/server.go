package injector

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The injector's limits (docs/kubernetes.md, "The injector"). Every request
// to it may be hostile: a caller that is not the API server, or one that
// sends slowly, must not hold memory or connections for long, and must not
// stop the API server's own calls from being answered (the webhook fails
// closed: an injector that does not answer stops pod creation).
const (
	// DefaultReadHeaderTimeout bounds the TLS handshake and the request's
	// headers.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included.
	// The API server gives up on a webhook after its timeoutSeconds (5 in
	// deploy/injector, at most 30).
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds a request from the end of its headers to
	// the end of the answer.
	DefaultWriteTimeout = 15 * time.Second
	// DefaultIdleTimeout closes a kept-alive connection with no request.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxHeaderBytes bounds the request line and headers.
	DefaultMaxHeaderBytes = 16 << 10
	// DefaultMaxConcurrentReviews is how many AdmissionReviews are read and
	// decided at once; one more is refused at once (503) rather than
	// queued. Deciding a 3 MiB review allocates about 13 MiB (the body,
	// the pod decoded, the patch): 4 at once stay inside the injector's
	// 128 Mi with GOMEMLIMIT=96MiB (deploy/injector).
	DefaultMaxConcurrentReviews = 4
)

// ServerConfig is the injector's HTTPS server. Build it with NewServer.
type ServerConfig struct {
	Defaults Defaults
	Logger   *slog.Logger
	// GetCertificate returns the serving certificate (reloaded on renewal).
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// ClientCAs, when set, make /mutate answer only callers presenting a
	// certificate signed by one of them (the API server, configured with
	// --admission-control-config-file) whose identity is in ClientNames.
	// /healthz and /metrics answer everyone (the kubelet presents no
	// certificate).
	ClientCAs *x509.CertPool
	// ClientNames are the identities allowed (a certificate's common name
	// or one of its DNS names); "*" allows any certificate of ClientCAs.
	// Required with ClientCAs.
	ClientNames []string

	ReadHeaderTimeout    time.Duration // 0 = DefaultReadHeaderTimeout
	ReadTimeout          time.Duration // 0 = DefaultReadTimeout
	WriteTimeout         time.Duration // 0 = DefaultWriteTimeout
	IdleTimeout          time.Duration // 0 = DefaultIdleTimeout
	MaxHeaderBytes       int           // 0 = DefaultMaxHeaderBytes
	MaxReviewBytes       int64         // 0 = MaxReviewBytes
	MaxConcurrentReviews int           // 0 = DefaultMaxConcurrentReviews

	// Registry receives the injector's metrics (nil: a new one, served
	// on /metrics).
	Registry *prometheus.Registry
}

func (c *ServerConfig) validate() error {
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxReviewBytes == 0 {
		c.MaxReviewBytes = MaxReviewBytes
	}
	if c.MaxConcurrentReviews == 0 {
		c.MaxConcurrentReviews = DefaultMaxConcurrentReviews
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	var errs []error
	if c.GetCertificate == nil {
		errs = append(errs, errors.New("injector: a serving certificate is required: the API server calls webhooks over HTTPS only"))
	}
	if c.ReadHeaderTimeout < 0 || c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 || c.MaxHeaderBytes < 0 {
		errs = append(errs, errors.New("injector: timeouts and the header limit must be positive"))
	}
	if c.MaxReviewBytes < 1 || c.MaxConcurrentReviews < 1 {
		errs = append(errs, fmt.Errorf("injector: max review bytes %d and max concurrent reviews %d must be at least 1", c.MaxReviewBytes, c.MaxConcurrentReviews))
	}
	if (c.ClientCAs != nil) != (len(c.ClientNames) > 0) {
		errs = append(errs, errors.New("injector: a client CA and client names go together: name the API server's certificate (its common name or a DNS name, or * for any certificate of the CA)"))
	}
	return errors.Join(errs...)
}

// NewServer makes the injector's HTTPS server: POST /mutate, GET /healthz
// and GET /metrics. Serve it with ListenAndServeTLS("", "").
func NewServer(cfg ServerConfig) (*http.Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := newMetrics(cfg.Registry)
	h := &Handler{Defaults: cfg.Defaults, Logger: cfg.Logger, MaxBytes: cfg.MaxReviewBytes, metrics: m}
	mux := http.NewServeMux()
	mux.Handle("/mutate", &guard{cfg: cfg, sem: make(chan struct{}, cfg.MaxConcurrentReviews), next: h, metrics: m})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("/metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cfg.GetCertificate}
	if cfg.ClientCAs != nil {
		// Verified when given; /mutate refuses requests without one.
		tc.ClientAuth, tc.ClientCAs = tls.VerifyClientCertIfGiven, cfg.ClientCAs
	}
	return &http.Server{
		Handler:   mux,
		TLSConfig: tc,
		// HTTP/1.1 only: HTTP/2's many streams per connection slip past
		// the per-connection limits (and rapid reset, CVE-2023-44487); the
		// API server falls back to HTTP/1.1, as for Kubernetes' own
		// webhook servers.
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}, nil
}

// guard is what a request passes before the handler reads it: the caller
// (when client certificates are required), the declared size, and a slot
// among MaxConcurrentReviews. Its refusals say nothing of the injector's
// configuration.
type guard struct {
	cfg     ServerConfig
	sem     chan struct{}
	next    http.Handler
	metrics *metrics
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.cfg.ClientCAs != nil && !g.allowed(r) {
		g.metrics.refused.WithLabelValues("unauthenticated").Inc()
		http.Error(w, "spool injector: a client certificate of the API server is required", http.StatusUnauthorized)
		return
	}
	if r.ContentLength > g.cfg.MaxReviewBytes {
		g.metrics.refused.WithLabelValues("too_large").Inc()
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("spool injector: AdmissionReview over %d bytes", g.cfg.MaxReviewBytes), http.StatusRequestEntityTooLarge)
		return
	}
	select {
	case g.sem <- struct{}{}:
	default:
		g.metrics.refused.WithLabelValues("busy").Inc()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "spool injector: too many requests at once", http.StatusServiceUnavailable)
		return
	}
	defer func() { <-g.sem }()
	g.metrics.inFlight.Inc()
	defer g.metrics.inFlight.Dec()
	g.next.ServeHTTP(w, r)
}

// allowed reports whether the request came with a verified certificate
// (the TLS handshake checked the chain) naming an allowed identity.
func (g *guard) allowed(r *http.Request) bool {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return false
	}
	if slices.Contains(g.cfg.ClientNames, "*") {
		return true
	}
	leaf := r.TLS.VerifiedChains[0][0]
	if slices.Contains(g.cfg.ClientNames, leaf.Subject.CommonName) {
		return true
	}
	return slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(g.cfg.ClientNames, n) })
}

// metrics of the injector (served on /metrics):
//
//	spool_injector_refused_total{reason}  requests refused before they were decided:
//	                                      unauthenticated, too_large, busy, bad_request
//	spool_injector_reviews_total{outcome} AdmissionReviews decided: injected, unchanged, denied
//	spool_injector_reviews_in_flight      AdmissionReviews being read or decided
type metrics struct {
	refused  *prometheus.CounterVec
	reviews  *prometheus.CounterVec
	inFlight prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_injector_refused_total",
			Help: "Requests to /mutate refused before an AdmissionReview was decided, by reason."}, []string{"reason"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_injector_reviews_total",
			Help: "AdmissionReviews decided, by outcome (injected, unchanged, denied)."}, []string{"outcome"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spool_injector_reviews_in_flight",
			Help: "AdmissionReviews being read or decided (at most the max concurrent reviews)."}),
	}
	for _, r := range []string{"unauthenticated", "too_large", "busy", "bad_request"} {
		m.refused.WithLabelValues(r)
	}
	for _, o := range []string{"injected", "unchanged", "denied"} {
		m.reviews.WithLabelValues(o)
	}
	reg.MustRegister(m.refused, m.reviews, m.inFlight)
	return m
}
