package jetstream

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/internal/testnats"
)

// hostileProxy stands between spoold and a real nats-server and, while
// armed, puts one line of its own between two of the server's frames:
// what an intercepting or compromised server can send.
type hostileProxy struct {
	ln     net.Listener
	target string
	inject atomic.Value // string; "" = none
	after  atomic.Int64 // frames of a connection to pass before injecting
	wg     sync.WaitGroup
}

func startHostileProxy(t *testing.T, target string) *hostileProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hostileProxy{ln: ln, target: strings.TrimPrefix(target, "nats://")}
	p.inject.Store("")
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *hostileProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *hostileProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	r := bufio.NewReader(s)
	for frame := int64(0); ; frame++ {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		out := line
		f := strings.Fields(string(line))
		if len(f) >= 4 && (f[0] == "MSG" || f[0] == "HMSG") {
			n, _ := strconv.Atoi(f[len(f)-1])
			payload := make([]byte, n+2)
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
			out = append(bytes.Clone(line), payload...)
		}
		if _, err := c.Write(out); err != nil {
			return
		}
		if inj := p.inject.Load().(string); inj != "" && frame >= p.after.Load() {
			p.inject.Store("")
			if _, err := io.WriteString(c, inj); err != nil {
				return
			}
		}
	}
}

// TestNATSHugeFrameDeclaredIsRefused: a MSG or HMSG line that declares a
// huge payload, at start (right after the server's PONG) or once running
// (during a publish), closes that connection and nothing else: the
// backend reconnects and serves. Before the dialer capped frames, nats.go
// allocated the declared size and the process died ("fatal error:
// runtime: out of memory").
func TestNATSHugeFrameDeclaredIsRefused(t *testing.T) {
	srv := testnats.Start(t)
	for name, line := range map[string]string{
		"msg":          "MSG _INBOX.x 1 1000000000000\r\n",
		"hmsg":         "HMSG _INBOX.x 1 10 1000000000000\r\n",
		"endless line": "INFO " + strings.Repeat("x", 3<<20),
	} {
		t.Run(name, func(t *testing.T) {
			var refused atomic.Int64
			cfg := Config{Prefix: "h", PublishTimeout: 2 * time.Second, MaxFrameBytes: 2 << 20, OnFrameRefused: func() { refused.Add(1) }}
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			if !strings.HasPrefix(line, "INFO") {
				// At start: the connection is refused, Open says why.
				p := startHostileProxy(t, srv.URL())
				p.after.Store(1) // INFO, then PONG
				p.inject.Store(line)
				cfg.URLs = []string{p.url()}
				if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), ErrFrameTooLarge.Error()) {
					t.Fatalf("Open = %v, want %v", err, ErrFrameTooLarge)
				}
				if refused.Swap(0) != 1 {
					t.Fatalf("refused at start, want 1")
				}
			}
			p := startHostileProxy(t, srv.URL())
			cfg.URLs = []string{p.url()}
			b, err := Open(cfg)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer b.Close()
			if err := b.EnsureTopic(engine.TopicSpec{Name: "orders", Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			p.after.Store(0)
			p.inject.Store(line)
			// The publish that meets the frame may fail (its connection
			// closed) or succeed after the reconnect; the next one succeeds.
			_, _ = produce(t, b, "orders", 0, []engine.Record{rec("a", "k", "v")})
			deadline := time.Now().Add(20 * time.Second)
			for {
				_, err := produce(t, b, "orders", 0, []engine.Record{rec("b", "k", "v")})
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("publish after the refused frame: %v", err)
				}
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 256<<20 {
				t.Errorf("allocated %d bytes", got)
			}
			if refused.Load() != 1 {
				t.Errorf("refused = %d, want 1", refused.Load())
			}
		})
	}
}

// TestNATSFramesHonest: what a server sends passes, split anywhere.
func TestNATSFramesHonest(t *testing.T) {
	in := "INFO {\"a\":1}\r\nPING\r\n+OK\r\nMSG a.b 1 5\r\nhello\r\nHMSG a 2 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n-ERR 'x'\r\nMSG a 1 0\r\n\r\n"
	for split := 1; split < len(in); split++ {
		f := natsFrames{max: 64}
		if err := f.Feed([]byte(in[:split])); err != nil {
			t.Fatal(split, err)
		}
		if err := f.Feed([]byte(in[split:])); err != nil {
			t.Fatal(split, err)
		}
		if f.payload != 0 || len(f.line) != 0 {
			t.Fatalf("split %d: left %d %q", split, f.payload, f.line)
		}
	}
	f := natsFrames{max: 64}
	if err := f.Feed([]byte("MSG a 1 65\r\n")); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatal(err)
	}
}

// TestNATSCredentialsRedacted: user:password@ and token@ URLs never reach
// a log line or an error.
func TestNATSCredentialsRedacted(t *testing.T) {
	urls := []string{"nats://alice:s3cr3t-pw@127.0.0.1:1", "tok3n-secret@127.0.0.1:2", "tls://bob:pw2-secret@127.0.0.1:3"}
	var logs bytes.Buffer
	_, err := Open(Config{URLs: urls, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		t.Fatal("Open with no server succeeded")
	}
	all := logs.String() + err.Error() + strings.Join(RedactURLs(urls), " ")
	for _, secret := range []string{"s3cr3t-pw", "tok3n-secret", "pw2-secret"} {
		if strings.Contains(all, secret) {
			t.Errorf("%q appears: %s", secret, all)
		}
	}
	if !strings.Contains(all, "alice:xxxxx@127.0.0.1:1") {
		t.Errorf("redacted form missing: %s", all)
	}
}

// TestNATSTLSIsVerified: a server whose INFO asks for TLS gets a TLS
// handshake from spoold's dialer (above which the frame cap sits), and a
// certificate no trusted CA signed is refused: the dialer never skips
// verification.
func TestNATSTLSIsVerified(t *testing.T) {
	cert, err := tls.X509KeyPair(selfSignedPEM(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		required bool
		tlsHosts map[string]bool
	}{
		"the server requires it":           {required: true},
		"another configured URL is tls://": {tlsHosts: map[string]bool{"nats-1:4222": true}},
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			handshake := make(chan error, 1)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := ln.Accept()
				if err != nil {
					handshake <- err
					return
				}
				defer c.Close()
				_, _ = io.WriteString(c, `INFO {"server_id":"x","version":"2.10.0","proto":1,"tls_required":`+strconv.FormatBool(tc.required)+`,"max_payload":1048576}`+"\r\n")
				srv := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
				_ = srv.SetDeadline(time.Now().Add(5 * time.Second))
				handshake <- srv.Handshake()
			}()
			defer func() { _ = ln.Close(); wg.Wait() }()
			d := &cappedDialer{timeout: 5 * time.Second, maxFrame: 1 << 20, tlsHosts: tc.tlsHosts}
			_, err = d.Dial("tcp", ln.Addr().String())
			var unknown x509.UnknownAuthorityError
			if !errors.As(err, &unknown) {
				t.Fatalf("Dial = %v, want the certificate refused (unknown authority)", err)
			}
			if herr := <-handshake; herr == nil {
				t.Fatal("the server saw a completed handshake")
			}
		})
	}
}

// selfSignedPEM is a certificate for 127.0.0.1 that no CA signed.
func selfSignedPEM(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nats"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
