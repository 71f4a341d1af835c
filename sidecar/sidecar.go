package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/internal/buildinfo"
	"github.com/spoolmq/spool/internal/release"
	"github.com/spoolmq/spool/internal/wallclock"
	"github.com/spoolmq/spool/proto/grpcbuf"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/breaker"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/deliver"
	"github.com/spoolmq/spool/sidecar/ledger"
	"github.com/spoolmq/spool/sidecar/metrics"
	"github.com/spoolmq/spool/sidecar/publish"
	"github.com/spoolmq/spool/sidecar/scheduled"
	"github.com/spoolmq/spool/sidecar/tracing"
	"github.com/spoolmq/spool/sidecar/tracker"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// Version of spoold (internal/buildinfo: the repository's VERSION file),
// recorded in dead-letter entries, ClusterStatus and spans.
var Version = buildinfo.Version

// Options are the parts of a sidecar that are not configuration.
type Options struct {
	Logger *slog.Logger
	// Ready, if set, is called once every listener is open, with their
	// actual addresses (useful with port 0).
	Ready func(Addrs)
	// TracerProvider, if set, receives spoold's spans instead of the OTLP
	// exporter that tracing.otlp_endpoint configures (tests, and programs
	// that embed a sidecar, like `spool demo`). spoold never uses
	// OpenTelemetry's global provider.
	TracerProvider trace.TracerProvider
	// Clock, if set, is the clock of the apps' publish rate buckets
	// (apps.publish_rate) instead of time.Now: tests step it.
	Clock func() time.Time
}

// Addrs are the addresses a running sidecar listens on.
type Addrs struct {
	App   []string
	Admin string
	// Probe is node.probe_listen's address; "" when it is not set.
	Probe string
}

// Run runs a sidecar with cfg until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg *config.Config, opts Options) error {
	err := run(ctx, cfg, opts)
	if dir := cfg.Node.DataDir; errors.Is(err, engine.ErrRemoved) && cfg.Cluster.LeaveOnShutdown && dir != "" {
		// A node that leaves when it stops keeps nothing worth having once
		// it has left: restarted in the same pod (same emptyDir), it would
		// otherwise refuse to start for good.
		if werr := emptyDir(dir); werr != nil {
			return errors.Join(err, fmt.Errorf("cluster.leave_on_shutdown: emptying %s to join as a new node: %w", dir, werr))
		}
		return fmt.Errorf("%w; cluster.leave_on_shutdown: %s was emptied, so spoold joins as a new node when it starts again", err, dir)
	}
	return err
}

// emptyDir removes what dir holds (not dir itself: it may be a mount).
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// run builds spoold's components and runs them until ctx ends (SIGTERM)
// or one fails. They stop in one order, the reverse of the order they are
// added below (runner.go; docs/architecture.md, "Shutdown"):
//
//  1. readiness: health and /readyz say not serving;
//  2. delivery: every group stops fetching and drains — in-flight deliveries
//     finish within node.drain_timeout, acks still flowing over the open app
//     streams — commits and leaves its group;
//  3. the cluster, with cluster.leave_on_shutdown, when told to stop: this
//     node hands its leaderships and replicas over (the app server is still
//     up: the app's publishes go through this node to the new leaders);
//  4. the app gRPC server (2 s for unary calls, then streams are cut);
//  5. the probe server, then the admin gRPC (1 s) and HTTP (2 s) servers;
//  6. the clients of the apps' Handle callbacks;
//  7. the Redis ledger;
//  8. the engine, then the backend is closed (the log flushes);
//  9. tracing: spans of everything above are exported (at most 5 s);
//  10. the temporary data dir of --dev.
//
// The cluster metrics are no component: a scrape computes them
// (clusterMetrics).
func run(ctx context.Context, cfg *config.Config, opts Options) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := wallclock.Refuse(); err != nil {
		return err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("node", cfg.Node.ID)
	r := newRunner()
	ready := false
	defer func() {
		err = errors.Join(err, r.stop())
		if ready {
			logger.Info("spoold stopped")
		}
	}()
	dataDir := cfg.Node.DataDir
	if dataDir == "" && cfg.Node.Dev {
		if dataDir, err = devDataDir(r, logger); err != nil {
			return err
		}
	}
	tp, err := startTracing(cfg, opts, r, logger)
	if err != nil {
		return err
	}
	tracer := tracing.Tracer(tp)
	m := metrics.New()
	gate, err := newGate(cfg, opts, m, logger)
	if err != nil {
		return err
	}
	appTLSConfig, err := appTLS(&cfg.Apps)
	if err != nil {
		return err
	}
	eng, catalog, err := startEngine(r, cfg, dataDir, m, logger)
	if err != nil {
		return release.ExplainOpen(err, dataDir)
	}
	if err := stampDataDir(cfg, dataDir, logger); err != nil {
		return err
	}

	sched := newScheduled(cfg, eng)
	pub, err := publish.New(publish.Config{Engine: eng, Limits: limits(cfg), Metrics: m, Logger: logger, Tracer: tracer, MemoryBytes: cfg.Publish.MemoryBytes, Admit: gate.AdmitPublish, Retention: scheduleRetention(cfg, eng), Cancel: sched.cancel()})
	if err != nil {
		return err
	}
	led, err := newLedger(cfg, m, logger)
	if err != nil {
		return err
	}
	if led != nil {
		r.onStop("ledger", func() error { _ = led.Close(); return nil })
	}
	// The ledger owner is the node id: a restarted spoold (which holds the
	// data dir's lock, so its predecessor is gone) takes over its own
	// leases at once instead of waiting for them to expire.
	groups, closeClients, err := newGroups(cfg, eng, m, led, cfg.Node.ID, tracer, logger)
	if err != nil {
		return err
	}
	r.onStop("handler clients", func() error { closeClients(); return nil })

	auth, err := newAdminAuth(cfg, m, logger)
	if err != nil {
		return err
	}
	healthSrv, appSrv, adminGRPC := newGRPCServers(cfg, logger, m, gate, appTLSConfig, pub, groups, newAdmin(cfg, eng, groups, led, m).withScheduled(sched), catalog, auth)
	appLs, adminL, probeL, addrs, err := listenAll(cfg, appTLSConfig != nil)
	if err != nil {
		return err
	}
	rd := &readiness{eng: eng, groups: groups, requireApp: cfg.Node.ReadyRequiresApp}

	clusterMetrics(eng, m)
	startAdminServers(r, cfg, m, auth, healthSrv, adminGRPC, rd, readyDetail(eng), adminL, probeL)
	r.start("app server", appServer{srv: appSrv, ls: appLs, grace: 2 * time.Second, fail: r.fail})
	stopped := false // told to stop (SIGTERM), not failing
	if cl, ok := eng.(engine.ClusterAdmin); ok && cfg.Cluster.Enabled() && cfg.Cluster.LeaveOnShutdown {
		r.onStop("leave the cluster", func() error {
			if stopped {
				leaveCluster(cl, cfg.Cluster.LeaveTimeout, logger)
			}
			return nil
		})
	}
	r.start("delivery", delivery{groups: groups, log: logger})
	r.onStop("readiness", func() error {
		logger.Info("shutting down", "drain_timeout", cfg.Node.DrainTimeout)
		healthSrv.Shutdown()
		return nil
	})
	healthSrv.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	logger.Info("spoold ready", "app", addrs.App, "admin", addrs.Admin, "probe", addrs.Probe, "admin_auth", cfg.Admin.AuthConfigured(), "backend", cfg.Storage.Backend, "data_dir", dataDir, "topics", len(cfg.AllTopics()), "groups", len(groups), "version", Version)
	if opts.Ready != nil {
		opts.Ready(addrs)
	}
	ready = true
	stopped, err = r.wait(ctx)
	return err
}

// startEngine opens the storage backend, starts it (and the metrics of a
// single node's partition budget), makes the topics the config declares
// and opens those created through spool.
func startEngine(r *runner, cfg *config.Config, dataDir string, m *metrics.Metrics, logger *slog.Logger) (engine.Backend, *topicCatalog, error) {
	if lim := debug.SetMemoryLimit(-1); lim < math.MaxInt64 { // -1 reads it (set by cmd/spoold)
		m.MemoryLimit.Set(float64(lim))
	}
	warnPlaintextRemotes(cfg, m, logger)
	eng, err := openBackend(cfg, dataDir, m, logger)
	if err != nil {
		return nil, nil, err
	}
	if ss, ok := eng.(interface{ SyncStats() engine.SyncStats }); ok {
		m.LogSyncs.Read(func() metrics.LogSyncCounts {
			st := ss.SyncStats()
			return metrics.LogSyncCounts{Files: st.Files, FileSystem: st.FileSystem, Fallbacks: st.Fallbacks,
				Journal: st.Journal, JournalBytes: st.JournalBytes, Checkpoints: st.Checkpoints, JournalLag: st.JournalLag}
		})
	}
	r.start("engine", engineComponent{eng: eng, backend: cfg.Storage.Backend, log: logger})
	fileLimit := maxOpenFiles(cfg.Guards.MaxOpenFiles)
	r.start("node budget metrics", componentFunc(func(ctx context.Context) error { nodeBudgetMetrics(ctx, eng, fileLimit, m, logger); return nil }))
	for _, t := range cfg.AllTopics() {
		spec := engine.TopicSpec{Name: t.Name, Partitions: int32(t.Partitions), RetentionAge: t.Retention, RetentionBytes: t.RetentionBytes}
		if err := eng.EnsureTopic(spec); err != nil {
			return nil, nil, err
		}
	}
	_, clustered := clusterStatus(eng)
	// A broker keeps its topics itself; the catalogue is the embedded
	// log's record of the topics created through spool.
	catalog := newTopicCatalog(dataDir, clustered || cfg.Storage.Broker())
	if err := openCreatedTopics(cfg, eng, catalog); err != nil {
		return nil, nil, err
	}
	return eng, catalog, nil
}

// scheduledServer lists and cancels scheduled messages; nil on a broker
// backend, which refuses them.
type scheduledServer struct{ *scheduled.Server }

func newScheduled(cfg *config.Config, eng engine.Backend) *scheduledServer {
	if cfg.Storage.Broker() {
		return nil
	}
	return &scheduledServer{scheduled.New(eng)}
}

// cancel is the publish server's Config.Cancel.
func (s *scheduledServer) cancel() func(context.Context, *spoolv1.CancelScheduledRequest) (*spoolv1.CancelScheduledResponse, error) {
	if s == nil {
		return nil
	}
	return s.Cancel
}

// scheduleRetention answers the publish server's question about scheduled
// messages (docs/scheduling.md): the embedded log keeps them, until the
// topic's retention by age; a broker backend refuses them.
func scheduleRetention(cfg *config.Config, eng engine.Backend) func(topic string) (time.Duration, error) {
	if cfg.Storage.Broker() {
		return func(string) (time.Duration, error) {
			return 0, apierr.New(apierr.BackendUnsupported, "scheduled delivery (deliver_at_ms, deliver_after_ms) is not offered by the %s backend: publish without a delivery time, or use the embedded backend", cfg.Storage.Backend)
		}
	}
	return func(topic string) (time.Duration, error) {
		if g, ok := eng.(engine.FeatureGate); ok {
			if err := g.RequireFeature(engine.FeatureScheduledDelivery); err != nil {
				return 0, err // CLUSTER_VERSION: an older member would deliver the message at once
			}
		}
		for _, t := range eng.Topics() {
			if t.Name == topic {
				return t.RetentionAge, nil
			}
		}
		return 0, apierr.New(apierr.UnknownTopic, "topic %q is not known to this sidecar", topic)
	}
}

// startAdminServers starts the admin listener's server and, with
// node.probe_listen, the probe listener's (probes, /metrics, gRPC health on
// a gRPC server of its own: nothing else is registered there).
func startAdminServers(r *runner, cfg *config.Config, m *metrics.Metrics, auth *adminAuth, healthSrv *health.Server, adminGRPC *grpc.Server, rd *readiness, detail func() []string, adminL, probeL net.Listener) {
	adminHTTP := newAdminHTTP(probeMux(m, healthSrv, rd, detail, func(h http.Handler) http.Handler { return auth.httpGate(roleRead, h) }), auth, adminGRPC, cfg.Admin)
	r.start("admin server", adminServer{name: "admin", http: adminHTTP, grpc: adminGRPC, l: adminL, grpcGrace: time.Second, httpGrace: 2 * time.Second, fail: r.fail})
	if probeL == nil {
		return
	}
	probeGRPC := grpc.NewServer()
	healthpb.RegisterHealthServer(probeGRPC, healthSrv)
	probeHTTP := newProbeHTTP(probeMux(m, healthSrv, rd, detail, func(h http.Handler) http.Handler { return h }), probeGRPC, cfg.Admin)
	r.start("probe server", adminServer{name: "probe", http: probeHTTP, grpc: probeGRPC, l: probeL, grpcGrace: time.Second, httpGrace: 2 * time.Second, fail: r.fail})
}

// leaveCluster hands this node's leaderships and replicas to the other
// nodes and leaves the cluster (cluster.leave_on_shutdown), within timeout.
func leaveCluster(eng engine.ClusterAdmin, timeout time.Duration, logger *slog.Logger) {
	logger.Info("leaving the cluster (cluster.leave_on_shutdown)", "leave_timeout", timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rep, err := eng.Leave(ctx)
	switch {
	case err == nil:
		logger.Info("left the cluster: every replica this node held is on other nodes", "took", rep.Took.Round(time.Millisecond))
	case errors.Is(err, engine.ErrDecommissionRefused):
		logger.Warn("not leaving the cluster: stopping as a node that is expected back", "err", err)
	default:
		logger.Error("stopping before every replica moved: these partitions keep a replica fewer until the cluster re-creates it on another node (raise cluster.leave_timeout and the pod's terminationGracePeriodSeconds)",
			"err", err, "partitions", rep.Held, "still_led", rep.Led)
	}
}

// stopGRPC lets unary calls finish for up to grace, then cuts streams.
func stopGRPC(s *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }() // ends when Stop below interrupts it
	select {
	case <-done:
	case <-time.After(grace):
		s.Stop()
		<-done
	}
}

// readyDetail lists what /readyz reports beyond ready: quarantined
// partitions and stopped replicas. They do not make the node unready:
// readiness gates the whole pod (the app with it), while the other
// partitions serve — and a stopped replica's partition is served too, from
// its other replicas; alert on spool_partition_quarantined and
// spool_replicas_stopped instead.
func readyDetail(eng engine.Backend) func() []string {
	return func() []string {
		var out []string
		if q, ok := eng.(engine.Quarantiner); ok { // a broker reports its own damage
			for _, q := range q.Quarantined() {
				out = append(out, "degraded: partition "+q.String()+"; publishes to it fail until it is repaired (docs/operations.md)")
			}
		}
		st, _ := clusterStatus(eng)
		return append(out, stoppedDetail(st)...)
	}
}

// stoppedDetail is a /readyz line per replica of this node that is
// stopped, saying why and what this node does meanwhile.
func stoppedDetail(st engine.ClusterStatus) []string {
	var out []string
	for _, r := range st.Replicas {
		if r.Err == "" {
			continue
		}
		then := "until the node restarts"
		switch r.StopReason {
		case engine.StopDiskFull:
			then = "opened again every few seconds: once space returns it catches up by itself"
		case engine.StopDamaged:
			then = "never reopened: a new copy is built from its other replicas"
		}
		out = append(out, fmt.Sprintf("degraded: replica %s/%d stopped (%s), %s; meanwhile this node publishes to the partition's leader and reads from its other replicas (docs/operations.md, \"A full disk\"): %s",
			r.Topic, r.Partition, r.StopReason, then, r.Err))
	}
	if n := st.StoppedNow[engine.StopDiskFull] + st.StoppedNow[engine.StopDamaged] + st.StoppedNow[engine.StopOther]; n > len(out) {
		out = append(out, fmt.Sprintf("degraded: %d replicas of this node stopped, %d of them the controller's or being reopened (spool_replicas_stopped)", n, n-len(out)))
	}
	return out
}

func logOptions(cfg *config.Config) engine.LogOptions {
	o := engine.LogOptions{
		SegmentBytes:       cfg.Storage.SegmentBytes,
		SegmentAge:         cfg.Storage.SegmentAge,
		IndexIntervalBytes: int(cfg.Storage.IndexIntervalBytes),
		FsyncInterval:      cfg.Storage.FsyncInterval,
		SyncFileSystem:     cfg.Storage.Sync == config.SyncFileSystem,
		Journal:            cfg.Storage.Sync == config.SyncJournal,
		JournalBytes:       cfg.Storage.JournalBytes,
		// Limits come from the config in one place: every message that
		// limits.max_message_bytes allows, and its dead letter, fits a batch.
		MaxBatchBytes: engine.MaxBatchBytesFor(cfg.Limits.MaxMessageBytes, cfg.Limits.MaxIDBytes, cfg.Limits.MaxHeaders),
	}
	if cfg.Storage.Fsync == config.FsyncInterval {
		o.Fsync = engine.FsyncInterval
	}
	return o
}

func limits(cfg *config.Config) publish.Limits {
	l := cfg.Limits
	return publish.Limits{
		MaxMessageBytes:  l.MaxMessageBytes,
		MaxKeyBytes:      l.MaxKeyBytes,
		MaxIDBytes:       l.MaxIDBytes,
		MaxHeaders:       l.MaxHeaders,
		MaxHeaderBytes:   l.MaxHeaderBytes,
		MaxBatchMessages: l.MaxBatchMessages,
	}
}

// newGroups builds one delivery group per consumer group of the config.
func newGroups(cfg *config.Config, eng engine.Backend, m *metrics.Metrics, led ledger.Ledger, owner string, tracer trace.Tracer, logger *slog.Logger) ([]*deliver.Group, func(), error) {
	// In a cluster, and on a broker backend, the sidecars whose apps
	// consume a group share its partitions through the group's coordinator
	// (docs/groups.md, docs/backends.md).
	co := coordinatorOf(eng)
	var session string
	if co != nil {
		var err error
		if session, err = newSession(); err != nil {
			return nil, nil, err
		}
	}
	byGroup := map[string]*deliver.GroupConfig{}
	var order []string
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for i := range cfg.Subscriptions {
		sc := &cfg.Subscriptions[i]
		gc, ok := byGroup[sc.Group]
		if !ok {
			gc = &deliver.GroupConfig{Name: sc.Group, DrainTimeout: cfg.Node.DrainTimeout, CommitInterval: cfg.Node.CommitInterval,
				SidecarVersion: Version, Ledger: led, Owner: owner, Tracer: tracer, MemoryBytes: groupMemory(cfg),
				LedgerWriteDelay: cfg.Delivery.LedgerWriteDelay}
			if remoteReads(cfg, eng) {
				gc.ReadsInFlight = cfg.Delivery.ReadsInFlight
			}
			if co != nil {
				gc.Coordinator = co
				gc.Membership = deliver.Membership{MemberPrefix: owner, Session: session,
					SessionTimeout: cfg.Cluster.GroupSessionTimeout, RevokeTimeout: cfg.Cluster.GroupRevokeTimeout, DegradeAfter: cfg.Cluster.GroupDegradeAfter}
			}
			byGroup[sc.Group] = gc
			order = append(order, sc.Group)
		}
		ord, err := tracker.ParseOrdering(string(sc.Ordering))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		sub := deliver.Subscription{Topic: sc.Topic, DLQTopic: sc.DLQTopic(), Tracker: tracker.Config{
			Ordering:          ord,
			MaxInFlight:       sc.MaxInFlight,
			WindowMessages:    sc.WindowMessages,
			MaxParkedKeys:     sc.MaxParkedKeys,
			MaxAttempts:       sc.MaxAttempts,
			VisibilityTimeout: sc.VisibilityTimeout,
			Backoff:           sc.Backoff.Config(),
		},
			DedupeTTL: sc.DedupeTTL,
			Breaker: &breaker.Config{
				ConsecutiveFailures: sc.Breaker.ConsecutiveFailures,
				FailureRatio:        sc.Breaker.FailureRatio,
				MinRequests:         sc.Breaker.MinRequests,
				Window:              sc.Breaker.Window,
				OpenTimeout:         sc.Breaker.OpenTimeout,
				MaxOpenTimeout:      sc.Breaker.MaxOpenTimeout,
			},
		}
		if f := sc.Faults; f.On() {
			sub.Faults = &deliver.Faults{Duplicate: f.Duplicate, LoseAck: f.LoseAck, Delay: f.Delay, DelayMax: f.DelayMax,
				EarlyLeaseExpiry: f.EarlyLeaseExpiry, Seed: f.Seed}
		}
		if sc.RedisUnavailable == config.RedisDeliver {
			sub.RedisPolicy = deliver.PolicyDeliver
		}
		if sc.Delivery == config.DeliveryCallback {
			sub.Mode = deliver.ModeCallback
			if gc.Handler == nil {
				// The app's answers and the deliveries sent to it go
				// through the same codec as the Subscribe stream.
				dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpcbuf.ClientCodec()}
				if sc.AppTokenFile != "" {
					tok, err := loadCallbackToken(sc.AppTokenFile)
					if err != nil {
						closeAll()
						return nil, nil, fmt.Errorf("subscription %s/%s: %w", sc.Topic, sc.Group, err)
					}
					if !config.LoopbackOrUnix(sc.AppAddress) {
						logger.Warn("the callback token goes in clear text to an app address beyond loopback: anyone on the way can read it", "topic", sc.Topic, "group", sc.Group, "app_address", sc.AppAddress)
					}
					dial = append(dial, grpc.WithPerRPCCredentials(tok))
				}
				conn, err := grpc.NewClient(dialTarget(sc.AppAddress), dial...)
				if err != nil {
					closeAll()
					return nil, nil, fmt.Errorf("subscription %s/%s: app_address %q: %w", sc.Topic, sc.Group, sc.AppAddress, err)
				}
				conns = append(conns, conn)
				gc.Handler = spoolv1.NewHandlerServiceClient(conn)
			}
		}
		gc.Subscriptions = append(gc.Subscriptions, sub)
	}
	var out []*deliver.Group
	for _, name := range order {
		g, err := deliver.NewGroup(*byGroup[name], eng, m, logger)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out = append(out, g)
	}
	return out, closeAll, nil
}

// listen opens host:port or unix:///path, a socket with file mode mode
// from before it has its name (listenUnixMode); a stale socket file is
// replaced.
func listen(addr string, mode os.FileMode) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		return listenUnixMode(path, mode)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (is another spoold or program using the port?)", addr, err)
	}
	return l, nil
}

func addrString(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix://" + l.Addr().String()
	}
	return l.Addr().String()
}

// dialTarget turns a configured address into a gRPC target.
func dialTarget(addr string) string {
	if strings.HasPrefix(addr, "unix://") {
		return addr
	}
	return "passthrough:///" + addr
}

// clusterCoordinator is the embedded cluster's group coordinator as
// delivery needs it.
type clusterCoordinator struct {
	stateCoordinator
	eng engine.Backend
	cl  engine.ClusterAdmin
}

// Node is this node's id once it is a working member of the cluster; 0
// (and true) on a node with storage off once it knows the cluster: it holds
// no replicas, so its members join without a node (no preference for local
// reads).
func (c clusterCoordinator) Node() (uint64, bool) {
	st, ok := c.cl.ClusterStatus()
	return st.NodeID, ok && st.Ready
}

// Replicas lists the replica nodes of every partition of topic when this
// node holds a replica of each (with the usual replication factor 3 on 3
// nodes, always); otherwise none, and the coordinator assigns without the
// preference for local reads.
func (c clusterCoordinator) Replicas(topic string) [][]uint64 {
	n, err := c.eng.Partitions(topic)
	if err != nil || n <= 0 {
		return nil
	}
	st, ok := c.cl.ClusterStatus()
	if !ok {
		return nil
	}
	out := make([][]uint64, n)
	known := 0
	for _, r := range st.Replicas {
		if r.Topic == topic && r.Partition >= 0 && r.Partition < n && out[r.Partition] == nil {
			out[r.Partition] = r.Replicas
			known++
		}
	}
	if known != int(n) {
		return nil
	}
	return out
}

// newSession names this spoold process among the members of its groups.
func newSession() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("consumer groups: drawing a session id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// remoteReads reports whether delivery's reads are network round trips: on
// a broker backend, or a cluster member (it reads the partitions it holds
// no replica of from a peer). One node's embedded log reads files.
func remoteReads(cfg *config.Config, eng engine.Backend) bool {
	if cfg.Storage.Broker() {
		return true
	}
	if cl, ok := eng.(engine.ClusterAdmin); ok {
		_, clustered := cl.ClusterStatus()
		return clustered
	}
	return false
}

// groupMemory is each consumer group's share of delivery.memory_bytes: the
// budget is split evenly over the groups (each group's loop then decides
// alone, without sharing state with the others), at least 1 byte each (a
// group still delivers one message at a time).
func groupMemory(cfg *config.Config) int64 {
	groups := map[string]bool{}
	for _, sc := range cfg.Subscriptions {
		groups[sc.Group] = true
	}
	return max(cfg.Delivery.MemoryBytes/int64(max(len(groups), 1)), 1)
}
