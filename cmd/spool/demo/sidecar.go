package demo

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar"
	"github.com/spoolmq/spool/sidecar/config"
)

// maxAttempts is the subscription's max_attempts.
const maxAttempts = 5

// runningSidecar is the in-process sidecar and an admin client to it.
type runningSidecar struct {
	app, adminAddr string
	admin          spoolv1.AdminServiceClient
	adminConn      *grpc.ClientConn
	socketDir      string
	cancel         context.CancelFunc
	done           chan error
}

// demoConfig is the dev configuration with the demo's topic and subscription:
// quick retries so the outage plays out in seconds, a visibility timeout well
// above the provider's latency, and room for many orders in flight.
func demoConfig(socket, adminListen string) *config.Config {
	cfg := config.DevConfig()
	cfg.Node.AppListen = []string{"unix://" + socket}
	cfg.Node.AdminListen = adminListen
	cfg.Node.DrainTimeout = 5 * time.Second
	cfg.Topics = []config.TopicConfig{config.NewTopic(Topic, 4)}
	sub := config.NewSubscription(Topic, Group)
	sub.MaxAttempts = maxAttempts
	sub.Backoff = config.BackoffConfig{Base: 200 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}
	sub.VisibilityTimeout = 5 * time.Second
	sub.MaxInFlight = 512
	// The outage lasts seconds, not minutes: probe the provider every second
	// (doubling up to 4 s while it stays down) instead of every 5 s.
	sub.Breaker.OpenTimeout = time.Second
	sub.Breaker.MaxOpenTimeout = 4 * time.Second
	cfg.Subscriptions = []config.SubscriptionConfig{sub}
	return &cfg
}

// startSidecar runs sidecar.Run in a goroutine (owned: stop ends and awaits
// it) and returns once it listens. The app listens on a unix socket in a
// temporary directory, the admin port on adminListen.
func startSidecar(logger *slog.Logger, adminListen string, tp trace.TracerProvider) (*runningSidecar, error) {
	dir, err := os.MkdirTemp("", "spool-demo-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory for the sidecar's socket: %w", err)
	}
	cfg := demoConfig(filepath.Join(dir, "app.sock"), adminListen)
	if err := cfg.Validate(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("the demo's sidecar configuration is invalid: %w", err)
	}
	ready := make(chan sidecar.Addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	sc := &runningSidecar{socketDir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() { // owned: stop cancels and awaits it
		sc.done <- sidecar.Run(ctx, cfg, sidecar.Options{Logger: logger, Ready: func(a sidecar.Addrs) { ready <- a }, TracerProvider: tp})
	}()
	select {
	case a := <-ready:
		sc.app, sc.adminAddr = a.App[0], a.Admin
	case err := <-sc.done:
		cancel()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("the sidecar did not start: %w", err)
	}
	conn, err := grpc.NewClient("passthrough:///"+sc.adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		sc.stop()
		return nil, fmt.Errorf("admin client: %w", err)
	}
	sc.adminConn, sc.admin = conn, spoolv1.NewAdminServiceClient(conn)
	return sc, nil
}

// stop shuts the sidecar down gracefully and removes its socket directory
// (sidecar.Run removes its temporary data directory itself).
func (sc *runningSidecar) stop() {
	if sc.adminConn != nil {
		_ = sc.adminConn.Close()
	}
	sc.cancel()
	<-sc.done
	_ = os.RemoveAll(sc.socketDir)
}

// queueState is what the admin API says about the group and its DLQ.
type queueState struct {
	ok          bool // the admin calls answered
	lagMessages int64
	lagSeconds  float64 // age of the oldest unfinished message
	inFlight    int64
	dlq         int64 // entries in the dead-letter topic
}

func (sc *runningSidecar) queueState() queueState {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var q queueState
	groups, err := sc.admin.ListGroups(ctx, &spoolv1.ListGroupsRequest{Group: Group})
	if err != nil {
		return q
	}
	for _, g := range groups.GetGroups() {
		for _, p := range g.GetPartitions() {
			q.lagMessages += p.GetLagMessages()
			q.inFlight += int64(p.GetInFlight())
			q.lagSeconds = max(q.lagSeconds, float64(p.GetLagMs())/1000)
		}
	}
	topics, err := sc.admin.ListTopics(ctx, &spoolv1.ListTopicsRequest{})
	if err != nil {
		return q
	}
	for _, t := range topics.GetTopics() {
		if t.GetName() == DLQTopic {
			for _, p := range t.GetPartitions() {
				q.dlq += p.GetEndOffset() - p.GetStartOffset()
			}
		}
	}
	q.ok = true
	return q
}

// readDeadLetters reads every entry of the DLQ through AdminService, keyed by
// order id (the message key), a page of at most 1,000 entries at a time,
// going on with each page's cursor.
func readDeadLetters(sc *runningSidecar) (map[string]*spoolv1.DeadLetter, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]*spoolv1.DeadLetter{}
	var cursor string
	for {
		resp, err := sc.admin.PeekDeadLetters(ctx, &spoolv1.PeekDeadLettersRequest{Topic: Topic, Group: Group, Limit: 1000, Cursor: cursor})
		if err != nil {
			return out, fmt.Errorf("reading the dead-letter queue %s: %w", DLQTopic, err)
		}
		for _, e := range resp.GetEntries() {
			out[string(e.GetMessage().GetKey())] = e
		}
		if cursor = resp.GetNextCursor(); cursor == "" {
			return out, nil
		}
	}
}
