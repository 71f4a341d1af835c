package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	spool "github.com/spoolmq/spool/sdk/go"
)

// probe fetches one of the admin port's probes: its status and body.
func probe(t *testing.T, n *node, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.admin + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With node.ready_requires_app, /readyz waits for the app: it answers 503
// naming the group no app consumes yet, while /startupz (the node is up:
// start the app) and /healthz answer 200; once an app stream is open it is
// ready, and it stays ready when the app goes away (readiness gates start-up,
// not every hiccup of the app).
func TestReadyRequiresApp(t *testing.T) {
	n := startNodeWith(t, "  ready_requires_app: true\n", `
topics:
  - name: orders
subscriptions:
  - topic: orders
    group: workers
`)
	if code, body := probe(t, n, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `group workers: no app stream connected`) {
		t.Fatalf("/readyz before the app: %d %q; want 503 naming group workers", code, body)
	}
	for _, path := range []string{"/startupz", "/healthz"} {
		if code, body := probe(t, n, path); code != http.StatusOK {
			t.Fatalf("%s before the app: %d %q; want 200", path, code, body)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- n.client(ctx).Subscribe(ctx, "workers", []string{"orders"}, func(context.Context, *spool.Message) error { return nil })
	}()
	eventually(t, 10*time.Second, "/readyz ready once the app consumes", func() bool {
		code, _ := probe(t, n, "/readyz")
		return code == http.StatusOK
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if code, body := probe(t, n, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after the app went away: %d %q; want it still ready", code, body)
	}
}
