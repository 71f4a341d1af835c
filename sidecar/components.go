package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spoolmq/spool/engine"
	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/apps"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/deliver"
	"github.com/spoolmq/spool/sidecar/metrics"
	"github.com/spoolmq/spool/sidecar/publish"
	"github.com/spoolmq/spool/sidecar/tracing"
)

// The components run starts (runner.go). Each stops what it runs when its
// context ends, and returns once it has.

// engineComponent drives the storage backend (the log's appender, a
// cluster's replicas, a broker's watch); stopped, it closes the backend
// (the log flushes). A backend whose Run ends early does not stop spoold:
// publishes and deliveries then fail with the backend's errors, as they
// always did.
type engineComponent struct {
	eng     engine.Backend
	backend string
	log     *slog.Logger
}

func (c engineComponent) Run(ctx context.Context) error {
	_ = c.eng.Run(ctx) // its error, if any, is the calls' to give
	<-ctx.Done()
	if err := c.eng.Close(); err != nil {
		c.log.Error("closing the log", "backend", c.backend, "err", err)
	}
	return nil
}

// delivery runs every consumer group. Stopped, the groups drain (no new
// deliveries; in-flight ones finish within node.drain_timeout while the app
// streams stay open), commit and leave their groups; it returns their
// errors once all have.
type delivery struct {
	groups []*deliver.Group
	log    *slog.Logger
}

func (d delivery) Run(ctx context.Context) error {
	var eg errgroup.Group
	errs := make([]error, len(d.groups))
	for i, g := range d.groups {
		eg.Go(func() error {
			errs[i] = g.Run(ctx)
			return nil
		})
	}
	_ = eg.Wait()
	for _, err := range errs {
		if err != nil {
			d.log.Error("group stopped with an error", "err", err)
		}
	}
	return errors.Join(errs...)
}

// appServer serves the app's gRPC API (publish, subscribe, health) on the
// app listeners. A listener that fails is reported (spoold shuts down) while
// the others keep serving until the server's turn to stop: the drain's acks
// still flow. Stopped, unary calls get grace to finish, then streams are cut.
type appServer struct {
	srv   *grpc.Server
	ls    []net.Listener
	grace time.Duration
	fail  func(error)
}

func (s appServer) Run(ctx context.Context) error {
	var eg errgroup.Group
	for _, l := range s.ls {
		eg.Go(func() error {
			if err := s.srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				s.fail(fmt.Errorf("app listener %s: %w", l.Addr(), err))
			}
			return nil
		})
	}
	<-ctx.Done()
	stopGRPC(s.srv, s.grace)
	return eg.Wait()
}

// adminServer serves an HTTP listener and the gRPC server behind it: the
// admin listener (AdminService, pprof, the probes and metrics for local
// tools) or the probe listener (probes, metrics, gRPC health). Stopped: the
// gRPC calls get grpcGrace, the HTTP requests httpGrace.
type adminServer struct {
	name                 string
	http                 *http.Server
	grpc                 *grpc.Server
	l                    net.Listener
	grpcGrace, httpGrace time.Duration
	fail                 func(error)
}

func (s adminServer) Run(ctx context.Context) error {
	var eg errgroup.Group
	eg.Go(func() error { // ends at Shutdown below
		if err := s.http.Serve(s.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.fail(fmt.Errorf("%s listener %s: %w", s.name, s.l.Addr(), err))
		}
		return nil
	})
	<-ctx.Done()
	stopGRPC(s.grpc, s.grpcGrace)
	shutCtx, cancel := context.WithTimeout(context.Background(), s.httpGrace)
	_ = s.http.Shutdown(shutCtx)
	cancel()
	return eg.Wait()
}

// devDataDir is the data dir of `spoold --dev` without one: a temporary
// dir, removed when spoold stops (the last stage).
func devDataDir(r *runner, logger *slog.Logger) (string, error) {
	dir, err := os.MkdirTemp("", "spoold-dev-")
	if err != nil {
		return "", fmt.Errorf("spoold --dev: temporary data dir: %w", err)
	}
	r.onStop("dev data dir", func() error { _ = os.RemoveAll(dir); return nil })
	logger.Info("dev mode: temporary data dir, removed on exit", "data_dir", dir)
	return dir, nil
}

// startTracing returns the tracer provider spoold's spans go to: the
// caller's, or the OTLP exporter tracing.otlp_endpoint configures (nil:
// tracing is off). The exporter is shut down, exporting what it holds,
// after every component that records spans has stopped.
func startTracing(cfg *config.Config, opts Options, r *runner, logger *slog.Logger) (trace.TracerProvider, error) {
	if opts.TracerProvider != nil || !cfg.Tracing.Enabled() {
		return opts.TracerProvider, nil
	}
	p, err := tracing.NewProvider(tracing.Config{Endpoint: cfg.Tracing.OTLPEndpoint, SampleRatio: cfg.Tracing.Ratio(), Node: cfg.Node.ID, Version: Version})
	if err != nil {
		return nil, err
	}
	r.onStop("tracing", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			logger.Warn("tracing: spans not exported at shutdown", "endpoint", cfg.Tracing.OTLPEndpoint, "err", err)
		}
		return nil
	})
	logger.Info("tracing: exporting spans over OTLP/gRPC", "endpoint", cfg.Tracing.OTLPEndpoint, "sample_ratio", cfg.Tracing.Ratio())
	return p, nil
}

// listenAll opens the app listeners, the admin listener and the probe
// listener when node.probe_listen is set (all or none). With appTLS, app
// addresses beyond loopback serve TLS (appCreds).
func listenAll(cfg *config.Config, appTLS bool) (app []net.Listener, admin, probe net.Listener, addrs Addrs, err error) {
	closeAll := func() {
		for _, l := range append(app, admin) {
			if l != nil {
				_ = l.Close()
			}
		}
	}
	for _, a := range cfg.Node.AppListen {
		l, err := listen(a, os.FileMode(cfg.Apps.SocketFileMode()))
		if err != nil {
			closeAll()
			return nil, nil, nil, Addrs{}, err
		}
		if appTLS && config.BeyondLoopback(a) {
			l = tlsListener{l}
		}
		app = append(app, l)
		addrs.App = append(addrs.App, addrString(l))
	}
	admin, err = listenAdmin(cfg)
	if err != nil {
		closeAll()
		return nil, nil, nil, Addrs{}, err
	}
	addrs.Admin = addrString(admin)
	if cfg.Node.ProbeListen != "" {
		if probe, err = listen(cfg.Node.ProbeListen, 0); err != nil {
			closeAll()
			return nil, nil, nil, Addrs{}, err
		}
		addrs.Probe = addrString(probe)
	}
	return app, admin, probe, addrs, nil
}

// newGRPCServers builds the app's gRPC server (publish, subscribe, health)
// and the admin gRPC server (AdminService, health, behind auth's gate),
// which share one health server. appGate authenticates every call to the
// app server and decides its subscriptions (publishes:
// publish.Config.Admit). With appTLS, the app server's listeners beyond
// loopback serve TLS (listenAll, appCreds).
func newGRPCServers(cfg *config.Config, logger *slog.Logger, m *metrics.Metrics, appGate *apps.Gate, appTLS *tls.Config, pub *publish.Server, groups []*deliver.Group, adm *admin, catalog *topicCatalog, auth *adminAuth) (*health.Server, *grpc.Server, *grpc.Server) {
	healthSrv := health.NewServer()
	var creds []grpc.ServerOption
	if appTLS != nil {
		creds = append(creds, grpc.Creds(appCreds{credentials.NewTLS(appTLS)}))
	}
	appSrv := newGRPCServer(logger, max(MaxRequestBytes, cfg.Limits.MaxMessageBytes+cfg.Limits.MaxHeaderBytes+64<<10), creds,
		gate{unary: appGate.UnaryInterceptor, stream: appGate.StreamInterceptor})
	spoolv1.RegisterPublisherServiceServer(appSrv, pub)
	spoolv1.RegisterSubscriberServiceServer(appSrv, deliver.NewServer(groups, m, logger).Authorize(appGate.AdmitSubscribe))
	healthpb.RegisterHealthServer(appSrv, healthSrv)

	adminGRPC := newGRPCServer(logger, MaxRequestBytes, nil, gate{unary: auth.unary, stream: auth.stream})
	adm.catalog = catalog
	spoolv1.RegisterAdminServiceServer(adminGRPC, adm)
	healthpb.RegisterHealthServer(adminGRPC, healthSrv)
	return healthSrv, appSrv, adminGRPC
}
