package sidecar

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/config"
)

// tokenApp is an app's HandlerService that records the authorization
// metadata of every Handle call.
type tokenApp struct {
	spoolv1.UnimplementedHandlerServiceServer
	mu   sync.Mutex
	seen []string
}

func (a *tokenApp) Handle(ctx context.Context, _ *spoolv1.HandleRequest) (*spoolv1.HandleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	a.mu.Lock()
	a.seen = append(a.seen, strings.Join(md.Get("authorization"), "|"))
	a.mu.Unlock()
	return &spoolv1.HandleResponse{Outcome: spoolv1.Outcome_OUTCOME_ACK}, nil
}

func (a *tokenApp) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

func serveTokenApp(t *testing.T) (*tokenApp, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	app := &tokenApp{}
	spoolv1.RegisterHandlerServiceServer(srv, app)
	go func() { _ = srv.Serve(l) }() // owned: ends at Stop in Cleanup
	t.Cleanup(srv.Stop)
	return app, l.Addr().String()
}

// With app_token_file, spoold calls the app's Handle with
// "authorization: Bearer <token>" (the file's first line); without it, with
// no authorization at all.
func TestCallbackSendsAppToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef-callback"
	for _, withToken := range []bool{true, false} {
		app, addr := serveTokenApp(t)
		cfg := appsConfig(t)
		sub := &cfg.Subscriptions[0]
		sub.Delivery, sub.AppAddress = config.DeliveryCallback, addr
		want := ""
		if withToken {
			f := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			sub.AppTokenFile, want = f, "Bearer "+token
		}
		addrs, err := runSidecar(t, cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := publishOne(ctx, dialApp(t, addrs.App[0]), "orders"); err != nil {
			t.Fatal(err)
		}
		for len(app.calls()) == 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond) // sleep-ok: polling a condition
		}
		cancel()
		if got := app.calls(); len(got) == 0 || got[0] != want {
			t.Errorf("token file %v: Handle called with authorization %q, want %q", withToken, got, want)
		}
	}
}

// A token file that cannot be a token stops spoold at start, naming the
// file but never quoting what is in it.
func TestCallbackAppTokenFileRefused(t *testing.T) {
	_, addr := serveTokenApp(t)
	for _, c := range []struct{ name, content string }{{"short", "short-secret\n"}, {"two lines", strings.Repeat("a", 40) + "\n" + strings.Repeat("b", 40) + "\n"}} {
		cfg := appsConfig(t)
		sub := &cfg.Subscriptions[0]
		sub.Delivery, sub.AppAddress = config.DeliveryCallback, addr
		sub.AppTokenFile = filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(sub.AppTokenFile, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := runSidecar(t, cfg, Options{})
		if err == nil || !strings.Contains(err.Error(), "app_token_file") || strings.Contains(err.Error(), "short-secret") || strings.Contains(err.Error(), "aaaa") {
			t.Errorf("%s: %v; want a refusal naming app_token_file without its content", c.name, err)
		}
	}
}
