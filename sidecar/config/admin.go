package config

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// AdminConfig secures the admin listener (node.admin_listen: AdminService
// and pprof, which read messages and change state) and bounds both HTTP
// servers, admin and probe (docs/security.md, "Admin").
//
// Without tokens_file or tls.client_ca_file the admin listener must be
// loopback or a Unix socket: Validate refuses anything else unless
// InsecureNoAuth says otherwise, since an attacker who reaches AdminService
// can delete topics, purge dead letters and decommission nodes.
type AdminConfig struct {
	// SocketMode is the file mode of the admin Unix socket
	// (node.admin_listen: unix:///path), an octal string. Default "0600":
	// only spoold's user connects.
	SocketMode string `yaml:"socket_mode"`
	// TokensFile holds bearer tokens, one a line: "<token> <name> <role>"
	// (the token may be written "sha256:<hex>"). Read again when it
	// changes (checked at most once a second).
	TokensFile string `yaml:"tokens_file"`
	// TLS makes the admin listener serve TLS, and with ClientCAFile
	// authenticate callers by their client certificate.
	TLS AdminTLSConfig `yaml:"tls"`
	// Clients map client certificate identities (the subject's common
	// name, a DNS or URI SAN) to a role.
	Clients []AdminClient `yaml:"clients"`
	// InsecureNoAuth lets the admin listener bind a non-loopback address
	// with no authentication at all. For a development machine only.
	InsecureNoAuth bool `yaml:"insecure_no_auth"`
	// ReadHeaderTimeout bounds how long a connection to the admin or probe
	// listener may take to send a request's headers (half-open or slow
	// connections are closed past it). Default 5s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes keep-alive connections idle this long. Default 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's headers (HTTP/1 request line and
	// headers, HTTP/2 header list). Default 16384.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
}

// AdminTLSConfig names the admin listener's PEM files. Read at start:
// a new certificate needs a restart.
type AdminTLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile: client certificates must chain to one of these CAs.
	// Without TokensFile every caller must present one.
	ClientCAFile string `yaml:"client_ca_file"`
}

// AdminClient gives a client certificate identity a role.
type AdminClient struct {
	// Identity is matched, exactly, against the certificate's subject
	// common name, DNS SANs and URI SANs (spiffe://...).
	Identity string `yaml:"identity"`
	Role     string `yaml:"role"`
}

// Admin roles, lowest first (docs/security.md lists what each may call).
const (
	RoleRead    = "read"
	RoleOperate = "operate"
)

// Admin defaults and bounds.
const (
	DefaultAdminSocketMode        = "0600"
	DefaultAdminReadHeaderTimeout = 5 * time.Second
	DefaultAdminIdleTimeout       = 2 * time.Minute
	DefaultAdminMaxHeaderBytes    = 16 << 10
	MaxAdminClients               = 1000
	MaxAdminIdentityBytes         = 1024
)

// AuthConfigured reports whether admin callers must authenticate.
func (a AdminConfig) AuthConfigured() bool {
	return a.TokensFile != "" || a.TLS.ClientCAFile != ""
}

// SocketFileMode is SocketMode parsed (Validate has checked it).
func (a AdminConfig) SocketFileMode() uint32 {
	m, _ := strconv.ParseUint(a.SocketMode, 8, 32)
	return uint32(m)
}

func (a *AdminConfig) applyDefaults() {
	setString(&a.SocketMode, DefaultAdminSocketMode)
	setDur(&a.ReadHeaderTimeout, DefaultAdminReadHeaderTimeout)
	setDur(&a.IdleTimeout, DefaultAdminIdleTimeout)
	if a.MaxHeaderBytes == 0 {
		a.MaxHeaderBytes = DefaultAdminMaxHeaderBytes
	}
}

// LoopbackOrUnix reports whether addr is reachable only from this host:
// a Unix socket, or TCP on a loopback IP or "localhost". An empty host or
// a wildcard (":7071", "0.0.0.0:7071") listens on every interface.
func LoopbackOrUnix(addr string) bool {
	if strings.HasPrefix(addr, "unix://") {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var octalMode = regexp.MustCompile(`^0?[0-7]{3}$`)

func (c *Config) validateAdmin(v *validator) {
	a := &c.Admin
	n := &c.Node
	if !octalMode.MatchString(a.SocketMode) {
		v.add("admin.socket_mode", a.SocketMode, `an octal file mode like "0600" or "0660"`)
	} else if a.SocketFileMode()&0o007 != 0 {
		v.add("admin.socket_mode", a.SocketMode, "a mode that gives others no access (like 0600 or 0660): whoever connects to the socket operates spoold")
	}
	tls := a.TLS
	if (tls.CertFile == "") != (tls.KeyFile == "") {
		v.add("admin.tls.cert_file", tls.CertFile, "set together with admin.tls.key_file")
	}
	if tls.ClientCAFile != "" && tls.CertFile == "" {
		v.add("admin.tls.client_ca_file", tls.ClientCAFile, "set with admin.tls.cert_file and key_file (client certificates need a TLS listener)")
	}
	if len(a.Clients) > 0 && tls.ClientCAFile == "" {
		v.add("admin.clients", fmt.Sprint(len(a.Clients)), "empty unless admin.tls.client_ca_file is set")
	}
	if len(a.Clients) > MaxAdminClients {
		v.add("admin.clients", fmt.Sprint(len(a.Clients)), fmt.Sprintf("at most %d entries", MaxAdminClients))
	}
	seen := map[string]bool{}
	for i, cl := range a.Clients {
		if cl.Identity == "" || len(cl.Identity) > MaxAdminIdentityBytes || seen[cl.Identity] {
			v.add(fmt.Sprintf("admin.clients[%d].identity", i), cl.Identity, fmt.Sprintf("1 to %d bytes, unique", MaxAdminIdentityBytes))
		}
		seen[cl.Identity] = true
		v.enum(fmt.Sprintf("admin.clients[%d].role", i), cl.Role, RoleRead, RoleOperate)
	}
	if strings.HasPrefix(n.AdminListen, "unix://") && tls.CertFile != "" {
		v.add("admin.tls.cert_file", tls.CertFile, "empty when node.admin_listen is a Unix socket (its file mode guards it)")
	}
	v.durRange("admin.read_header_timeout", a.ReadHeaderTimeout, 100*time.Millisecond, time.Minute)
	v.durRange("admin.idle_timeout", a.IdleTimeout, time.Second, time.Hour)
	v.intRange("admin.max_header_bytes", int64(a.MaxHeaderBytes), 4096, 1<<20)
	if validListen(n.AdminListen, true) && !LoopbackOrUnix(n.AdminListen) && !a.AuthConfigured() && !a.InsecureNoAuth {
		v.add("node.admin_listen", n.AdminListen, "a loopback address (127.0.0.1:7071) or unix:///path while no admin authentication is set: "+
			"AdminService changes state (topics, offsets, dead letters, nodes) and must not answer the network unauthenticated. "+
			"Kubelet probes and Prometheus use node.probe_listen (like 0.0.0.0:7073); to reach AdminService from other hosts set admin.tokens_file or admin.tls.client_ca_file "+
			"(admin.insecure_no_auth: true skips this check, for development only)")
	}
	if n.ProbeListen != "" {
		switch {
		case !validListen(n.ProbeListen, false):
			v.add("node.probe_listen", n.ProbeListen, allowedTCP+", or empty for none")
		case n.ProbeListen == n.AdminListen && !anyPort(n.ProbeListen):
			v.add("node.probe_listen", n.ProbeListen, "different from node.admin_listen")
		case slicesContains(n.AppListen, n.ProbeListen) && !anyPort(n.ProbeListen):
			v.add("node.probe_listen", n.ProbeListen, "different from every node.app_listen address")
		}
	}
}

func slicesContains(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

// applyAdminEnv reads the admin listeners' SPOOL_* variables.
func (c *Config) applyAdminEnv(get func(string) (string, bool)) {
	if v, ok := get("SPOOL_PROBE_LISTEN"); ok {
		c.Node.ProbeListen = v
	}
	if v, ok := get("SPOOL_ADMIN_TOKENS_FILE"); ok {
		c.Admin.TokensFile = v
	}
}

// bindAdminFlags registers the admin listeners' flags.
func bindAdminFlags(str func(name, usage string, set func(*Config, string))) {
	str("probe-listen", "host:port of /healthz, /readyz, /startupz, gRPC health and /metrics only, for kubelet and Prometheus (node.probe_listen)",
		func(c *Config, v string) { c.Node.ProbeListen = v })
	str("admin-tokens-file", "file of admin bearer tokens, one a line: token name role (admin.tokens_file)",
		func(c *Config, v string) { c.Admin.TokensFile = v })
}
