// Package injector adds spoold to pods as a native sidecar: the mutating
// admission webhook behind cmd/spool-injector. Inject is the decision, pure
// (a pod and the defaults in, a JSONPatch out); Handler is the HTTP edge
// that decodes an AdmissionReview, calls it and answers; NewServer puts it
// behind the limits and the client certificate check every request passes
// first (server.go).
//
// What it does to a pod annotated spool.dev/inject: "true" is documented in
// docs/kubernetes.md ("The injector"); the annotations it reads are the
// Annotation* constants. It imports no other Spool package (its tests check
// the flags it writes against sidecar/config): spoold's
// configuration is passed as flags and a mounted file, never interpreted
// here.
package injector

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults are what the injector gives every pod, unless an annotation of
// the pod says otherwise. They are read from a YAML file (a ConfigMap
// mounted into the injector's pod): LoadDefaults.
type Defaults struct {
	// Image of spoold. Required.
	Image string `yaml:"image"`
	// ImagePullPolicy of the spoold container: Always, IfNotPresent or
	// Never. Default IfNotPresent.
	ImagePullPolicy string `yaml:"image_pull_policy"`
	// Config names a ConfigMap in the pod's namespace whose key spool.yaml
	// is spoold's configuration file (docs/configuration.md). Empty: spoold
	// runs on its defaults and the flags below (a single node per pod).
	Config string `yaml:"config"`
	// RedisAddrs of the idempotency ledger (--redis-addr).
	RedisAddrs []string `yaml:"redis_addrs"`
	// ClusterJoin lists members of a cluster (host:port, a headless
	// Service's name standing for every pod): each sidecar is a storage-off
	// client of it (--cluster-storage off --join), holding no data, with no
	// config file needed. Empty: no cluster unless Config says so.
	ClusterJoin []string `yaml:"cluster_join"`
	// ClusterTLSSecret names a Secret in the pod's namespace with tls.crt,
	// tls.key and ca.crt: the cluster's peer certificate (the Secret the
	// chart's storage nodes use, <fullname>-peer-tls with cert-manager).
	// Mounted at TLSDir and given to spoold as cluster.tls, in pods that
	// get a cluster join list. One of it and ClusterInsecure is required
	// with ClusterJoin: the members refuse peers without TLS.
	ClusterTLSSecret string `yaml:"cluster_tls_secret"`
	// ClusterJoinSecret names a Secret in the pod's namespace whose key
	// "secret" is the cluster's join secret (cluster.join_secret_file),
	// mounted at JoinSecretDir in pods that get a cluster join list.
	ClusterJoinSecret string `yaml:"cluster_join_secret"`
	// ClusterInsecure gives those pods --cluster-insecure instead of TLS:
	// only for clusters whose peer port nothing else can reach.
	ClusterInsecure bool `yaml:"cluster_insecure"`
	// RedisTLSSecret names a Secret in the pod's namespace with ca.crt
	// (Redis's CA), tls.crt and tls.key (a client certificate), as
	// cert-manager writes them: mounted at RedisTLSDir and given to spoold
	// as redis.tls, in pods that get Redis addresses.
	RedisTLSSecret string `yaml:"redis_tls_secret"`
	// RedisTLSServerName is the name Redis's certificate must hold
	// (redis.tls.server_name); alone, TLS with the system's CAs.
	RedisTLSServerName string `yaml:"redis_tls_server_name"`
	// RedisInsecure gives pods that get Redis addresses
	// --insecure-plaintext-remotes instead of TLS: only for a Redis whose
	// path from the pods nothing else can reach. One of it and TLS is
	// required with a Redis beyond loopback: spoold refuses plaintext.
	RedisInsecure bool `yaml:"redis_insecure"`
	// RedisPasswordSecret names a Secret (name and key) in the pod's
	// namespace given to spoold as SPOOL_REDIS_PASSWORD.
	RedisPasswordSecret SecretKey `yaml:"redis_password_secret"`
	// DrainTimeout is spoold's graceful shutdown budget (--drain-timeout).
	// Default 30s. The pod's terminationGracePeriodSeconds must cover the
	// app's own shutdown plus this: the app stops first.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// Resources of the spoold container, as Kubernetes quantities; empty
	// means none. Defaults from docs/benchmarks.md: requests 250m CPU and
	// 128Mi, limit 512Mi of memory, no CPU limit.
	CPURequest    string `yaml:"cpu_request"`
	MemoryRequest string `yaml:"memory_request"`
	CPULimit      string `yaml:"cpu_limit"`
	MemoryLimit   string `yaml:"memory_limit"`
	// TrustedNamespaces are the namespaces whose pods may also set the
	// annotations that decide where the operator's credentials go: the
	// image, the Redis addresses and the cluster to join. Elsewhere a pod
	// setting one is refused (docs/kubernetes.md, "Who may change what").
	TrustedNamespaces []string `yaml:"trusted_namespaces"`
	// Args are extra spoold flags for every pod (docs/configuration.md,
	// "Precedence"), after the injector's own.
	Args []string `yaml:"args"`
}

// SecretKey names one key of a Secret.
type SecretKey struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

// Fixed layout of an injected pod: the names and paths the app relies on.
const (
	ContainerName  = "spoold"
	SocketVolume   = "spool-socket"
	DataVolume     = "spool-data"
	ConfigVolume   = "spool-config"
	SocketDir      = "/run/spool"
	SocketAddr     = "unix:///run/spool/app.sock"
	DataDir        = "/var/lib/spool"
	ConfigDir      = "/etc/spool"
	TLSVolume      = "spool-tls"
	TLSDir         = "/etc/spool-tls" // tls.crt, tls.key, ca.crt
	JoinVolume     = "spool-join-secret"
	JoinSecretDir  = "/etc/spool-join" // secret
	RedisTLSVolume = "spool-redis-tls"
	RedisTLSDir    = "/etc/spool-redis-tls" // ca.crt, tls.crt, tls.key
	AdminPort      = 7071
	ProbePort      = 7073         // node.probe_listen: probes and /metrics; AdminService stays on 127.0.0.1:7071
	AddrEnv        = "SPOOL_ADDR" // read by every SDK
	configFileName = "spool.yaml"
	// RunAsUser is spoold's user and group in a pod that names none: the
	// image's (deploy/Dockerfile, USER 65532:65532, distroless's nonroot),
	// set as numbers so that the kubelet can check runAsNonRoot.
	RunAsUser = 65532
)

// DefaultDrainTimeout is spoold's own default (node.drain_timeout).
const DefaultDrainTimeout = 30 * time.Second

// LoadDefaults reads and checks the defaults file.
func LoadDefaults(path string) (Defaults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Defaults{}, fmt.Errorf("injector: read the defaults file: %w", err)
	}
	return ParseDefaults(b)
}

// ParseDefaults decodes a defaults file strictly (an unknown field is an
// error), fills what is left out and checks the rest.
func ParseDefaults(b []byte) (Defaults, error) {
	var d Defaults
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil && !errors.Is(err, io.EOF) {
		return Defaults{}, fmt.Errorf("injector: defaults file: %w (fields: docs/kubernetes.md, \"The injector\")", err)
	}
	if err := d.validate(); err != nil {
		return Defaults{}, err
	}
	return d, nil
}

// validate fills defaults and rejects what would make every injected pod
// fail, naming the field and what is allowed.
func (d *Defaults) validate() error {
	if d.ImagePullPolicy == "" {
		d.ImagePullPolicy = "IfNotPresent"
	}
	if d.DrainTimeout == 0 {
		d.DrainTimeout = DefaultDrainTimeout
	}
	var errs []error
	if d.Image == "" {
		errs = append(errs, errors.New("injector: defaults: image is required (the spoold image, e.g. spool/spoold:v1.2.3)"))
	}
	switch d.ImagePullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		errs = append(errs, fmt.Errorf("injector: defaults: image_pull_policy = %q: must be Always, IfNotPresent or Never", d.ImagePullPolicy))
	}
	if d.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("injector: defaults: drain_timeout = %v: must be > 0", d.DrainTimeout))
	}
	for _, q := range []struct{ name, v string }{{"cpu_request", d.CPURequest}, {"memory_request", d.MemoryRequest}, {"cpu_limit", d.CPULimit}, {"memory_limit", d.MemoryLimit}} {
		if q.v == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q.v); err != nil {
			errs = append(errs, fmt.Errorf("injector: defaults: %s = %q: not a Kubernetes quantity (like 250m, 128Mi)", q.name, q.v))
		}
	}
	for _, j := range d.ClusterJoin {
		if err := checkHostPort(j); err != nil {
			errs = append(errs, fmt.Errorf("injector: defaults: cluster_join: %q %v (members of the cluster, like spool-peers.shop.svc:7072)", j, err))
		}
	}
	if d.ClusterTLSSecret != "" && d.ClusterInsecure {
		errs = append(errs, errors.New("injector: defaults: cluster_tls_secret and cluster_insecure: set one (TLS between the cluster's nodes, or none)"))
	} else if len(d.ClusterJoin) > 0 && d.ClusterTLSSecret == "" && !d.ClusterInsecure {
		errs = append(errs, errors.New("injector: defaults: cluster_join needs cluster_tls_secret (a Secret with the cluster's tls.crt, tls.key and ca.crt) or cluster_insecure: true: the members talk to their peers over mutual TLS"))
	}
	if msg := redisSecurity(d.RedisAddrs, *d); msg != "" {
		errs = append(errs, errors.New("injector: defaults: "+msg))
	}
	if (d.RedisPasswordSecret.Name == "") != (d.RedisPasswordSecret.Key == "") {
		errs = append(errs, errors.New("injector: defaults: redis_password_secret needs both name and key"))
	}
	if d.RedisPasswordSecret.Name != "" && len(d.RedisAddrs) == 0 {
		// The flag pins the address over a pod's own config file.
		errs = append(errs, errors.New("injector: defaults: redis_password_secret needs redis_addrs: the password goes only to the injector's own Redis addresses"))
	}
	return errors.Join(errs...)
}

// redisTLS reports whether the defaults give spoold TLS to Redis.
func (d Defaults) redisTLS() bool { return d.RedisTLSSecret != "" || d.RedisTLSServerName != "" }

// redisSecurity says what is wrong with reaching the Redis at addrs with
// the defaults' TLS and opt-out ("" if nothing): both at once, or an
// address beyond loopback with neither (spoold would refuse to start).
func redisSecurity(addrs []string, d Defaults) string {
	if d.redisTLS() && d.RedisInsecure {
		return "redis_tls_secret and redis_insecure: set one (TLS to Redis, or none)"
	}
	if d.redisTLS() || d.RedisInsecure {
		return ""
	}
	for _, a := range addrs {
		if !loopback(a) {
			return fmt.Sprintf("redis_addrs needs redis_tls_secret (a Secret with Redis's ca.crt and a client tls.crt and tls.key; redis_tls_server_name alone for the system's CAs) or redis_insecure: true: spoold refuses to reach Redis in plaintext beyond loopback (%q)", a)
		}
	}
	return ""
}

// loopback reports whether host:port names this host (localhost or a
// loopback IP), as spoold's own check does.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}
