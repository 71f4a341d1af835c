// Command spool-injector is a Kubernetes mutating admission webhook that
// adds spoold as a native sidecar to pods annotated spool.dev/inject: "true"
// (docs/kubernetes.md, "The injector"; the logic is internal/injector).
//
//	spool-injector --tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key --defaults /etc/spool-injector/defaults.yaml
//
// It serves HTTPS: POST /mutate (AdmissionReview), GET /healthz and GET
// /metrics. With --client-ca-file, /mutate answers only the API server's
// client certificate (docs/kubernetes.md, "Authenticating the API server").
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spoolmq/spool/internal/injector"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "spool-injector:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("spool-injector", flag.ContinueOnError)
	listen := fs.String("listen", ":8443", "host:port of the HTTPS server")
	certFile := fs.String("tls-cert-file", "", "PEM certificate the API server checks against the webhook's caBundle (required)")
	keyFile := fs.String("tls-key-file", "", "PEM private key of the certificate (required)")
	defaultsFile := fs.String("defaults", "/etc/spool-injector/defaults.yaml", "YAML file of the sidecar's defaults (docs/kubernetes.md)")
	clientCAFile := fs.String("client-ca-file", "", "PEM CA bundle: /mutate then answers only callers presenting a certificate it signed (the API server's, from its admission control config); empty: any caller that reaches the port")
	clientNames := fs.String("client-names", "", "comma list of the identities allowed with --client-ca-file (a certificate's common name or DNS name; * for any certificate of the CA)")
	maxConcurrent := fs.Int("max-concurrent-reviews", injector.DefaultMaxConcurrentReviews, "AdmissionReviews read and decided at once; more are refused at once (503)")
	maxBytes := fs.Int64("max-review-bytes", injector.MaxReviewBytes, "largest AdmissionReview body accepted (413 above)")
	readTimeout := fs.Duration("read-timeout", injector.DefaultReadTimeout, "time to read a whole request, body included")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *certFile == "" || *keyFile == "" {
		return errors.New("--tls-cert-file and --tls-key-file are required: the API server calls webhooks over HTTPS only")
	}
	d, err := injector.LoadDefaults(*defaultsFile)
	if err != nil {
		return err
	}
	certs := &certLoader{certFile: *certFile, keyFile: *keyFile}
	if _, err := certs.get(nil); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg := injector.ServerConfig{Defaults: d, Logger: logger, GetCertificate: certs.get,
		MaxConcurrentReviews: *maxConcurrent, MaxReviewBytes: *maxBytes, ReadTimeout: *readTimeout}
	if *clientNames != "" && *clientCAFile == "" {
		return errors.New("--client-names needs --client-ca-file: the CA that signs the API server's client certificate")
	}
	if *clientCAFile != "" {
		pem, err := os.ReadFile(*clientCAFile)
		if err != nil {
			return fmt.Errorf("--client-ca-file: %w", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--client-ca-file %s: no PEM certificate in it", *clientCAFile)
		}
		for _, n := range strings.Split(*clientNames, ",") {
			if n = strings.TrimSpace(n); n != "" {
				cfg.ClientNames = append(cfg.ClientNames, n)
			}
		}
	} else {
		logger.Warn("no --client-ca-file: any caller that reaches the injector's port gets answers (and the patches show the sidecar's image, Redis addresses and Secret name); set it and the API server's admission control config (docs/kubernetes.md)")
	}
	srv, err := injector.NewServer(cfg)
	if err != nil {
		return err
	}
	srv.Addr = *listen
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS("", "") }() // owned: ends at Shutdown below
	logger.Info("spool-injector serving", "listen", *listen, "image", d.Image)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// certLoader reads the key pair again when either file changes (a
// cert-manager renewal rewrites the Secret's files in place), so a rotated
// certificate needs no restart. A pair that fails to load keeps the last
// good one.
type certLoader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	stamp             string
}

func (l *certLoader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	stamp := ""
	for _, f := range []string{l.certFile, l.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			stamp += fi.ModTime().String() + fmt.Sprint(fi.Size())
		}
	}
	if l.cert != nil && stamp == l.stamp {
		return l.cert, nil
	}
	c, err := tls.LoadX509KeyPair(l.certFile, l.keyFile)
	if err != nil {
		if l.cert != nil {
			return l.cert, nil
		}
		return nil, fmt.Errorf("load the TLS key pair (%s, %s): %w", l.certFile, l.keyFile, err)
	}
	l.cert, l.stamp = &c, stamp
	return l.cert, nil
}
