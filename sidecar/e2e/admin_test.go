package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// spoold, as a process, refuses to start with AdminService on the pod
// network and no admin authentication: the configuration every manifest
// had before the probe listener existed (docs/security.md, "Admin").
func TestSpooldRefusesUnauthenticatedAdminOnTheNetwork(t *testing.T) {
	addrs := freeAddrs(t, 2)
	_, port, _ := strings.Cut(addrs[1], ":")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.spoold, "--dev", "--app-listen", addrs[0], "--admin-listen", "0.0.0.0:"+port)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("spoold still running after 30s: it started with AdminService on 0.0.0.0 and no authentication\n%s", out.String())
	}
	if err == nil || !strings.Contains(out.String(), "node.admin_listen") || !strings.Contains(out.String(), "node.probe_listen") {
		t.Fatalf("spoold: %v, want a refusal naming node.admin_listen and node.probe_listen:\n%s", err, out.String())
	}
}

// A spoold process as the manifests run it: kubelet's probes and
// Prometheus on the probe listener, which answers nothing else; AdminService
// on loopback, here with a tokens file, so a call needs a token.
func TestSpooldProbeListenerAndAdminToken(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("e2e-operate-token-0123456789 oncall operate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	probe := freeAddrs(t, 1)[0]
	n := startNodeWith(t, "  probe_listen: "+probe+"\n", "admin:\n  tokens_file: "+tokens+"\n")
	for path, want := range map[string]int{"/startupz": 200, "/readyz": 200, "/healthz": 200, "/metrics": 200, "/debug/pprof/": 404} {
		resp, err := http.Get("http://" + probe + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on the probe listener: %d, want %d", path, resp.StatusCode, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := n.adminClient()
	_, err := c.CreateTopic(ctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 1})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("CreateTopic without a token: %v, want Unauthenticated", err)
	}
	tctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer e2e-operate-token-0123456789")
	if _, err := c.CreateTopic(tctx, &spoolv1.CreateTopicRequest{Name: "audit", Partitions: 1}); err != nil {
		t.Fatalf("CreateTopic with the operate token: %v", err)
	}
	n.stop()
	log, _ := os.ReadFile(n.logPath)
	if !strings.Contains(string(log), `"audit":true`) && !strings.Contains(string(log), "audit=true") {
		t.Errorf("no audit line in spoold's log:\n%s", tail(string(log), 20))
	}
	if strings.Contains(string(log), "e2e-operate-token") {
		t.Error("the token is in spoold's log")
	}
}
