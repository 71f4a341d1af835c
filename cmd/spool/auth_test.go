package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spoolmq/spool/sidecar/config"
)

const (
	cliReadToken    = "cli-read-token-0123456789abcdef"
	cliOperateToken = "cli-operate-token-0123456789abcdef"
)

// authSidecar is a real sidecar whose admin listener requires a token
// (admin.tokens_file with a read and an operate token).
func authSidecar(t *testing.T) (*testSidecar, string) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	write(t, tokens, cliReadToken+" viewer read\n"+cliOperateToken+" oncall operate\n")
	s := startSidecarWith(t, func(c *config.Config) { c.Admin.TokensFile = tokens })
	return s, dir
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func wantExit(t *testing.T, what string, r result, code int, stderr ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("%s: stderr %q does not say %q", what, r.stderr, s)
		}
	}
}

// spool authenticates with a token from --token, --token-file,
// SPOOL_TOKEN or SPOOL_TOKEN_FILE; without one the sidecar refuses, and
// spool says how to give one.
func TestCLIToken(t *testing.T) {
	s, dir := authSidecar(t)
	env := func(kv ...string) map[string]string {
		m := s.envs()
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	readFile := filepath.Join(dir, "read.token")
	write(t, readFile, cliReadToken+"\n")
	opFile := filepath.Join(dir, "operate.token")
	write(t, opFile, cliOperateToken+"\n")

	r := runSpool(t, env(), "", false, "topic", "list")
	wantExit(t, "topic list without a token", r, exitFailed, "ListTopics", "--token-file", envTokenFile)
	r = runSpool(t, env(envTokenFile, readFile), "", false, "topic", "list")
	wantExit(t, "topic list with SPOOL_TOKEN_FILE", r, exitOK)
	if !strings.Contains(r.stdout, ordersT) {
		t.Errorf("topic list: %s", r.stdout)
	}
	r = runSpool(t, env(envToken, cliReadToken), "", false, "topic", "create", "audit", "--partitions", "1")
	wantExit(t, "topic create with a read token", r, exitFailed, "CreateTopic needs the operate role", "viewer")
	r = runSpool(t, env(), "", false, "--token-file", opFile, "topic", "create", "audit", "--partitions", "1")
	wantExit(t, "topic create with --token-file", r, exitOK)
	r = runSpool(t, env(envTokenFile, readFile), "", false, "--token", cliOperateToken, "topic", "delete", "audit", "--yes")
	wantExit(t, "topic delete with --token over SPOOL_TOKEN_FILE", r, exitOK)
	r = runSpool(t, env(), "", false, "--token-file", filepath.Join(dir, "absent"), "topic", "list")
	wantExit(t, "a token file that does not exist", r, exitUsage, "--token-file")
}

// Contexts in spool's config file (like kubeconfig): the current context,
// or --context, gives the address and the token file.
func TestCLIContexts(t *testing.T) {
	s, dir := authSidecar(t)
	write(t, filepath.Join(dir, "ops.token"), cliOperateToken+"\n")
	write(t, filepath.Join(dir, "view.token"), cliReadToken+"\n")
	cfgPath := filepath.Join(dir, "config.yaml")
	write(t, cfgPath, `current-context: view
contexts:
  - name: view
    admin: `+s.admin+`
    token-file: view.token
  - name: ops
    admin: `+s.admin+`
    token-file: `+filepath.Join(dir, "ops.token")+`
  - name: nowhere
    admin: 127.0.0.1:1
`)
	env := map[string]string{envConfig: cfgPath} // no SPOOL_ADMIN: the context gives it
	r := runSpool(t, env, "", false, "topic", "list")
	wantExit(t, "topic list in the current context", r, exitOK)
	r = runSpool(t, env, "", false, "topic", "create", "audit", "--partitions", "1")
	wantExit(t, "topic create in the read context", r, exitFailed, "operate")
	r = runSpool(t, env, "", false, "--context", "ops", "topic", "create", "audit", "--partitions", "1")
	wantExit(t, "topic create with --context ops", r, exitOK)
	r = runSpool(t, env, "", false, "--context", "nowhere", "topic", "list")
	wantExit(t, "a context whose sidecar is absent", r, exitUnreachable, "127.0.0.1:1")
	r = runSpool(t, env, "", false, "--context", "nope", "topic", "list")
	wantExit(t, "an unknown context", r, exitUsage, `"nope"`, "view, ops, nowhere")
	r = runSpool(t, env, "", false, "--context", "ops", "--admin", "127.0.0.1:1", "topic", "list")
	wantExit(t, "--admin over the context", r, exitUnreachable, "127.0.0.1:1")
}

// writeTestPKI writes a CA (ca.crt), a server certificate for 127.0.0.1
// (server.crt, server.key) and client certificates with the given common
// names (<cn>.crt, <cn>.key) into dir.
func writeTestPKI(t *testing.T, dir string, clients ...string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "spool test CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	writePEMFile(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", caDER)
	issue := func(name string, serial int64, server bool) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		writePEMFile(t, filepath.Join(dir, name+".crt"), "CERTIFICATE", der)
		writePEMFile(t, filepath.Join(dir, name+".key"), "EC PRIVATE KEY", kb)
	}
	issue("server", 2, true)
	for i, cn := range clients {
		issue(cn, int64(3+i), false)
	}
}

func writePEMFile(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	write(t, path, string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})))
}

// spool authenticates with a client certificate (--cacert, --cert, --key,
// or a context's files) to a sidecar whose admin listener requires mTLS.
func TestCLIClientCertificate(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir, "oncall", "grafana")
	s := startSidecarWith(t, func(c *config.Config) {
		c.Admin.TLS = config.AdminTLSConfig{CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key"), ClientCAFile: filepath.Join(dir, "ca.crt")}
		c.Admin.Clients = []config.AdminClient{{Identity: "oncall", Role: config.RoleOperate}, {Identity: "grafana", Role: config.RoleRead}}
	})
	env := s.envs()
	flags := func(cn string) []string {
		return []string{"--cacert", filepath.Join(dir, "ca.crt"), "--cert", filepath.Join(dir, cn+".crt"), "--key", filepath.Join(dir, cn+".key")}
	}
	r := runSpool(t, env, "", false, append(flags("grafana"), "topic", "list")...)
	wantExit(t, "topic list with a read certificate", r, exitOK)
	r = runSpool(t, env, "", false, append(flags("grafana"), "topic", "create", "audit", "--partitions", "1")...)
	wantExit(t, "topic create with a read certificate", r, exitFailed, "CreateTopic needs the operate role", "grafana")
	r = runSpool(t, env, "", false, append(flags("oncall"), "topic", "create", "audit", "--partitions", "1")...)
	wantExit(t, "topic create with an operate certificate", r, exitOK)
	r = runSpool(t, env, "", false, "--cert", filepath.Join(dir, "oncall.crt"), "topic", "list")
	wantExit(t, "--cert without --key", r, exitUsage, "--key")

	cfgPath := filepath.Join(dir, "config.yaml")
	write(t, cfgPath, "current-context: ops\ncontexts:\n  - name: ops\n    admin: "+s.admin+"\n    ca-file: ca.crt\n    cert-file: oncall.crt\n    key-file: oncall.key\n")
	r = runSpool(t, map[string]string{envConfig: cfgPath}, "", false, "topic", "delete", "audit", "--yes")
	wantExit(t, "topic delete in a context with a certificate", r, exitOK)
}
