package sidecar

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/spoolmq/spool/proto/grpcbuf"
	"github.com/spoolmq/spool/sidecar/apierr"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// MaxRequestBytes bounds one gRPC message from the app: a Publish of many
// messages, or a frame of settlements. It grows with limits.max_message_bytes
// so that one largest message always fits.
const MaxRequestBytes = 32 << 20

// Keepalive of the app and admin servers. The SDKs ping spoold after
// 10 s without a frame (their KeepaliveTime), with or without a call in
// progress; gRPC's default policy (at most one ping per 5 min, none
// without a call) would answer them with GOAWAY too_many_pings, so spoold
// permits a ping every KeepaliveMinTime, idle or not. spoold pings its
// clients too, after KeepaliveTime without a frame, and closes a
// connection whose ping is not answered within KeepaliveTimeout: the
// deliveries a cut-off app's stream held then go back at once (uncounted),
// not when their leases end.
const (
	KeepaliveMinTime = 5 * time.Second
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 3 * time.Second
)

// newGRPCServer returns a server with Spool's interceptors: panic recovery
// (a panic becomes INTERNAL and a log line, never a crash), structured
// logging of failed calls with slog, the gates (who may call: before
// anything reads the request; the app server's authenticates and scopes
// apps, the admin server's operators), and request validation (the
// Validate methods of spool/v1, answered with reason INVALID_REQUEST). A
// caller that is not who it must be learns nothing more. Reflection is on.
func newGRPCServer(logger *slog.Logger, maxRecvBytes int, extra []grpc.ServerOption, gates ...gate) *grpc.Server {
	lg := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		logger.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(func(c codes.Code) logging.Level {
			switch c {
			case codes.OK, codes.Canceled:
				return logging.LevelDebug
			case codes.Internal, codes.Unknown, codes.DataLoss:
				return logging.LevelError
			}
			return logging.LevelWarn
		}),
	}
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in a gRPC handler (recovered)", "panic", p)
		return apierr.ToStatus(apierr.New(apierr.Internal, "internal error in spoold (a panic, logged with its stack): %v: this is a bug, please report it with spoold's log", p))
	})
	// Invalid UTF-8 is answered first: the codec has decoded such a
	// request to an empty message, which nothing else may see.
	bad := &grpcbuf.UTF8Refusals{}
	unary := []grpc.UnaryServerInterceptor{recovery.UnaryServerInterceptor(recoverOpt), logging.UnaryServerInterceptor(lg, logOpts...), utf8Unary(bad)}
	stream := []grpc.StreamServerInterceptor{recovery.StreamServerInterceptor(recoverOpt), logging.StreamServerInterceptor(lg, logOpts...), utf8Stream(bad)}
	for _, g := range gates {
		unary, stream = append(unary, g.unary), append(stream, g.stream)
	}
	s := grpc.NewServer(append([]grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.MaxRecvMsgSize(maxRecvBytes),
		grpcbuf.ServerOption(),
		grpcbuf.UTF8ServerCodec(bad),
		grpc.ChainUnaryInterceptor(append(unary, validateUnary)...),
		grpc.ChainStreamInterceptor(append(stream, validateStream)...),
	}, extra...)...)
	reflection.Register(s)
	return s
}

// notUTF8 answers a request the codec found a string field of that is not
// valid UTF-8 in (grpcbuf.UTF8Refusals).
func notUTF8(field string) error {
	return apierr.ToStatus(apierr.New(apierr.InvalidRequest,
		"%s is not valid UTF-8: protobuf string fields (topic, group, message id, header names and values) must be UTF-8 text; keys and payloads are bytes and may hold anything", field).
		With("field", field))
}

func utf8Unary(bad *grpcbuf.UTF8Refusals) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if field, ok := bad.Take(req); ok {
			return nil, notUTF8(field)
		}
		return handler(ctx, req)
	}
}

func utf8Stream(bad *grpcbuf.UTF8Refusals) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, utf8CheckingStream{ss, bad})
	}
}

// utf8CheckingStream ends the stream at a frame with invalid UTF-8 (there
// is no sequence to answer a PublishStream frame in band with: the frame
// was not decoded).
type utf8CheckingStream struct {
	grpc.ServerStream
	bad *grpcbuf.UTF8Refusals
}

func (s utf8CheckingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if field, ok := s.bad.Take(m); ok {
		return notUTF8(field)
	}
	return nil
}

// probeMux serves /healthz, /startupz, /readyz and /metrics: what kubelet
// and Prometheus need, and nothing that reads messages or changes state.
// /readyz adds the lines of detail (a degraded but serving node) after
// "ready"; a 503 lists what it waits for (readiness.go). metrics wraps the
// /metrics handler (the admin listener's gate; identity on the probe
// listener).
func probeMux(m *metrics.Metrics, hs *health.Server, rd *readiness, detail func() []string, gateMetrics func(http.Handler) http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", gateMetrics(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	serving := func(r *http.Request) bool {
		resp, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}
	notReady := func(w http.ResponseWriter, why []string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ready\n"))
		for _, line := range why {
			w.Write([]byte(line + "\n"))
		}
	}
	mux.HandleFunc("/startupz", func(w http.ResponseWriter, r *http.Request) {
		if !serving(r) {
			notReady(w, []string{"starting, or shutting down"})
			return
		}
		if why := rd.startup(); len(why) > 0 {
			notReady(w, why)
			return
		}
		w.Write([]byte("started\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !serving(r) {
			notReady(w, []string{"starting, or shutting down"})
			return
		}
		if why := rd.notReady(r.Context()); len(why) > 0 {
			notReady(w, why)
			return
		}
		w.Write([]byte("ready\n"))
		for _, line := range detail() {
			w.Write([]byte(line + "\n"))
		}
	})
	return mux
}

// newAdminHTTP serves the admin listener: AdminService (and gRPC health,
// reflection) over HTTP/2, pprof, and for local tools the probes and
// /metrics. With admin authentication on, /metrics needs read and pprof
// operate (a CPU profile or a trace costs the node); the probes answer
// everyone.
func newAdminHTTP(mux *http.ServeMux, auth *adminAuth, adminGRPC *grpc.Server, ac config.AdminConfig) *http.Server {
	pp := http.NewServeMux()
	pp.HandleFunc("/debug/pprof/", pprof.Index)
	pp.HandleFunc("/debug/pprof/profile", pprof.Profile)
	pp.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/pprof/", auth.httpGate(roleOperate, pp))
	return newHTTPServer(withGRPC(adminGRPC, mux), ac)
}

// newProbeHTTP serves the probe listener: the probes, /metrics and gRPC
// health (probeGRPC has nothing else registered).
func newProbeHTTP(mux *http.ServeMux, probeGRPC *grpc.Server, ac config.AdminConfig) *http.Server {
	return newHTTPServer(withGRPC(probeGRPC, mux), ac)
}

// withGRPC sends gRPC requests (HTTP/2, application/grpc) to g, the rest
// to h.
func withGRPC(g *grpc.Server, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			g.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// newHTTPServer bounds what a connection may hold: its request headers
// must arrive within admin.read_header_timeout (a half-open or trickling
// connection is closed), an idle connection is closed after
// admin.idle_timeout, headers are at most admin.max_header_bytes. No
// read or write timeout: Tail and pprof's profile stream for long.
func newHTTPServer(h http.Handler, ac config.AdminConfig) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ac.ReadHeaderTimeout,
		IdleTimeout:       ac.IdleTimeout,
		MaxHeaderBytes:    ac.MaxHeaderBytes,
	}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true) // over TLS (admin.tls)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}

// gate decides whether a call may proceed (adminAuth).
type gate struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

// publisherService is validated by the publish package itself: it answers
// a bad PublishStream request in-band and keeps the stream open, where an
// interceptor could only end the stream; and it knows the reasons
// (TOPIC_REQUIRED, NO_MESSAGES) of what the generic Validate refuses.
const publisherService = "/spool.v1.PublisherService/"

// validate runs the Validate method of a request or stream frame. Its
// failures are apierr.InvalidRequest: the message names the field.
func validate(m any) error {
	v, ok := m.(interface{ Validate() error })
	if !ok {
		return nil
	}
	if err := v.Validate(); err != nil {
		return apierr.ToStatus(apierr.New(apierr.InvalidRequest, "%s", err.Error()))
	}
	return nil
}

func validateUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, publisherService) {
		if err := validate(req); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

func validateStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, publisherService) {
		return handler(srv, ss)
	}
	return handler(srv, validatingStream{ss})
}

// validatingStream validates every frame it receives.
type validatingStream struct{ grpc.ServerStream }

func (s validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return validate(m)
}
