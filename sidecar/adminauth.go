package sidecar

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
	"github.com/spoolmq/spool/sidecar/authn"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// Who may call what on the admin listener (docs/security.md, "Admin").
//
// The admin gRPC server and the admin HTTP mux go through one gate,
// adminAuth: it turns what a caller presents (a bearer token, a verified
// client certificate, or nothing on a loopback or Unix socket listener with
// no authentication configured) into a principal with a role, checks the
// role against adminMethodRoles, and writes the audit line of every call
// that can change state. Refusals are Unauthenticated (no or unknown
// credentials) or PermissionDenied (role too low), counted in
// spool_admin_refused_total{reason}.

// role is what a principal may do; a higher role includes the lower.
type role int8

const (
	roleNone    role = iota
	roleRead         // describe, list, status, tail, peek, lag, metrics
	roleOperate      // everything that changes state, and pprof
)

func (r role) String() string {
	switch r {
	case roleRead:
		return config.RoleRead
	case roleOperate:
		return config.RoleOperate
	}
	return "none"
}

func parseRole(s string) (role, bool) {
	switch s {
	case config.RoleRead:
		return roleRead, true
	case config.RoleOperate:
		return roleOperate, true
	}
	return roleNone, false
}

// adminMethodRoles is the role each AdminService method needs. Every
// method must have an entry (TestAdminMethodRolesCoverEveryRPC): a method
// missing here is refused to everyone, so a new RPC cannot slip through
// unprotected. Calls of operate methods are audited.
//
// PeekDeadLetters and Tail are read although they return payloads: reading
// messages is what read is for; a role that sees no payloads would be a
// third role.
var adminMethodRoles = map[string]role{
	spoolv1.AdminService_ListTopics_FullMethodName:             roleRead,
	spoolv1.AdminService_ListGroups_FullMethodName:             roleRead,
	spoolv1.AdminService_PeekDeadLetters_FullMethodName:        roleRead,
	spoolv1.AdminService_SummarizeDeadLetters_FullMethodName:   roleRead,
	spoolv1.AdminService_ClusterStatus_FullMethodName:          roleRead,
	spoolv1.AdminService_Tail_FullMethodName:                   roleRead,
	spoolv1.AdminService_ListScheduled_FullMethodName:          roleRead,
	spoolv1.AdminService_Redrive_FullMethodName:                roleOperate, // also its dry run: one role per method
	spoolv1.AdminService_ResetOffsets_FullMethodName:           roleOperate,
	spoolv1.AdminService_DecommissionNode_FullMethodName:       roleOperate,
	spoolv1.AdminService_FinalizeClusterVersion_FullMethodName: roleOperate,
	spoolv1.AdminService_MoveReplicas_FullMethodName:           roleOperate,
	spoolv1.AdminService_CreateTopic_FullMethodName:            roleOperate,
	spoolv1.AdminService_AlterTopic_FullMethodName:             roleOperate,
	spoolv1.AdminService_DeleteTopic_FullMethodName:            roleOperate,
	spoolv1.AdminService_PurgeDeadLetters_FullMethodName:       roleOperate,
}

// methodRole is the role a gRPC method of the admin server needs: health
// answers everyone (kubelet's gRPC probes), reflection needs read, an
// AdminService method its table entry; anything else is refused.
func methodRole(full string) (role, bool) {
	if strings.HasPrefix(full, "/"+healthpb.Health_ServiceDesc.ServiceName+"/") {
		return roleNone, true
	}
	if strings.HasPrefix(full, "/grpc.reflection.") {
		return roleRead, true
	}
	r, ok := adminMethodRoles[full]
	return r, ok
}

// Reasons of spool_admin_refused_total.
const (
	refusedNoCredentials      = "no_credentials"
	refusedUnknownToken       = "unknown_token"
	refusedUnknownCertificate = "unknown_certificate"
	refusedRoleTooLow         = "role_too_low"
	refusedUnknownMethod      = "unknown_method"
)

// principal is an authenticated caller.
type principal struct {
	name string // the token's name, the certificate identity, or "local socket"/"loopback"
	via  string // token, certificate or local
	role role
}

// adminAuth authenticates and authorizes admin calls.
type adminAuth struct {
	// required: a caller must present a credential. Off only on a loopback
	// or Unix socket listener with no authentication configured, where
	// every caller is local and operates.
	required bool
	local    principal
	tokens   *authn.File
	clients  map[string]role // certificate identity → role
	refused  *prometheus.CounterVec
	audit    *slog.Logger
}

func newAdminAuth(cfg *config.Config, m *metrics.Metrics, logger *slog.Logger) (*adminAuth, error) {
	refused := m.AdminRefused
	a := &adminAuth{
		required: cfg.Admin.AuthConfigured(),
		local:    principal{name: "loopback", via: "local", role: roleOperate},
		clients:  map[string]role{},
		refused:  refused,
		audit:    logger.With("audit", true),
	}
	if strings.HasPrefix(cfg.Node.AdminListen, "unix://") {
		a.local.name = "local socket"
	}
	for _, r := range []string{refusedNoCredentials, refusedUnknownToken, refusedUnknownCertificate, refusedRoleTooLow, refusedUnknownMethod} {
		refused.WithLabelValues(r) // every series exists from the start, at 0
	}
	for _, c := range cfg.Admin.Clients {
		r, _ := parseRole(c.Role) // Validate checked it
		a.clients[c.Identity] = r
	}
	if cfg.Admin.TokensFile != "" {
		tf, err := openTokenFile(cfg.Admin.TokensFile, m.AdminTokens, logger)
		if err != nil {
			return nil, err
		}
		a.tokens = tf
	}
	if cfg.Admin.InsecureNoAuth && !a.required && !config.LoopbackOrUnix(cfg.Node.AdminListen) {
		logger.Warn("INSECURE: AdminService and pprof answer anyone who reaches node.admin_listen, with no authentication (admin.insecure_no_auth): "+
			"they can read every message, delete topics, purge dead letters and decommission nodes; use this on a development machine only",
			"admin_listen", cfg.Node.AdminListen)
	}
	if a.tokens != nil && cfg.Admin.TLS.CertFile == "" && !config.LoopbackOrUnix(cfg.Node.AdminListen) {
		logger.Warn("admin bearer tokens travel in cleartext on node.admin_listen: set admin.tls.cert_file and key_file", "admin_listen", cfg.Node.AdminListen)
	}
	return a, nil
}

// identify turns a caller's credentials into a principal, or the reason
// it has none. authz is the Authorization header; cs the TLS state (nil
// on a plaintext listener).
func (a *adminAuth) identify(authz string, cs *tls.ConnectionState) (principal, string) {
	if !a.required {
		return a.local, ""
	}
	if authz != "" && a.tokens != nil {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(authz), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") { // the scheme is case-insensitive (RFC 9110)
			return principal{}, refusedUnknownToken
		}
		p, ok := tokenPrincipal(a.tokens, strings.TrimSpace(tok))
		if !ok {
			return principal{}, refusedUnknownToken
		}
		return p, ""
	}
	if cs != nil && len(cs.VerifiedChains) > 0 && len(cs.PeerCertificates) > 0 {
		c := cs.PeerCertificates[0]
		ids := []string{c.Subject.CommonName}
		ids = append(ids, c.DNSNames...)
		for _, u := range c.URIs {
			ids = append(ids, u.String())
		}
		for _, id := range ids {
			if r, ok := a.clients[id]; ok && id != "" {
				return principal{name: id, via: "certificate", role: r}, ""
			}
		}
		return principal{}, refusedUnknownCertificate
	}
	if authz != "" {
		return principal{}, refusedUnknownToken // a token, and no tokens file
	}
	return principal{}, refusedNoCredentials
}

// check decides a call of method (a gRPC full method name, or an HTTP
// path) needing need. The error is a gRPC status naming the method and the
// role needed; the principal is the caller's, for the audit line.
func (a *adminAuth) check(method string, need role, authz string, cs *tls.ConnectionState) (principal, error) {
	short := method[strings.LastIndex(method, "/")+1:]
	if short == "" {
		short = method
	}
	p, reason := a.identify(authz, cs)
	switch reason {
	case "":
	case refusedNoCredentials:
		a.refused.WithLabelValues(reason).Inc()
		return p, status.Errorf(codes.Unauthenticated, "%s needs the %s role: present a bearer token (spool --token-file, or the authorization metadata \"Bearer <token>\") or a client certificate; this call had none", short, need)
	case refusedUnknownCertificate:
		a.refused.WithLabelValues(reason).Inc()
		return p, status.Errorf(codes.Unauthenticated, "%s needs the %s role: the client certificate names no identity in admin.clients", short, need)
	default:
		a.refused.WithLabelValues(reason).Inc()
		return p, status.Errorf(codes.Unauthenticated, "%s needs the %s role: the bearer token is not one of admin.tokens_file (it is not repeated here)", short, need)
	}
	if p.role < need {
		a.refused.WithLabelValues(refusedRoleTooLow).Inc()
		return p, status.Errorf(codes.PermissionDenied, "%s needs the %s role; %s has %s", short, need, p.name, p.role)
	}
	return p, nil
}

// grpcCredentials reads the caller's Authorization metadata and TLS state.
// Of several authorization values the first counts.
func grpcCredentials(ctx context.Context) (string, *tls.ConnectionState) {
	var authz string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	var cs *tls.ConnectionState
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			cs = &ti.State
		}
	}
	return authz, cs
}

// authorize checks a gRPC call: unknown methods are refused to everyone.
func (a *adminAuth) authorize(ctx context.Context, full string) (principal, role, error) {
	need, ok := methodRole(full)
	if !ok {
		a.refused.WithLabelValues(refusedUnknownMethod).Inc()
		return principal{}, roleOperate, status.Errorf(codes.PermissionDenied, "%s: no role may call it (it has no entry in spoold's admin role table)", full)
	}
	authz, cs := grpcCredentials(ctx)
	p, err := a.check(full, need, authz, cs)
	return p, need, err
}

// unary is the admin gRPC server's gate for unary calls.
func (a *adminAuth) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	p, need, err := a.authorize(ctx, info.FullMethod)
	if need == roleOperate {
		defer a.auditDeferred(ctx, p, info.FullMethod, req, &err)
	}
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// stream is the gate for streaming calls (Tail). An operate stream would
// be audited without its arguments, which arrive after the gate.
func (a *adminAuth) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	p, need, err := a.authorize(ss.Context(), info.FullMethod)
	if need == roleOperate {
		defer a.auditDeferred(ss.Context(), p, info.FullMethod, nil, &err)
	}
	if err != nil {
		return err
	}
	return handler(srv, ss)
}

// auditDeferred writes the audit line once the call is over, also when
// its handler panicked (outcome Internal, as the recovery interceptor
// answers), then lets the panic go on to that interceptor.
func (a *adminAuth) auditDeferred(ctx context.Context, p principal, full string, req any, err *error) {
	if r := recover(); r != nil {
		a.writeAudit(ctx, p, full, req, status.Error(codes.Internal, "panic"))
		panic(r)
	}
	a.writeAudit(ctx, p, full, req, *err)
}

// writeAudit writes the one audit line of a state-changing call.
func (a *adminAuth) writeAudit(ctx context.Context, p principal, full string, req any, err error) {
	outcome := "ok"
	if err != nil {
		outcome = status.Code(err).String()
	}
	who, via := p.name, p.via
	if who == "" {
		who, via = "unauthenticated", "none"
	}
	attrs := []slog.Attr{
		slog.String("who", who), slog.String("via", via),
		slog.String("method", full[strings.LastIndex(full, "/")+1:]),
	}
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		attrs = append(attrs, slog.String("peer", pr.Addr.String()))
	}
	if args := auditArgs(req); len(args) > 0 {
		attrs = append(attrs, slog.Attr{Key: "args", Value: slog.GroupValue(args...)})
	}
	attrs = append(attrs, slog.String("outcome", outcome))
	a.audit.LogAttrs(ctx, slog.LevelInfo, "admin call", attrs...)
}

// httpGate guards an admin HTTP handler (pprof, /metrics) with need.
// Refusals are 401 or 403 with the same message as gRPC's.
func (a *adminAuth) httpGate(need role, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := a.check(r.URL.Path, need, r.Header.Get("Authorization"), r.TLS)
		if err == nil {
			h.ServeHTTP(w, r)
			return
		}
		code := http.StatusForbidden
		if status.Code(err) == codes.Unauthenticated {
			code = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", `Bearer realm="spool admin"`)
		}
		http.Error(w, fmt.Sprintf("%s: %s", r.URL.Path, status.Convert(err).Message()), code)
	})
}
