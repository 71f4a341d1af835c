package config

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ApplyEnv overrides c with the SPOOL_* environment variables that lookup
// finds (pass os.LookupEnv). An empty value counts as unset, so a blank
// variable in a manifest changes nothing. Lists (SPOOL_APP_LISTEN,
// SPOOL_REDIS_ADDRS) are comma-separated and replace the file's list.
// Malformed values (SPOOL_DEV, SPOOL_DRAIN_TIMEOUT) are reported as
// *FieldError, all at once; c keeps the other overrides.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		return v, ok && v != ""
	}
	var errs []error
	if v, ok := get("SPOOL_DATA_DIR"); ok {
		c.Node.DataDir = v
	}
	if v, ok := get("SPOOL_APP_LISTEN"); ok {
		c.Node.AppListen = splitList(v)
	}
	if v, ok := get("SPOOL_ADMIN_LISTEN"); ok {
		c.Node.AdminListen = v
	}
	c.applyAdminEnv(get)
	if v, ok := get("SPOOL_NODE_ID"); ok {
		c.Node.ID = v
	}
	if v, ok := get("SPOOL_DEV"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, &FieldError{Field: "SPOOL_DEV", Value: v, Allowed: "true or false (also 1/0)"})
		} else {
			c.Node.Dev = b
		}
	}
	if v, ok := get("SPOOL_FSYNC"); ok {
		c.Storage.Fsync = FsyncMode(v) // Validate checks the value
	}
	if v, ok := get("SPOOL_REDIS_ADDRS"); ok {
		c.Redis.Addrs = splitList(v)
	}
	if v, ok := get("SPOOL_CLUSTER_LISTEN"); ok {
		c.Cluster.Listen = v
	}
	if v, ok := get("SPOOL_CLUSTER_ADVERTISE"); ok {
		c.Cluster.Advertise = v
	}
	if v, ok := get("SPOOL_JOIN"); ok {
		c.Cluster.Join = splitList(v)
	}
	if v, ok := get("SPOOL_CLUSTER_STORAGE"); ok {
		c.Cluster.Storage = v // Validate checks the value
	}
	if v, ok := get("SPOOL_OTLP_ENDPOINT"); ok {
		c.Tracing.OTLPEndpoint = v
	}
	if v, ok := get("SPOOL_REDIS_PASSWORD"); ok {
		c.Redis.Password = v
	}
	if v, ok := get("SPOOL_DRAIN_TIMEOUT"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, &FieldError{Field: "SPOOL_DRAIN_TIMEOUT", Value: v, Allowed: "a duration with a unit, like 30s"})
		} else {
			c.Node.DrainTimeout = d
		}
	}
	return errors.Join(errs...)
}

// BindFlags registers spoold's configuration flags on fs. Each flag writes
// into c when fs.Parse meets it, so bind them on a Config that already holds
// the file and the environment, parse, then ApplyDefaults and Validate.
// Resolve does that sequence (and handles --config) for spoold.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	bindFlags(fs, func(op func(*Config)) { op(c) })
}

// Resolve is spoold's whole configuration sequence: it registers --config
// and the flags of BindFlags on fs (the caller may have added its own),
// parses args, then builds defaults < file < environment < flags, fills
// defaults and validates. Without --config, --dev (or SPOOL_DEV) starts from
// DevConfig, anything else from the defaults.
func Resolve(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) (*Config, error) {
	path := fs.String("config", "", "path of the YAML configuration file (docs/configuration.md)")
	var ops []func(*Config)
	bindFlags(fs, func(op func(*Config)) { ops = append(ops, op) })
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("config: unexpected argument %q (spoold takes flags only)", fs.Arg(0))
	}
	var scratch Config // what the flags alone say, to pick the base
	for _, op := range ops {
		op(&scratch)
	}
	dev := scratch.Node.Dev
	if v, ok := lookup("SPOOL_DEV"); ok {
		if b, err := strconv.ParseBool(v); err == nil && b {
			dev = true
		}
	}
	var c *Config
	switch {
	case *path != "":
		var err error
		if c, err = decodeFile(*path); err != nil {
			return nil, err
		}
	case dev:
		d := DevConfig()
		c = &d
	default:
		c = &Config{}
	}
	if err := c.ApplyEnv(lookup); err != nil {
		return nil, err
	}
	for _, op := range ops {
		op(c)
	}
	return finish(c)
}

// bindFlags registers the flags; each Set hands apply an operation on a
// Config (applied at once by BindFlags, recorded by Resolve).
func bindFlags(fs *flag.FlagSet, apply func(func(*Config))) {
	str := func(name, usage string, set func(*Config, string)) {
		fs.Func(name, usage, func(v string) error {
			apply(func(c *Config) { set(c, v) })
			return nil
		})
	}
	// list: the first use replaces the file's list, later uses append.
	list := func(name, usage string, field func(*Config) *[]string) {
		n := 0
		fs.Func(name, usage, func(v string) error {
			first := n == 0
			n++
			items := splitList(v)
			apply(func(c *Config) {
				p := field(c)
				if first {
					*p = nil
				}
				*p = append(*p, items...)
			})
			return nil
		})
	}
	str("data-dir", "directory of the log (node.data_dir)", func(c *Config, v string) { c.Node.DataDir = v })
	list("app-listen", "address where the app reaches the sidecar: host:port or unix:///path; repeatable or comma-separated (node.app_listen)",
		func(c *Config) *[]string { return &c.Node.AppListen })
	str("admin-listen", "host:port or unix:///path of AdminService and pprof; loopback unless admin authentication is set (node.admin_listen)", func(c *Config, v string) { c.Node.AdminListen = v })
	bindAdminFlags(str)
	str("node-id", "name of this node (node.id; default the host name)", func(c *Config, v string) { c.Node.ID = v })
	fs.BoolFunc("dev", "development mode: temporary data dir, in-process ledger, a demo topic when no --config (node.dev)", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("must be true or false")
		}
		apply(func(c *Config) { c.Node.Dev = b })
		return nil
	})
	bindClusterFlags(fs, str, list, apply)
	str("fsync", "always or interval (storage.fsync); interval can lose acknowledged messages on power loss", func(c *Config, v string) { c.Storage.Fsync = FsyncMode(v) })
	str("otlp-endpoint", "host:port of an OTLP/gRPC collector: record spans of publishes and deliveries (tracing.otlp_endpoint)", func(c *Config, v string) { c.Tracing.OTLPEndpoint = v })
	bindRedisTLSFlags(fs, str, apply)
	list("redis-addr", "Redis address host:port of the dedupe ledger; repeatable or comma-separated (redis.addrs)",
		func(c *Config) *[]string { return &c.Redis.Addrs })
	fs.Func("drain-timeout", "graceful shutdown budget, like 30s (node.drain_timeout)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return errors.New("must be a duration with a unit, like 30s")
		}
		apply(func(c *Config) { c.Node.DrainTimeout = d })
		return nil
	})
	str("app-address", "where the app serves HandlerService, for every callback subscription without app_address", func(c *Config, v string) {
		for i := range c.Subscriptions {
			if s := &c.Subscriptions[i]; s.Delivery == DeliveryCallback && s.AppAddress == "" {
				s.AppAddress = v
			}
		}
	})
	str("app-token-file", "file holding the token sent to the app's HandlerService, for every callback subscription without app_token_file", func(c *Config, v string) {
		for i := range c.Subscriptions {
			if s := &c.Subscriptions[i]; s.Delivery == DeliveryCallback && s.AppTokenFile == "" {
				s.AppTokenFile = v
			}
		}
	})
	fs.Func("topic", "declare a topic as name:partitions (or name for 4 partitions); repeatable; overrides the partitions of a declared one", func(v string) error {
		name, parts, hasParts := strings.Cut(v, ":")
		n := 0
		if hasParts {
			var err error
			if n, err = strconv.Atoi(parts); err != nil || n < 1 {
				return errors.New("must be name:partitions, partitions a positive number, like orders:8")
			}
		}
		if name == "" {
			return errors.New("must be name:partitions, like orders:8")
		}
		apply(func(c *Config) {
			if t, ok := c.Topic(name); ok {
				if n > 0 {
					t.Partitions = n
				}
				return
			}
			c.Topics = append(c.Topics, NewTopic(name, n))
		})
		return nil
	})
	fs.Func("subscription", "declare a stream subscription with defaults as topic:group; repeatable; a declared one is kept as is", func(v string) error {
		topic, group, ok := strings.Cut(v, ":")
		if !ok || topic == "" || group == "" {
			return errors.New("must be topic:group, like orders:email-workers")
		}
		apply(func(c *Config) {
			if _, ok := c.Subscription(topic, group); !ok {
				c.Subscriptions = append(c.Subscriptions, NewSubscription(topic, group))
			}
		})
		return nil
	})
}

// bindClusterFlags registers the cluster section's flags.
func bindClusterFlags(fs *flag.FlagSet, str func(name, usage string, set func(*Config, string)),
	list func(name, usage string, field func(*Config) *[]string), apply func(func(*Config))) {
	str("cluster-listen", "host:port where peers reach this node; turns clustering on (cluster.listen)", func(c *Config, v string) { c.Cluster.Listen = v })
	boolFlag(fs, apply, "cluster-insecure", "run the peer port without TLS outside --dev: only where nothing else can reach it (cluster.insecure)",
		func(c *Config, b bool) { c.Cluster.Insecure = b })
	boolFlag(fs, apply, "cluster-insecure-no-join-secret", "let this member run without a join secret outside --dev: any process the peer port accepts may join (cluster.insecure_no_join_secret)",
		func(c *Config, b bool) { c.Cluster.InsecureNoJoinSecret = b })
	str("cluster-join-secret-file", "file holding the secret a node presents to join (cluster.join_secret_file)", func(c *Config, v string) { c.Cluster.JoinSecretFile = v })
	str("cluster-tls-cert-file", "PEM certificate this node presents to its peers (cluster.tls.cert_file)", func(c *Config, v string) { c.Cluster.TLS.CertFile = v })
	str("cluster-tls-key-file", "PEM key of --cluster-tls-cert-file (cluster.tls.key_file)", func(c *Config, v string) { c.Cluster.TLS.KeyFile = v })
	str("cluster-tls-ca-file", "PEM CA the peers' certificates must chain to (cluster.tls.ca_file)", func(c *Config, v string) { c.Cluster.TLS.CAFile = v })
	str("cluster-tls-peer-uri-prefix", "the certificate identities (URI SANs) of the cluster's nodes (cluster.tls.peer_uri_prefix)", func(c *Config, v string) { c.Cluster.TLS.PeerURIPrefix = v })
	str("cluster-advertise", "host:port peers dial, when cluster.listen is a wildcard (cluster.advertise)", func(c *Config, v string) { c.Cluster.Advertise = v })
	list("join", "peer host:port of the cluster to join; repeatable or comma-separated (cluster.join)",
		func(c *Config) *[]string { return &c.Cluster.Join })
	str("cluster-storage", "on (a member holding replicas) or off (a client of the members in --join, holding nothing) (cluster.storage)",
		func(c *Config, v string) { c.Cluster.Storage = v })
}

// boolFlag registers a flag of true or false (a bare --name is true).
func boolFlag(fs *flag.FlagSet, apply func(func(*Config)), name, usage string, set func(*Config, bool)) {
	fs.BoolFunc(name, usage, func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("must be true or false")
		}
		apply(func(c *Config) { set(c, b) })
		return nil
	})
}

// bindRedisTLSFlags registers TLS to Redis and the opt-out from TLS beyond
// loopback: what the injector gives the sidecars it adds.
func bindRedisTLSFlags(fs *flag.FlagSet, str func(name, usage string, set func(*Config, string)), apply func(func(*Config))) {
	str("redis-tls-ca-file", "PEM CAs that sign Redis's certificate; turns TLS to Redis on (redis.tls.ca_file)", func(c *Config, v string) { c.Redis.TLS.CAFile = v })
	str("redis-tls-cert-file", "PEM client certificate presented to Redis (redis.tls.cert_file)", func(c *Config, v string) { c.Redis.TLS.CertFile = v })
	str("redis-tls-key-file", "PEM key of --redis-tls-cert-file (redis.tls.key_file)", func(c *Config, v string) { c.Redis.TLS.KeyFile = v })
	str("redis-tls-server-name", "the name Redis's certificate must hold; turns TLS to Redis on (redis.tls.server_name)", func(c *Config, v string) { c.Redis.TLS.ServerName = v })
	fs.BoolFunc("insecure-plaintext-remotes", "reach Redis and the broker without TLS beyond loopback: only where nothing else can reach them (guards.insecure_plaintext_remotes)", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("must be true or false")
		}
		apply(func(c *Config) { c.Guards.InsecurePlaintextRemotes = b })
		return nil
	})
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
