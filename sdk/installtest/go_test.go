package installtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The modules an app built on the Go SDK may compile: the SDK, the
// generated API, gRPC and protobuf (and what they import), the
// OpenTelemetry API (and what it imports).
var goClientModules = []string{
	"github.com/spoolmq/spool/sdk/go",
	"github.com/spoolmq/spool/proto",
	"github.com/planetscale/vtprotobuf", // the generated marshal code's helpers
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	"google.golang.org/genproto/googleapis/rpc",
	"github.com/cespare/xxhash/v2", // imported by gRPC
	"golang.org/x/net",
	"golang.org/x/sys",
	"golang.org/x/text",
	"go.opentelemetry.io/otel",
	"go.opentelemetry.io/otel/trace",
	"go.opentelemetry.io/otel/metric",
	"go.opentelemetry.io/auto/sdk",
	"github.com/go-logr/logr",
	"github.com/go-logr/stdr",
}

// Libraries of the server that must not even be in an app's module graph
// (nor their submodules), and the server's own module.
var serverModules = []string{
	"go.etcd.io/raft/v3",
	"github.com/twmb/franz-go",
	"github.com/nats-io/nats.go",
	"github.com/redis/go-redis/v9",
	"github.com/prometheus/client_golang",
}

// TestGoInstall: a new module outside the repository requires the SDK as
// docs/sdk-go.md says, builds a producer and a worker, and they move ten
// messages through a real spoold; the app's module graph holds none of the
// server's libraries and its binaries compile only the client's modules.
func TestGoInstall(t *testing.T) {
	selected(t, "go")
	sd := startSpoold(t)
	app := scratchDir(t)
	for _, f := range []string{"producer/main.go", "worker/main.go"} {
		b, err := os.ReadFile(filepath.Join("testdata", "go", f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(app, f), string(b))
	}
	goEnv := []string{"GOWORK=off"} // the app's own module, not a workspace around it
	// docs/sdk-go.md, "Install", from a checkout.
	run(t, time.Minute, app, goEnv, "go", "mod", "init", "example.com/shop")
	run(t, time.Minute, app, goEnv, "go", "mod", "edit",
		"-require=github.com/spoolmq/spool/sdk/go@v"+version(t),
		"-replace=github.com/spoolmq/spool/sdk/go="+filepath.Join(repo, "sdk", "go"),
		"-replace=github.com/spoolmq/spool/proto="+filepath.Join(repo, "proto"))
	run(t, 3*time.Minute, app, goEnv, "go", "mod", "tidy")
	run(t, 3*time.Minute, app, goEnv, "go", "build", "-o", "bin/", "./...")

	graph := run(t, time.Minute, app, goEnv, "go", "list", "-m", "all")
	for _, line := range strings.Split(graph, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "github.com/spoolmq/spool" || slices.ContainsFunc(serverModules, func(m string) bool {
			return f[0] == m || strings.HasPrefix(f[0], m+"/")
		}) {
			t.Errorf("the app's module graph holds the server's %s", line)
		}
	}
	compiled := run(t, time.Minute, app, goEnv, "go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...")
	for _, m := range strings.Fields(compiled) {
		if m != "example.com/shop" && !slices.Contains(goClientModules, m) {
			t.Errorf("the app compiles module %s, which is not one a client needs (gRPC, protobuf, the OpenTelemetry API)", m)
		}
	}
	if t.Failed() {
		t.Fatalf("go list -m all:\n%s", graph)
	}

	ids := orderIDs(10)
	env := []string{"SPOOL_ADDR=" + sd.app}
	worker := start(t, app, env, filepath.Join(app, "bin", "worker"), "10")
	run(t, 30*time.Second, app, env, filepath.Join(app, "bin", "producer"), "10")
	checkHandled(t, worker.wait(t, 30*time.Second), ids)
}
