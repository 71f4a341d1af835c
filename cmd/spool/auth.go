package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spoolmq/spool/sidecar/config"
)

// How spool proves who it is to spoold's admin listener (docs/cli.md,
// "Authentication"): a bearer token, a client certificate, or nothing (the
// loopback address or the Unix socket inside the pod). Each setting comes
// from its flag, else its environment variable, else the context of spool's
// config file, else nothing.

// Environment variables of authentication and contexts.
const (
	envToken     = "SPOOL_TOKEN"      // a bearer token (--token)
	envTokenFile = "SPOOL_TOKEN_FILE" // a file holding one (--token-file)
	envConfig    = "SPOOL_CONFIG"     // spool's config file (default ~/.config/spool/config.yaml)
	envContext   = "SPOOL_CONTEXT"    // the context to use (--context)
)

// Bounds of what spool reads from files it is pointed at.
const (
	maxConfigBytes    = 1 << 20
	maxTokenFileBytes = 8 << 10
)

// authFlags are the global flags of authentication.
type authFlags struct {
	context   string
	token     string
	tokenFile string
	caFile    string
	certFile  string
	keyFile   string
	tls       bool
}

func (a *app) bindAuthFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.StringVar(&a.auth.context, "context", "", "the context of spool's config file to use ("+envContext+"; default its current-context)")
	pf.StringVar(&a.auth.token, "token", "", "bearer token for spoold's admin listener ("+envToken+"; prefer --token-file: a command line is visible to other users)")
	pf.StringVar(&a.auth.tokenFile, "token-file", "", "file holding the bearer token ("+envTokenFile+")")
	pf.StringVar(&a.auth.caFile, "cacert", "", "PEM file of the CA that signs spoold's admin certificate (turns TLS on)")
	pf.StringVar(&a.auth.certFile, "cert", "", "PEM client certificate for mTLS (turns TLS on; with --key)")
	pf.StringVar(&a.auth.keyFile, "key", "", "PEM private key of --cert")
	pf.BoolVar(&a.auth.tls, "tls", false, "connect to the admin listener with TLS, trusting the system's CAs unless --cacert")
}

// cliConfig is spool's config file, shaped like a kubeconfig: named
// contexts, one of them current.
type cliConfig struct {
	CurrentContext string       `yaml:"current-context"`
	Contexts       []cliContext `yaml:"contexts"`
}

// cliContext is one sidecar and how to authenticate to it. Paths may be
// relative to the config file's directory or start with ~/. Tokens are
// never in the file itself, only the files that hold them.
type cliContext struct {
	Name      string `yaml:"name"`
	Admin     string `yaml:"admin"`
	TokenFile string `yaml:"token-file"`
	CAFile    string `yaml:"ca-file"`
	CertFile  string `yaml:"cert-file"`
	KeyFile   string `yaml:"key-file"`
	TLS       bool   `yaml:"tls"`
}

// configPath is where spool's config file is: $SPOOL_CONFIG, else
// $XDG_CONFIG_HOME/spool/config.yaml, else ~/.config/spool/config.yaml.
// explicit says it was named (then it must exist).
func (a *app) configPath() (path string, explicit bool) {
	if p, ok := a.getenv(envConfig); ok && p != "" {
		return p, true
	}
	if x, ok := a.getenv("XDG_CONFIG_HOME"); ok && x != "" {
		return filepath.Join(x, "spool", "config.yaml"), false
	}
	if h, ok := a.getenv("HOME"); ok && h != "" {
		return filepath.Join(h, ".config", "spool", "config.yaml"), false
	}
	return "", false
}

// currentContext returns the context to use, or nil when there is none
// (no config file and no --context).
func (a *app) currentContext() (*cliContext, error) {
	name := a.auth.context
	if name == "" {
		name, _ = a.getenv(envContext)
	}
	path, explicit := a.configPath()
	cfg, err := readCLIConfig(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit && name == "":
		return nil, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, usageErr("spool's config file %s does not exist (it holds the contexts; see docs/cli.md)", path)
	case err != nil:
		return nil, usageErr("spool's config file %s: %v", path, err)
	}
	if name == "" {
		name = cfg.CurrentContext
	}
	if name == "" {
		return nil, nil
	}
	var names []string
	for i := range cfg.Contexts {
		c := &cfg.Contexts[i]
		if c.Name == name {
			dir := filepath.Dir(path)
			for _, p := range []*string{&c.TokenFile, &c.CAFile, &c.CertFile, &c.KeyFile} {
				*p = a.expandPath(dir, *p)
			}
			return c, nil
		}
		names = append(names, c.Name)
	}
	return nil, usageErr("no context %q in %s: its contexts are %s", name, path, strings.Join(names, ", "))
}

func readCLIConfig(path string) (*cliConfig, error) {
	if path == "" {
		return nil, fs.ErrNotExist
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxConfigBytes)
	}
	var c cliConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return &c, nil
}

// expandPath makes a context's path absolute: ~/ is the home directory, a
// relative path is relative to the config file's directory.
func (a *app) expandPath(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if h, ok := a.getenv("HOME"); ok {
			return filepath.Join(h, rest)
		}
	}
	return filepath.Join(dir, p)
}

// adminTarget resolves the admin address and the dial options that
// authenticate to it.
func (a *app) adminTarget() (string, []grpc.DialOption, error) {
	ctxt, err := a.currentContext()
	if err != nil {
		return "", nil, err
	}
	if ctxt == nil {
		ctxt = &cliContext{}
	}
	addr := a.admin
	if a.root == nil || !a.root.PersistentFlags().Changed("admin") {
		if v, ok := a.getenv(envAdmin); ok && v != "" {
			addr = v
		} else if ctxt.Admin != "" {
			addr = ctxt.Admin
		}
	}
	a.admin = addr // for error messages
	token, err := a.resolveToken(ctxt)
	if err != nil {
		return "", nil, err
	}
	tc, err := a.tlsConfig(ctxt)
	if err != nil {
		return "", nil, err
	}
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: token}))
	}
	return addr, opts, nil
}

// resolveToken: --token, --token-file, SPOOL_TOKEN, SPOOL_TOKEN_FILE, the
// context's token-file; "" for none.
func (a *app) resolveToken(ctxt *cliContext) (string, error) {
	if a.auth.token != "" {
		return a.auth.token, nil
	}
	if a.auth.tokenFile != "" {
		return readTokenFile(a.auth.tokenFile, "--token-file")
	}
	if v, ok := a.getenv(envToken); ok && v != "" {
		return strings.TrimSpace(v), nil
	}
	if v, ok := a.getenv(envTokenFile); ok && v != "" {
		return readTokenFile(v, envTokenFile)
	}
	if ctxt.TokenFile != "" {
		return readTokenFile(ctxt.TokenFile, "the context's token-file")
	}
	return "", nil
}

// readTokenFile reads a token: the file's content without surrounding
// white space. Errors never show the content.
func readTokenFile(path, from string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", usageErr("%s: %v", from, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return "", usageErr("%s: %v", from, err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxTokenFileBytes:
		return "", usageErr("%s %s: larger than %d bytes: is it a token file?", from, path, maxTokenFileBytes)
	case tok == "" || strings.ContainsAny(tok, " \t\r\n"):
		return "", usageErr("%s %s: want one token and nothing else", from, path)
	}
	return tok, nil
}

// tlsConfig is the client TLS of the flags, else the context's; nil for
// plaintext.
func (a *app) tlsConfig(ctxt *cliContext) (*tls.Config, error) {
	ca, cert, key, on := a.auth.caFile, a.auth.certFile, a.auth.keyFile, a.auth.tls
	if ca == "" && cert == "" && key == "" && !on {
		ca, cert, key, on = ctxt.CAFile, ctxt.CertFile, ctxt.KeyFile, ctxt.TLS
	}
	if ca == "" && cert == "" && key == "" && !on {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, usageErr("--cacert: %v", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usageErr("--cacert %s: no PEM certificate in it", ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, usageErr("--cert and --key go together (a client certificate and its key)")
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, usageErr("--cert/--key: %v", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// bearer sends the token with every call. Over plaintext too: the admin
// listener inside the pod (loopback, kubectl port-forward) has no TLS.
type bearer struct{ token string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return false }

// defaultAdmin is --admin's default: $SPOOL_ADMIN, else spoold's.
func (a *app) defaultAdmin() string {
	if v, ok := a.getenv(envAdmin); ok && v != "" {
		return v
	}
	return config.DefaultAdminListen
}
