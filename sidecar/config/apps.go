package config

// The apps section: who may use the app port, as which identity, for which
// topics and groups, and how fast (docs/configuration.md, "apps";
// docs/security.md, "Apps"). Everything about it lives in this file:
// the type, its defaults and its validation.

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// AppsConfig authenticates the apps that reach the sidecar's app port and
// scopes and paces what each may do.
type AppsConfig struct {
	// SocketMode is the file mode of unix:// app sockets, in octal:
	// connecting needs write permission on the socket, so "0600" (the
	// default) lets only spoold's own user in and "0660" its group too
	// (a pod whose containers share an fsGroup).
	SocketMode string `yaml:"socket_mode"`
	// DefaultIdentity is the identity of a caller that presents no token
	// on a Unix socket or from a loopback address (the app in the pod).
	// Default "local".
	DefaultIdentity string `yaml:"default_identity"`
	// TokensFile maps bearer tokens to identities, one "<token> <identity>"
	// a line (sidecar/authn; read again when it changes). A caller presents
	// its token as gRPC metadata "authorization: Bearer <token>".
	// Required when an app address listens beyond loopback.
	TokensFile string `yaml:"tokens_file"`
	// TLSCertFile and TLSKeyFile are the app port's certificate: app
	// addresses beyond loopback serve TLS with it (Unix sockets and
	// loopback stay plaintext).
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// TLSClientCAFile verifies client certificates on those addresses; a
	// verified certificate names the caller's identity (its first URI
	// SAN, else its first DNS SAN, else its subject's common name).
	TLSClientCAFile string `yaml:"tls_client_ca_file"`
	// AllowInsecureTCP lets spoold start with an app address beyond
	// loopback and no tokens_file: every host that reaches the port acts
	// as default_identity. For development only; spoold logs a warning at
	// every start.
	AllowInsecureTCP bool `yaml:"allow_insecure_tcp"`
	// The default publish rate of every identity (AppRate says what each
	// field means); an entry of Identities may set its own. Zero:
	// unlimited.
	PublishRate       float64 `yaml:"publish_rate"`
	PublishBurst      int64   `yaml:"publish_burst"`
	PublishBytesRate  float64 `yaml:"publish_bytes_rate"`
	PublishBytesBurst int64   `yaml:"publish_bytes_burst"`
	// Identities scope and pace identities one by one. An identity not
	// listed takes the entry named "*" if there is one, else may publish
	// and subscribe to everything (the default: no scopes).
	Identities []AppIdentityConfig `yaml:"identities"`
}

// AppRate is the token buckets of one identity's publishes.
type AppRate struct {
	// PublishRate is messages per second; 0: unlimited.
	PublishRate float64
	// PublishBurst is the bucket's size in messages; 0: PublishRate
	// (at least 1).
	PublishBurst int64
	// PublishBytesRate is key, payload and header bytes per second; 0:
	// unlimited.
	PublishBytesRate float64
	// PublishBytesBurst is the bucket's size in bytes; 0: PublishBytesRate
	// (at least limits.max_message_bytes, so that one largest message
	// always fits).
	PublishBytesBurst int64
}

// AppIdentityConfig is what one identity may do.
type AppIdentityConfig struct {
	// Name is the identity: default_identity, a tokens_file identity, or
	// "*" for every identity not listed.
	Name string `yaml:"name"`
	// Publish lists the topics the identity may publish to: exact names,
	// or a prefix ending in "*". Absent: every topic; empty: none.
	Publish *[]string `yaml:"publish"`
	// Subscribe lists the subscriptions the identity may consume, as
	// "topic" (any group) or "topic:group", either part exact or a prefix
	// ending in "*". Absent: every subscription; empty: none.
	Subscribe *[]string `yaml:"subscribe"`
	// These override apps' default rate for this identity, field by
	// field (0: the default).
	PublishRate       float64 `yaml:"publish_rate"`
	PublishBurst      int64   `yaml:"publish_burst"`
	PublishBytesRate  float64 `yaml:"publish_bytes_rate"`
	PublishBytesBurst int64   `yaml:"publish_bytes_burst"`
}

// DefaultRate is the publish rate of identities without their own.
func (a *AppsConfig) DefaultRate() AppRate {
	return AppRate{a.PublishRate, a.PublishBurst, a.PublishBytesRate, a.PublishBytesBurst}
}

// RateOf is the publish rate of identity entry id: its own fields, the
// default's where they are 0.
func (a *AppsConfig) RateOf(id *AppIdentityConfig) AppRate {
	r := a.DefaultRate()
	if id.PublishRate != 0 {
		r.PublishRate = id.PublishRate
	}
	if id.PublishBurst != 0 {
		r.PublishBurst = id.PublishBurst
	}
	if id.PublishBytesRate != 0 {
		r.PublishBytesRate = id.PublishBytesRate
	}
	if id.PublishBytesBurst != 0 {
		r.PublishBytesBurst = id.PublishBytesBurst
	}
	return r
}

// Defaults and bounds of the apps section.
const (
	DefaultAppSocketMode = "0600"
	DefaultAppIdentity   = "local"
	// AnyAppIdentity names the entry of apps.identities that applies to
	// identities not listed.
	AnyAppIdentity = "*"
	// MaxAppIdentityBytes bounds an identity's name (a metric label).
	MaxAppIdentityBytes = 128
	// MaxAppIdentities bounds apps.identities: identities are metric
	// label values.
	MaxAppIdentities = 1000
	// MaxAppScopes bounds the patterns of one identity's publish or
	// subscribe list: each is tried on every publish request.
	MaxAppScopes = 1000
)

func (a *AppsConfig) applyDefaults() {
	setString(&a.SocketMode, DefaultAppSocketMode)
	setString(&a.DefaultIdentity, DefaultAppIdentity)
}

// SocketFileMode is SocketMode as a number (valid after Validate).
func (a *AppsConfig) SocketFileMode() uint32 {
	m, _ := strconv.ParseUint(a.SocketMode, 8, 32)
	return uint32(m)
}

// ValidAppIdentity reports whether s can name an app identity: 1 to 128
// bytes of a-z A-Z 0-9 . _ - @ : / (room for e-mail-like and SPIFFE-like
// names), printable, so that it is safe in logs and as a metric label.
func ValidAppIdentity(s string) bool {
	if s == "" || len(s) > MaxAppIdentityBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("._-@:/", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// BeyondLoopback reports whether app address a is TCP on an address other
// than loopback: every interface (":7070", "0.0.0.0:7070"), a pod IP, or a
// host name other than localhost (spoold cannot tell where it resolves).
func BeyondLoopback(a string) bool {
	if strings.HasPrefix(a, "unix://") {
		return false
	}
	host, _, err := net.SplitHostPort(a)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

func (c *Config) validateApps(v *validator) {
	a := &c.Apps
	if m, err := strconv.ParseUint(a.SocketMode, 8, 32); err != nil || m > 0o777 || m&0o600 != 0o600 || len(a.SocketMode) != 4 || a.SocketMode[0] != '0' {
		v.add("apps.socket_mode", a.SocketMode, "a file mode of four octal digits that lets the owner read and write, like 0600 (owner only, the default) or 0660 (and the group)")
	}
	if !ValidAppIdentity(a.DefaultIdentity) {
		v.add("apps.default_identity", a.DefaultIdentity, "1 to 128 bytes of a-z A-Z 0-9 . _ - @ : /")
	}
	for i, l := range c.Node.AppListen {
		if validListen(l, true) && BeyondLoopback(l) && a.TokensFile == "" && a.TLSClientCAFile == "" && !a.AllowInsecureTCP {
			v.add(fmt.Sprintf("node.app_listen[%d]", i), l, "a Unix socket or a loopback address unless apps.tokens_file or apps.tls_client_ca_file authenticates the apps: "+
				"any host that reaches this port could publish and consume as "+a.DefaultIdentity+"; set apps.tokens_file (or the apps.tls_* files), "+
				"or apps.allow_insecure_tcp: true for development only")
		}
	}
	if (a.TLSCertFile == "") != (a.TLSKeyFile == "") {
		v.add("apps.tls_key_file", a.TLSKeyFile, "set together with apps.tls_cert_file (both or neither)")
	}
	if a.TLSClientCAFile != "" && a.TLSCertFile == "" {
		v.add("apps.tls_client_ca_file", a.TLSClientCAFile, "set only with apps.tls_cert_file and apps.tls_key_file: client certificates are asked for in a TLS handshake")
	}
	validateAppRate(v, "apps", a.DefaultRate())
	if len(a.Identities) > MaxAppIdentities {
		v.add("apps.identities", strconv.Itoa(len(a.Identities))+" entries", fmt.Sprintf("at most %d entries", MaxAppIdentities))
	}
	seen := map[string]int{}
	for i, id := range a.Identities {
		p := fmt.Sprintf("apps.identities[%d]", i)
		if id.Name != AnyAppIdentity && !ValidAppIdentity(id.Name) {
			v.add(p+".name", id.Name, "* or 1 to 128 bytes of a-z A-Z 0-9 . _ - @ : /")
		}
		if j, dup := seen[id.Name]; dup {
			v.add(p+".name", id.Name, fmt.Sprintf("unique (apps.identities[%d] is the same)", j))
		}
		seen[id.Name] = i
		validateScopes(v, p+".publish", id.Publish, false)
		validateScopes(v, p+".subscribe", id.Subscribe, true)
		validateAppRate(v, p, AppRate{id.PublishRate, id.PublishBurst, id.PublishBytesRate, id.PublishBytesBurst})
	}
}

func validateAppRate(v *validator, p string, r AppRate) {
	const maxRate = 1e9
	if r.PublishRate < 0 || r.PublishRate > maxRate {
		v.add(p+".publish_rate", strconv.FormatFloat(r.PublishRate, 'g', -1, 64), "0 (unlimited) to 1e9 messages per second")
	}
	if r.PublishBytesRate < 0 || r.PublishBytesRate > 1<<40 {
		v.add(p+".publish_bytes_rate", strconv.FormatFloat(r.PublishBytesRate, 'g', -1, 64), "0 (unlimited) to 1099511627776 bytes per second")
	}
	v.intRange(p+".publish_burst", r.PublishBurst, 0, maxRate)
	v.intRange(p+".publish_bytes_burst", r.PublishBytesBurst, 0, 1<<40)
}

// validateScopes checks a publish or subscribe list: each pattern is a
// name, or a prefix of one followed by "*"; a subscribe pattern may add
// ":group" in the same form.
func validateScopes(v *validator, p string, list *[]string, groups bool) {
	if list == nil {
		return
	}
	if len(*list) > MaxAppScopes {
		v.add(p, strconv.Itoa(len(*list))+" patterns", fmt.Sprintf("at most %d patterns", MaxAppScopes))
	}
	allowed := "a topic name, or a prefix of one ending in * (like orders or audit.*)"
	if groups {
		allowed = "topic or topic:group, each a name or a prefix ending in * (like orders, orders:billing or audit.*:*)"
	}
	for i, s := range *list {
		topic, group, hasGroup := strings.Cut(s, ":")
		ok := validPattern(topic) && (!hasGroup || (groups && validPattern(group)))
		if !ok {
			v.add(fmt.Sprintf("%s[%d]", p, i), s, allowed)
		}
	}
}

// validPattern: "*", a name, or a name's prefix followed by "*".
func validPattern(s string) bool {
	name, _ := strings.CutSuffix(s, "*")
	if name == "" {
		return s == "*"
	}
	return len(name) <= MaxNameBytes && ValidNameBytes(name)
}
