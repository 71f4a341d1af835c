package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
)

// Tokens of the tests' tokens file.
const (
	readToken    = "read-token-0123456789abcdef"
	operateToken = "operate-token-0123456789abcdef"
)

// logBuffer collects spoold's JSON log lines (safe for concurrent writes).
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// auditLines returns the log's audit lines, decoded.
func (b *logBuffer) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if m["audit"] != true {
			continue
		}
		if args, ok := m["args"].(map[string]any); ok { // a request's arguments, as top-level keys for the tests
			for k, v := range args {
				m["args."+k] = v
			}
		}
		out = append(out, m)
	}
	return out
}

// runningSidecar is a real sidecar (sidecar.Run, as spoold runs it) in
// this process, in dev mode, its log in a buffer.
type runningSidecar struct {
	addrs Addrs
	log   *logBuffer
}

// adminTestConfig is a dev config on free loopback ports, with a probe
// listener.
func adminTestConfig(t *testing.T) *config.Config {
	cfg := config.DevConfig()
	cfg.Node.ID = "node-1"
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.AppListen = []string{"127.0.0.1:0"}
	cfg.Node.AdminListen = "127.0.0.1:0"
	cfg.Node.ProbeListen = "127.0.0.1:0"
	return &cfg
}

func startAdminSidecar(t *testing.T, cfg *config.Config) *runningSidecar {
	t.Helper()
	cfg.ApplyDefaults()
	s := &runningSidecar{log: &logBuffer{}}
	logger := slog.New(slog.NewJSONHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Options{Logger: logger, Ready: func(a Addrs) { ready <- a }}) }()
	select {
	case s.addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("sidecar did not start: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("sidecar did not start within 20s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar.Run: %v", err)
		}
	})
	return s
}

// writeTokens writes a tokens file with a read and an operate token.
func writeTokens(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	body := "# admin tokens\n" + readToken + " dashboards read\n\n" + operateToken + " oncall operate\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func adminConn(t *testing.T, addr string) spoolv1.AdminServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(dialTarget(addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return spoolv1.NewAdminServiceClient(conn)
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func wantCode(t *testing.T, what string, err error, code codes.Code, inMsg ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, s := range inMsg {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Errorf("%s: message %q does not say %q", what, status.Convert(err).Message(), s)
		}
	}
}

// metricValue scrapes url and returns the value of the series line that
// starts with series (0 when absent).
func metricValue(t *testing.T, url, series string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return "0"
}

// The attack of the report: AdminService reached from another host with
// no credentials. With admin.tokens_file set, a call without a token or
// with an unknown one is refused Unauthenticated, a read token may read
// but not change anything (PermissionDenied naming the method and the role
// needed), an operate token may; refusals are counted by reason.
func TestAdminRequiresAToken(t *testing.T) {
	cfg := adminTestConfig(t)
	cfg.Admin.TokensFile = writeTokens(t)
	s := startAdminSidecar(t, cfg)
	c := adminConn(t, s.addrs.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := c.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	wantCode(t, "ListTopics without a token", err, codes.Unauthenticated, "ListTopics", "token")
	_, err = c.ListTopics(withToken(ctx, "not-a-token-of-the-file-xx"), &spoolv1.ListTopicsRequest{})
	wantCode(t, "ListTopics with an unknown token", err, codes.Unauthenticated, "ListTopics")
	if strings.Contains(status.Convert(err).Message(), "not-a-token") {
		t.Errorf("the refusal repeats the token: %v", err)
	}
	tail, err := c.Tail(ctx, &spoolv1.TailRequest{Topic: "demo"})
	if err == nil {
		_, err = tail.Recv()
	}
	wantCode(t, "Tail without a token", err, codes.Unauthenticated, "Tail")

	if _, err := c.ListTopics(withToken(ctx, readToken), &spoolv1.ListTopicsRequest{}); err != nil {
		t.Fatalf("ListTopics with a read token: %v", err)
	}
	_, err = c.CreateTopic(withToken(ctx, readToken), &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 1})
	wantCode(t, "CreateTopic with a read token", err, codes.PermissionDenied, "CreateTopic", "operate", "dashboards")
	_, err = c.PurgeDeadLetters(withToken(ctx, readToken), &spoolv1.PurgeDeadLettersRequest{Group: "demo-app", Topic: "demo"})
	wantCode(t, "PurgeDeadLetters with a read token", err, codes.PermissionDenied, "PurgeDeadLetters", "operate")
	if _, err := c.CreateTopic(withToken(ctx, operateToken), &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 1}); err != nil {
		t.Fatalf("CreateTopic with an operate token: %v", err)
	}

	metrics := "http://" + s.addrs.Probe + "/metrics"
	if got := metricValue(t, metrics, "spool_admin_tokens"); got != "2" {
		t.Errorf("spool_admin_tokens = %s, want 2", got)
	}
	for reason, want := range map[string]string{"no_credentials": "2", "unknown_token": "1", "role_too_low": "2"} {
		if got := metricValue(t, metrics, `spool_admin_refused_total{reason="`+reason+`"}`); got != want {
			t.Errorf("spool_admin_refused_total{reason=%q} = %s, want %s", reason, got, want)
		}
	}
	if strings.Contains(s.log.String(), readToken) || strings.Contains(s.log.String(), operateToken) {
		t.Error("a token is in spoold's log")
	}
}

// pprof answers on the admin listener only, and with authentication on,
// only to an operate token.
func TestAdminPprofNeedsOperate(t *testing.T) {
	cfg := adminTestConfig(t)
	cfg.Admin.TokensFile = writeTokens(t)
	s := startAdminSidecar(t, cfg)
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.addrs.Admin+"/debug/pprof/", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for token, want := range map[string]int{"": http.StatusUnauthorized, readToken: http.StatusForbidden, operateToken: http.StatusOK} {
		if got := get(token); got != want {
			t.Errorf("GET /debug/pprof/ with token %q: %d, want %d", token[:min(4, len(token))], got, want)
		}
	}
}

// The probe listener serves the probes, gRPC health and /metrics, and
// nothing else: not pprof, not AdminService, even with no authentication
// configured.
func TestProbeListenerServesOnlyProbes(t *testing.T) {
	s := startAdminSidecar(t, adminTestConfig(t))
	probe := "http://" + s.addrs.Probe
	for path, want := range map[string]int{
		"/healthz": 200, "/readyz": 200, "/startupz": 200, "/metrics": 200,
		"/debug/pprof/": 404, "/debug/pprof/profile?seconds=1": 404, "/debug/pprof/trace": 404, "/": 404,
	} {
		resp, err := http.Get(probe + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on the probe port: %d, want %d", path, resp.StatusCode, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := adminConn(t, s.addrs.Probe).ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	wantCode(t, "AdminService on the probe port", err, codes.Unimplemented)
	conn, err := grpc.NewClient(dialTarget(s.addrs.Probe), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health on the probe port: %v, %v", hr, err)
	}
	// The admin listener (loopback) still answers AdminService without
	// credentials: no authentication is configured.
	if _, err := adminConn(t, s.addrs.Admin).ListTopics(ctx, &spoolv1.ListTopicsRequest{}); err != nil {
		t.Errorf("AdminService on the loopback admin listener: %v", err)
	}
}

// Every state-changing call writes one audit line: who, the method and
// its key arguments, the outcome; refusals too. Never a token.
func TestAdminAuditLog(t *testing.T) {
	cfg := adminTestConfig(t)
	cfg.Admin.TokensFile = writeTokens(t)
	s := startAdminSidecar(t, cfg)
	c := adminConn(t, s.addrs.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.CreateTopic(withToken(ctx, operateToken), &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	_, err := c.DeleteTopic(withToken(ctx, readToken), &spoolv1.DeleteTopicRequest{Name: "audit"})
	wantCode(t, "DeleteTopic with a read token", err, codes.PermissionDenied)
	_, err = c.ResetOffsets(withToken(ctx, operateToken), &spoolv1.ResetOffsetsRequest{Group: "nope", Topic: "demo"})
	if err == nil {
		t.Fatal("ResetOffsets of an unknown group succeeded")
	}
	if _, err := c.ListTopics(withToken(ctx, operateToken), &spoolv1.ListTopicsRequest{}); err != nil {
		t.Fatal(err) // a read: no audit line
	}
	lines := s.log.auditLines(t)
	if len(lines) != 3 {
		t.Fatalf("%d audit lines, want 3 (CreateTopic, DeleteTopic, ResetOffsets): %v", len(lines), lines)
	}
	want := []map[string]any{
		{"who": "oncall", "via": "token", "method": "CreateTopic", "args.name": "audit", "args.partitions": float64(2), "outcome": "ok"},
		{"who": "dashboards", "via": "token", "method": "DeleteTopic", "args.name": "audit", "outcome": "PermissionDenied"},
		{"who": "oncall", "via": "token", "method": "ResetOffsets", "args.group": "nope", "args.topic": "demo", "outcome": "NotFound"},
	}
	for i, w := range want {
		for k, v := range w {
			if lines[i][k] != v {
				t.Errorf("audit line %d: %s = %v, want %v (%v)", i, k, lines[i][k], v, lines[i])
			}
		}
	}
	if strings.Contains(s.log.String(), operateToken) || strings.Contains(s.log.String(), readToken) {
		t.Error("a token is in spoold's log")
	}
}

// The admin listener on a Unix socket: its file mode is admin.socket_mode,
// the caller is "local socket" in the audit log.
func TestAdminUnixSocket(t *testing.T) {
	cfg := adminTestConfig(t)
	dir, err := os.MkdirTemp("", "spool-admin") // short: a socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg.Node.AdminListen = "unix://" + filepath.Join(dir, "admin.sock")
	s := startAdminSidecar(t, cfg)
	fi, err := os.Stat(filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket mode %v, want 0600", fi.Mode().Perm())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adminConn(t, s.addrs.Admin).CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	lines := s.log.auditLines(t)
	if len(lines) != 1 || lines[0]["who"] != "local socket" || lines[0]["outcome"] != "ok" {
		t.Errorf("audit lines %v, want one by the local socket", lines)
	}
}

// 1,000 half-open connections stayed open on the admin port: each HTTP
// server now closes a connection that has not sent its request headers
// within admin.read_header_timeout, 500 of them on each port at once.
func TestHTTPServersCloseHalfOpenConnections(t *testing.T) {
	const perPort = 500
	cfg := adminTestConfig(t)
	cfg.Admin.ReadHeaderTimeout = 200 * time.Millisecond
	s := startAdminSidecar(t, cfg)
	for _, addr := range []string{s.addrs.Admin, s.addrs.Probe} {
		var conns []net.Conn
		for i := range perPort {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if i%2 == 0 { // half the requests stop in their headers
				_, _ = c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n"))
			}
			conns = append(conns, c)
		}
		for i, c := range conns {
			// The deadline only bounds a failing test: the server closes
			// the connection long before.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := io.ReadAll(c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("%s: connection %d still open after 10s", addr, i)
			}
		}
	}
}

// spoold refuses to start with AdminService on a non-loopback address and
// no authentication, before it listens; and with a tokens file it cannot
// read.
func TestStartRefusedWhenAdminExposedWithoutAuth(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*config.Config)
		want string
	}{
		{"every interface", func(c *config.Config) { c.Node.AdminListen = "0.0.0.0:0" }, "node.admin_listen"},
		{"missing tokens file", func(c *config.Config) {
			c.Node.AdminListen = "0.0.0.0:0"
			c.Admin.TokensFile = filepath.Join(t.TempDir(), "absent")
		}, "admin.tokens_file"},
		{"short token", func(c *config.Config) {
			p := filepath.Join(t.TempDir(), "tokens")
			_ = os.WriteFile(p, []byte("short ops operate\n"), 0o600)
			c.Admin.TokensFile = p
		}, "at least 16 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := adminTestConfig(t)
			tc.set(cfg)
			cfg.ApplyDefaults()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Run(ctx, cfg, Options{Logger: slog.New(slog.DiscardHandler), Ready: func(Addrs) { t.Error("the sidecar started") }})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// Every AdminService method has an entry in the role table, so a new RPC
// cannot be served without a decision on who may call it.
func TestAdminMethodRolesCoverEveryRPC(t *testing.T) {
	svc := spoolv1.AdminService_ServiceDesc
	var names []string
	for _, m := range svc.Methods {
		names = append(names, m.MethodName)
	}
	for _, st := range svc.Streams {
		names = append(names, st.StreamName)
	}
	for _, n := range names {
		full := "/" + svc.ServiceName + "/" + n
		if _, ok := adminMethodRoles[full]; !ok {
			t.Errorf("%s has no entry in adminMethodRoles", full)
		}
	}
	if len(adminMethodRoles) != len(names) {
		t.Errorf("adminMethodRoles has %d entries for %d methods", len(adminMethodRoles), len(names))
	}
}

// issueAdmin writes name.crt and name.key: a server certificate for
// 127.0.0.1 (server), or a client certificate with common name cn and uri
// as URI SAN.
func issueAdmin(t *testing.T, p *testPKI, name, cn, uri string, server bool) tls.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	if uri != "" {
		u, _ := url.Parse(uri)
		tmpl.URIs = []*url.URL{u}
	}
	return p.issue(t, name, tmpl)
}

// An mTLS client certificate is a credential: its identity (here a URI
// SAN, or the common name) maps to a role in admin.clients. A certificate
// of the CA whose identity is not listed, or none, is refused.
func TestAdminClientCertificates(t *testing.T) {
	pki := newTestPKI(t)
	issueAdmin(t, pki, "server", "spoold", "", true)
	operate := issueAdmin(t, pki, "oncall", "oncall", "spiffe://example.org/ops/oncall", false)
	read := issueAdmin(t, pki, "grafana", "grafana", "", false)
	stranger := issueAdmin(t, pki, "stranger", "stranger", "", false)
	cfg := adminTestConfig(t)
	cfg.Node.AdminListen = "0.0.0.0:0" // beyond loopback: allowed, since certificates are required
	cfg.Admin.TLS = config.AdminTLSConfig{CertFile: filepath.Join(pki.dir, "server.crt"), KeyFile: filepath.Join(pki.dir, "server.key"), ClientCAFile: filepath.Join(pki.dir, "ca.crt")}
	cfg.Admin.Clients = []config.AdminClient{{Identity: "spiffe://example.org/ops/oncall", Role: config.RoleOperate}, {Identity: "grafana", Role: config.RoleRead}}
	s := startAdminSidecar(t, cfg)
	_, port, _ := net.SplitHostPort(s.addrs.Admin)
	client := func(certs ...tls.Certificate) spoolv1.AdminServiceClient {
		tc := &tls.Config{RootCAs: pki.caPool, Certificates: certs, MinVersion: tls.VersionTLS12}
		conn, err := grpc.NewClient("passthrough:///127.0.0.1:"+port, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return spoolv1.NewAdminServiceClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client(read).ListTopics(ctx, &spoolv1.ListTopicsRequest{}); err != nil {
		t.Fatalf("ListTopics with a read certificate: %v", err)
	}
	_, err := client(read).CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 1})
	wantCode(t, "CreateTopic with a read certificate", err, codes.PermissionDenied, "CreateTopic", "operate", "grafana")
	if _, err := client(operate).CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 1}); err != nil {
		t.Fatalf("CreateTopic with an operate certificate: %v", err)
	}
	_, err = client(stranger).ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	wantCode(t, "ListTopics with a certificate not in admin.clients", err, codes.Unauthenticated, "admin.clients")
	if _, err := client().ListTopics(ctx, &spoolv1.ListTopicsRequest{}); err == nil {
		t.Error("ListTopics without a client certificate succeeded")
	}
	lines := s.log.auditLines(t)
	if len(lines) != 2 || lines[1]["who"] != "spiffe://example.org/ops/oncall" || lines[1]["via"] != "certificate" || lines[1]["outcome"] != "ok" {
		t.Errorf("audit lines %v, want the refusal then the create by the certificate's URI", lines)
	}
}

// The tokens file is read again when it changes: a token added works, a
// token removed stops working, without a restart; a file that no longer
// loads keeps the tokens before.
func TestAdminTokensFileReloads(t *testing.T) {
	cfg := adminTestConfig(t)
	cfg.Admin.TokensFile = writeTokens(t)
	s := startAdminSidecar(t, cfg)
	c := adminConn(t, s.addrs.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const newToken = "rotated-token-0123456789abcdef"
	rewrite := func(body string) {
		tmp := cfg.Admin.TokensFile + ".new"
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg.Admin.TokensFile); err != nil { // as a Kubernetes secret changes
			t.Fatal(err)
		}
	}
	await := func(what string, token string, want codes.Code) {
		t.Helper()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_, err := c.ListTopics(withToken(ctx, token), &spoolv1.ListTopicsRequest{})
			if status.Code(err) == want {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: still %v, want %s", what, err, want)
			case <-tick.C:
			}
		}
	}
	rewrite(newToken + " rotated read\n")
	await("the new token", newToken, codes.OK)
	await("the removed token", readToken, codes.Unauthenticated)
	rewrite("garbage\n")
	for !strings.Contains(s.log.String(), "does not load") { // each call may find the change
		_, _ = c.ListTopics(withToken(ctx, newToken), &spoolv1.ListTopicsRequest{})
		select {
		case <-ctx.Done():
			t.Fatal("a tokens file that does not load was not reported")
		case <-time.After(50 * time.Millisecond):
		}
	}
	await("the new token after a bad file", newToken, codes.OK)
}
