package injector

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue makes a certificate named cn for server and client use.
func (ca *testCA) issue(t *testing.T, cn string, dns ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, DNSNames: dns, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// injectorServer is a real injector HTTPS server on a loopback port.
type injectorServer struct {
	addr string
	ca   *testCA // signed the serving certificate
	reg  *prometheus.Registry
}

func startInjector(t *testing.T, cfg ServerConfig) *injectorServer {
	t.Helper()
	ca := newTestCA(t)
	serving := ca.issue(t, "spool-injector", "spool-injector.spool-system.svc")
	if cfg.Defaults.Image == "" {
		d, err := ParseDefaults([]byte(testDefaults))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Defaults = d
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &serving, nil }
	cfg.Registry = prometheus.NewRegistry()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(l, "", "") }() // owned: ends at Shutdown in Cleanup
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return &injectorServer{addr: l.Addr().String(), ca: ca, reg: cfg.Registry}
}

// client is an HTTPS client trusting the injector's CA, presenting certs.
func (s *injectorServer) client(certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: s.tlsConfig(certs...)}}
}

func (s *injectorServer) tlsConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: s.ca.pool, Certificates: certs, ServerName: "spool-injector.spool-system.svc", MinVersion: tls.VersionTLS12}
}

func (s *injectorServer) dial(t *testing.T) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", s.addr, s.tlsConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin waits until the server closes c (a read ends) and says how
// long that took; the test fails if it has not after limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the injector still held the connection after %v", limit)
	}
	return time.Since(start)
}

func reviewBody(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/deployment-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A caller that sends its headers slowly, or its body slowly, is cut off:
// neither can hold a connection, or the memory of a body, for long.
func TestServerCutsOffSlowRequests(t *testing.T) {
	s := startInjector(t, ServerConfig{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 600 * time.Millisecond})
	headers := s.dial(t)
	fmt.Fprintf(headers, "POST /mutate HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	body := s.dial(t)
	fmt.Fprintf(body, "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"kind\":")
	if d := closedWithin(t, headers, 5*time.Second); d > 3*time.Second {
		t.Errorf("slow headers held the connection %v", d)
	}
	if d := closedWithin(t, body, 5*time.Second); d > 3*time.Second {
		t.Errorf("a slow body held the connection %v", d)
	}
	// A connection that has sent nothing at all goes too (the TLS
	// handshake is inside the header timeout).
	raw, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	closedWithin(t, raw, 5*time.Second)
}

// A body larger than the limit is refused with 413 from its
// Content-Length, before it is read; one without a Content-Length is
// refused once the limit is read.
func TestServerRefusesLargeReviews(t *testing.T) {
	s := startInjector(t, ServerConfig{MaxReviewBytes: 64 << 10})
	c := s.dial(t)
	fmt.Fprintf(c, "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 3<<20)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("declared 3 MiB: status %d, want 413", resp.StatusCode)
	}
	chunked, err := s.client().Post("https://"+s.addr+"/mutate", "application/json", io.MultiReader(strings.NewReader(`{"kind":"`), strings.NewReader(strings.Repeat("x", 128<<10))))
	if err != nil {
		t.Fatal(err)
	}
	chunked.Body.Close()
	if chunked.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("undeclared 128 KiB: status %d, want 413", chunked.StatusCode)
	}
	if n := testutil.ToFloat64(counter(t, s.reg, "spool_injector_refused_total", "too_large")); n != 2 {
		t.Errorf("spool_injector_refused_total{reason=too_large} = %v, want 2", n)
	}
}

// Requests beyond the concurrency limit are refused at once (503) rather
// than read: callers holding every slot cannot grow the injector's memory,
// and the slots come back once they are cut off or done.
func TestServerRefusesExcessConcurrency(t *testing.T) {
	s := startInjector(t, ServerConfig{MaxConcurrentReviews: 2, ReadTimeout: 2 * time.Second})
	for range 2 {
		c := s.dial(t)
		fmt.Fprintf(c, "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	}
	// The held requests have their slots once the gauge says so.
	waitFor(t, 5*time.Second, "two requests in flight", func() bool {
		return testutil.ToFloat64(gauge(t, s.reg, "spool_injector_reviews_in_flight")) == 2
	})
	start := time.Now()
	resp, err := s.client().Post("https://"+s.addr+"/mutate", "application/json", bytes.NewReader(reviewBody(t)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || time.Since(start) > time.Second {
		t.Fatalf("third request: %d after %v, want 503 at once", resp.StatusCode, time.Since(start))
	}
	if strings.Contains(string(b), "spoold") || strings.Contains(string(b), "redis") {
		t.Errorf("the refusal shows the configuration: %q", b)
	}
	if n := testutil.ToFloat64(counter(t, s.reg, "spool_injector_refused_total", "busy")); n != 1 {
		t.Errorf("spool_injector_refused_total{reason=busy} = %v, want 1", n)
	}
	// The held requests are cut off by the read timeout; then the API
	// server's call gets through.
	waitFor(t, 10*time.Second, "the slots free again", func() bool {
		return testutil.ToFloat64(gauge(t, s.reg, "spool_injector_reviews_in_flight")) == 0
	})
	resp, err = s.client().Post("https://"+s.addr+"/mutate", "application/json", bytes.NewReader(reviewBody(t)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the slow callers: status %d", resp.StatusCode)
	}
}

// With a client CA, /mutate answers only a certificate of that CA with an
// allowed name; the refusals show nothing of the defaults. /healthz needs
// no certificate (the kubelet has none).
func TestServerClientCertificates(t *testing.T) {
	apiCA, otherCA := newTestCA(t), newTestCA(t)
	s := startInjector(t, ServerConfig{ClientCAs: apiCA.pool, ClientNames: []string{"kube-apiserver-webhook"}})
	url := "https://" + s.addr + "/mutate"
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		want  int
	}{
		{"no certificate", nil, http.StatusUnauthorized},
		{"the CA's certificate of another name", []tls.Certificate{apiCA.issue(t, "system:node:worker-1")}, http.StatusUnauthorized},
		{"the API server's", []tls.Certificate{apiCA.issue(t, "kube-apiserver-webhook")}, http.StatusOK},
		{"by DNS name", []tls.Certificate{apiCA.issue(t, "x", "kube-apiserver-webhook")}, http.StatusOK},
	} {
		resp, err := s.client(c.certs...).Post(url, "application/json", bytes.NewReader(reviewBody(t)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.want)
		}
		if c.want != http.StatusOK {
			for _, secret := range []string{"spool/spoold", "redis", "spool-redis"} {
				if strings.Contains(string(b), secret) {
					t.Errorf("%s: the refusal shows %q: %q", c.name, secret, b)
				}
			}
		}
	}
	// A certificate of another CA fails the handshake.
	if _, err := s.client(otherCA.issue(t, "kube-apiserver-webhook")).Post(url, "application/json", bytes.NewReader(reviewBody(t))); err == nil {
		t.Error("a certificate of another CA was accepted")
	}
	resp, err := s.client().Get("https://" + s.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz without a certificate: %d", resp.StatusCode)
	}
	if n := testutil.ToFloat64(counter(t, s.reg, "spool_injector_refused_total", "unauthenticated")); n != 2 {
		t.Errorf("spool_injector_refused_total{reason=unauthenticated} = %v, want 2", n)
	}
}

func TestServerConfigValidate(t *testing.T) {
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, nil }
	for _, c := range []struct {
		cfg  ServerConfig
		says string
	}{
		{ServerConfig{}, "serving certificate is required"},
		{ServerConfig{GetCertificate: get, ClientCAs: x509.NewCertPool()}, "client CA and client names go together"},
		{ServerConfig{GetCertificate: get, ClientNames: []string{"x"}}, "client CA and client names go together"},
		{ServerConfig{GetCertificate: get, MaxConcurrentReviews: -1}, "must be at least 1"},
	} {
		if _, err := NewServer(c.cfg); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.says)
		}
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name, reason string) prometheus.Collector {
	t.Helper()
	return metricOf(t, reg, name, reason)
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return metricOf(t, reg, name, "")
}

// metricOf is a collector of the one series of name (with the label
// reason when given), read back from the registry.
func metricOf(t *testing.T, reg *prometheus.Registry, name, reason string) prometheus.Collector {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			ok := reason == ""
			for _, l := range m.GetLabel() {
				ok = ok || (l.GetName() == "reason" && l.GetValue() == reason)
			}
			if !ok {
				continue
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
			g.Set(v)
			return g
		}
	}
	t.Fatalf("no series %s{reason=%q}", name, reason)
	return nil
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond) // sleep-ok: polling a condition
	}
}

// The injector speaks HTTP/1.1 only, as Kubernetes' own webhook servers do
// since HTTP/2's rapid reset (CVE-2023-44487): one HTTP/2 connection
// carries many streams, each of which the per-connection limits above
// would bound only loosely. The API server falls back to HTTP/1.1.
func TestServerRefusesHTTP2(t *testing.T) {
	s := startInjector(t, ServerConfig{})
	cfg := s.tlsConfig()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	c, err := tls.Dial("tcp", s.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Fatalf("negotiated %q, want HTTP/1.1", p)
	}
}
