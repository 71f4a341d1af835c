package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
