package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spoolmq/spool/internal/testredis"
)

// redis.tls with a CA file and a client certificate, against a real
// redis-server that requires client certificates (--tls-auth-clients
// yes): the ledger works; without the certificate, or with a server name
// the server's certificate does not hold, it is refused.
func TestTLSFilesClientCertificate(t *testing.T) {
	srv := testredis.StartWith(t, testredis.Options{TLS: true, TLSClientAuth: true})
	ca, cert, key := srv.TLSFiles()
	open := func(f TLSFiles) (*Redis, error) {
		cfg, err := f.Config()
		if err != nil {
			return nil, err
		}
		r, err := NewRedis(RedisOptions{Addrs: []string{srv.Addr()}, TLS: cfg})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = r.Close() })
		return r, nil
	}
	r, err := open(TLSFiles{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "localhost"})
	must(t, err)
	x := h{t, subject{l: r, group: "tls"}}
	want(t, x.one(ownerA, t0, "m"), ClaimResult{Status: Granted, Token: 1, Attempts: 1})
	x.complete("m", 1)
	want(t, x.one(ownerB, t0, "m"), ClaimResult{Status: Done, Token: 1, Attempts: 1})

	for name, f := range map[string]TLSFiles{
		"no client certificate": {CAFile: ca},
		"wrong server name":     {CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "redis.other.example"},
		"system CAs only":       {CertFile: cert, KeyFile: key},
	} {
		c, err := open(f)
		must(t, err)
		start := time.Now()
		if _, err := c.Claim(ctxT(t), "tls", ownerA, t0, dayTTL, []Claim{{ID: "p", Lease: t0.Add(time.Minute)}}); err == nil {
			t.Fatalf("%s: claim succeeded", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s took %v to fail", name, d)
		}
	}
	if got := x.reset("p"); got[0] != Absent {
		t.Fatalf("a refused client wrote: reset = %v", got)
	}
}

// The files are checked when the config is built, with what to fix.
func TestTLSFilesRefused(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	must(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	for name, f := range map[string]TLSFiles{
		"cert without key": {CertFile: notPEM},
		"key without cert": {KeyFile: notPEM},
		"missing CA":       {CAFile: filepath.Join(dir, "nope.pem")},
		"CA not PEM":       {CAFile: notPEM},
		"pair not PEM":     {CertFile: notPEM, KeyFile: notPEM},
	} {
		if _, err := f.Config(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	cfg, err := TLSFiles{}.Config()
	must(t, err)
	if cfg.RootCAs != nil || len(cfg.Certificates) != 0 || cfg.MinVersion == 0 {
		t.Fatalf("empty TLSFiles: %+v, want the system CAs, no certificate, a minimum version", cfg)
	}
}
