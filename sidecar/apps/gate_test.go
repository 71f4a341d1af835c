package apps

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/authn"
	"github.com/spoolmq/spool/sidecar/config"
)

func TestAuthenticate(t *testing.T) {
	tk := tokensFile(t, tokA+" shop\n")
	unix := &net.UnixAddr{Name: "@", Net: "unix"}
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}
	loop6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 5000}
	remote := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5000}
	for _, c := range []struct {
		name     string
		tokens   *authn.File
		insecure bool
		from     net.Addr
		auth     []string
		want     string // identity, or the error's text
	}{
		{"unix without token", tk, false, unix, nil, "local"},
		{"loopback without token", tk, false, loop, nil, "local"},
		{"ipv6 loopback without token", tk, false, loop6, nil, "local"},
		{"remote without token", tk, false, remote, nil, "error: beyond loopback, needs a token"},
		{"remote with token", tk, false, remote, []string{"Bearer " + tokA}, "shop"},
		{"scheme in any case", tk, false, remote, []string{"bearer " + tokA}, "shop"},
		{"unix with token", tk, false, unix, []string{"Bearer " + tokA}, "shop"},
		{"wrong token", tk, false, remote, []string{"Bearer " + tokB}, "error: not one of spoold's apps.tokens_file"},
		{"wrong token on unix", tk, false, unix, []string{"Bearer " + tokB}, "error: not one of"},
		{"not bearer", tk, false, remote, []string{"Basic " + tokA}, "error: not \"Bearer <token>\""},
		{"empty bearer", tk, false, remote, []string{"Bearer "}, "error: not \"Bearer <token>\""},
		{"two values", tk, false, remote, []string{"Bearer " + tokA, "Bearer " + tokA}, "error: 2 authorization values"},
		{"token without a tokens file", nil, false, unix, []string{"Bearer " + tokA}, "error: no apps.tokens_file"},
		{"remote, insecure opt-out", nil, true, remote, nil, "local"},
		{"remote, insecure opt-out beside tokens", tk, true, remote, nil, "error: needs a token"},
		{"no peer", tk, false, nil, nil, "error: an unknown address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &config.AppsConfig{DefaultIdentity: "local", AllowInsecureTCP: c.insecure}
			g := NewGate(Config{Apps: a, Tokens: c.tokens})
			ctx := context.Background()
			if c.from != nil {
				ctx = peer.NewContext(ctx, &peer.Peer{Addr: c.from})
			}
			if c.auth != nil {
				md := metadata.MD{}
				for _, v := range c.auth {
					md.Append("authorization", v)
				}
				ctx = metadata.NewIncomingContext(ctx, md)
			}
			id, err := g.Authenticate(ctx)
			got := id
			if err != nil {
				var ae *apierr.Error
				if !errors.As(err, &ae) || ae.Reason != apierr.Unauthenticated {
					t.Fatalf("error %v is not UNAUTHENTICATED", err)
				}
				if strings.Contains(err.Error(), tokA) || strings.Contains(err.Error(), tokB) {
					t.Fatalf("the error quotes the token: %v", err)
				}
				got = "error: " + err.Error()
			}
			if want, ok := strings.CutPrefix(c.want, "error: "); ok {
				if err == nil || !strings.Contains(got, want) {
					t.Fatalf("Authenticate = %q, want an error containing %q", got, want)
				}
			} else if got != c.want {
				t.Fatalf("Authenticate = %q, want %q", got, c.want)
			}
		})
	}
}

func TestCertIdentity(t *testing.T) {
	spiffe, _ := url.Parse("spiffe://cluster.local/ns/shop/sa/orders")
	for _, c := range []struct {
		name string
		cert *x509.Certificate
		want string
		ok   bool
	}{
		{"URI SAN first", &x509.Certificate{URIs: []*url.URL{spiffe}, DNSNames: []string{"orders.shop"}, Subject: pkix.Name{CommonName: "cn"}}, "spiffe://cluster.local/ns/shop/sa/orders", true},
		{"then DNS SAN", &x509.Certificate{DNSNames: []string{"orders.shop"}, Subject: pkix.Name{CommonName: "cn"}}, "orders.shop", true},
		{"then CN", &x509.Certificate{Subject: pkix.Name{CommonName: "orders"}}, "orders", true},
		{"nothing", &x509.Certificate{}, "", false},
		{"a name with a space", &x509.Certificate{Subject: pkix.Name{CommonName: "orders app"}}, "orders app", false},
		{"a name with a control byte", &x509.Certificate{Subject: pkix.Name{CommonName: "orders\n"}}, "orders\n", false},
	} {
		id, ok := CertIdentity(c.cert)
		if id != c.want || ok != c.ok {
			t.Errorf("%s: CertIdentity = %q, %v; want %q, %v", c.name, id, ok, c.want, c.ok)
		}
	}
}

// tokensFile is an apps.tokens_file holding content.
func tokensFile(t *testing.T, content string) *authn.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenTokens(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return f
}
