package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spool.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const precedenceFile = `
node:
  id: from-file
  data_dir: /file
  app_listen: ["127.0.0.1:1001"]
  admin_listen: 127.0.0.1:1002
  drain_timeout: 11s
storage: {fsync: always}
topics: [{name: orders, partitions: 2}]
subscriptions:
  - {topic: orders, group: mail, delivery: callback}
  - {topic: orders, group: billing, delivery: callback, app_address: "billing:9000"}
redis: {addrs: ["file-redis:6379"], password: file-secret}
guards: {insecure_plaintext_remotes: true}
`

// Each row sets one setting in some of the layers; the highest layer wins.
func TestPrecedence(t *testing.T) {
	type layer struct {
		env  map[string]string
		args []string
	}
	get := map[string]func(*Config) any{
		"data_dir":      func(c *Config) any { return c.Node.DataDir },
		"app_listen":    func(c *Config) any { return c.Node.AppListen },
		"admin_listen":  func(c *Config) any { return c.Node.AdminListen },
		"node_id":       func(c *Config) any { return c.Node.ID },
		"fsync":         func(c *Config) any { return c.Storage.Fsync },
		"redis_addrs":   func(c *Config) any { return c.Redis.Addrs },
		"redis_pass":    func(c *Config) any { return c.Redis.Password },
		"drain_timeout": func(c *Config) any { return c.Node.DrainTimeout },
		"dev":           func(c *Config) any { return c.Node.Dev },
	}
	for _, tc := range []struct {
		name, setting string
		l             layer
		want          any
	}{
		{"file only", "data_dir", layer{}, "/file"},
		{"env over file", "data_dir", layer{env: map[string]string{"SPOOL_DATA_DIR": "/env"}}, "/env"},
		{"flag over env", "data_dir", layer{env: map[string]string{"SPOOL_DATA_DIR": "/env"}, args: []string{"--data-dir=/flag"}}, "/flag"},
		{"empty env is unset", "data_dir", layer{env: map[string]string{"SPOOL_DATA_DIR": ""}}, "/file"},
		{"listen env list", "app_listen", layer{env: map[string]string{"SPOOL_APP_LISTEN": "127.0.0.1:2001, unix:///run/a.sock"}}, []string{"127.0.0.1:2001", "unix:///run/a.sock"}},
		{"listen flags replace then append", "app_listen", layer{env: map[string]string{"SPOOL_APP_LISTEN": "127.0.0.1:2001"},
			args: []string{"--app-listen", "127.0.0.1:3001,127.0.0.1:3002", "--app-listen", "unix:///run/b.sock"}}, []string{"127.0.0.1:3001", "127.0.0.1:3002", "unix:///run/b.sock"}},
		{"admin env", "admin_listen", layer{env: map[string]string{"SPOOL_ADMIN_LISTEN": "127.0.0.2:2002"}}, "127.0.0.2:2002"},
		{"admin flag", "admin_listen", layer{env: map[string]string{"SPOOL_ADMIN_LISTEN": "127.0.0.2:2002"}, args: []string{"--admin-listen=127.0.0.3:3002"}}, "127.0.0.3:3002"},
		{"node id env", "node_id", layer{env: map[string]string{"SPOOL_NODE_ID": "from-env"}}, "from-env"},
		{"node id flag", "node_id", layer{env: map[string]string{"SPOOL_NODE_ID": "from-env"}, args: []string{"--node-id", "from-flag"}}, "from-flag"},
		{"fsync env", "fsync", layer{env: map[string]string{"SPOOL_FSYNC": "interval"}}, FsyncInterval},
		{"fsync flag", "fsync", layer{env: map[string]string{"SPOOL_FSYNC": "interval"}, args: []string{"--fsync=always"}}, FsyncAlways},
		{"redis env", "redis_addrs", layer{env: map[string]string{"SPOOL_REDIS_ADDRS": "a:1,b:2"}}, []string{"a:1", "b:2"}},
		{"redis flag", "redis_addrs", layer{env: map[string]string{"SPOOL_REDIS_ADDRS": "a:1,b:2"}, args: []string{"--redis-addr=c:3"}}, []string{"c:3"}},
		{"redis password env", "redis_pass", layer{env: map[string]string{"SPOOL_REDIS_PASSWORD": "env-secret"}}, "env-secret"},
		{"drain env", "drain_timeout", layer{env: map[string]string{"SPOOL_DRAIN_TIMEOUT": "12s"}}, 12 * time.Second},
		{"drain flag", "drain_timeout", layer{env: map[string]string{"SPOOL_DRAIN_TIMEOUT": "12s"}, args: []string{"--drain-timeout=13s"}}, 13 * time.Second},
		{"dev env", "dev", layer{env: map[string]string{"SPOOL_DEV": "true"}}, true},
		{"dev flag false over env", "dev", layer{env: map[string]string{"SPOOL_DEV": "1"}, args: []string{"--dev=false"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("spoold", flag.ContinueOnError)
			args := append([]string{"--config", writeFile(t, precedenceFile), "--app-address=app:9000"}, tc.l.args...)
			c, err := Resolve(fs, args, envOf(tc.l.env))
			if err != nil {
				t.Fatal(err)
			}
			if got := get[tc.setting](c); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%s = %#v, want %#v", tc.setting, got, tc.want)
			}
		})
	}
}

func TestResolveDeclaringFlags(t *testing.T) {
	fs := flag.NewFlagSet("spoold", flag.ContinueOnError)
	c, err := Resolve(fs, []string{
		"--config", writeFile(t, precedenceFile),
		"--topic", "orders:16", // overrides the file's partitions
		"--topic", "refunds:3", "--topic", "audit",
		"--subscription", "refunds:ledger", "--subscription", "orders:mail", // the file's is kept
		"--app-address", "unix:///run/app.sock",
		"--app-token-file", "/etc/spool/callback-token",
	}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := c.Topic("orders"); o.Partitions != 16 || o.Retention != DefaultRetention {
		t.Errorf("orders = %+v", o)
	}
	if r, _ := c.Topic("refunds"); r.Partitions != 3 || r.Retention != DefaultRetention {
		t.Errorf("refunds = %+v", r)
	}
	if a, _ := c.Topic("audit"); a.Partitions != DefaultPartitions {
		t.Errorf("audit = %+v", a)
	}
	if s, ok := c.Subscription("refunds", "ledger"); !ok || !reflect.DeepEqual(*s, NewSubscription("refunds", "ledger")) {
		t.Errorf("refunds/ledger = %+v %v", s, ok)
	}
	if s, _ := c.Subscription("orders", "mail"); s.Delivery != DeliveryCallback || s.AppAddress != "unix:///run/app.sock" || s.AppTokenFile != "/etc/spool/callback-token" {
		t.Errorf("orders/mail = %+v (want the file's callback with the flag's address)", s)
	}
	if s, _ := c.Subscription("orders", "billing"); s.AppAddress != "billing:9000" {
		t.Errorf("orders/billing app_address = %q, want the file's", s.AppAddress)
	}
	if len(c.Subscriptions) != 3 {
		t.Errorf("subscriptions = %d, want 3", len(c.Subscriptions))
	}
}

func TestResolveBases(t *testing.T) {
	// --dev alone: DevConfig, valid without anything else.
	c, err := Resolve(flag.NewFlagSet("spoold", flag.ContinueOnError), []string{"--dev"}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Subscription("demo", "demo-app"); !ok || !c.Node.Dev || c.Node.DataDir != "" {
		t.Errorf("--dev = %+v", c)
	}
	// SPOOL_DEV picks the same base.
	if c, err := Resolve(flag.NewFlagSet("spoold", flag.ContinueOnError), nil, envOf(map[string]string{"SPOOL_DEV": "true"})); err != nil || len(c.Topics) != 1 {
		t.Errorf("SPOOL_DEV: %v %+v", err, c)
	}
	// Nothing at all: defaults, and data_dir is required.
	_, err = Resolve(flag.NewFlagSet("spoold", flag.ContinueOnError), nil, envOf(nil))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "node.data_dir" {
		t.Errorf("no config = %v, want node.data_dir required", err)
	}
	// Flags alone make a production config.
	c, err = Resolve(flag.NewFlagSet("spoold", flag.ContinueOnError), []string{"--data-dir=/d", "--topic=t:2", "--subscription=t:g"}, envOf(nil))
	if err != nil || c.Node.Dev || len(c.Subscriptions) != 1 {
		t.Errorf("flags only: %v %+v", err, c)
	}
}

func TestResolveErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad topic flag", []string{"--topic", "orders:many"}, nil, "name:partitions"},
		{"bad subscription flag", []string{"--subscription", "orders"}, nil, "topic:group"},
		{"bad drain flag", []string{"--drain-timeout", "30"}, nil, "duration"},
		{"unknown flag", []string{"--data-dri=/x"}, nil, "data-dri"},
		{"positional", []string{"--dev", "extra"}, nil, `unexpected argument "extra"`},
		{"bad env bool", []string{"--dev"}, map[string]string{"SPOOL_DEV": "yes please"}, `config: SPOOL_DEV = "yes please": must be true or false`},
		{"bad env duration", []string{"--dev"}, map[string]string{"SPOOL_DRAIN_TIMEOUT": "30"}, `config: SPOOL_DRAIN_TIMEOUT = "30": must be a duration`},
		{"bad env fsync", []string{"--dev"}, map[string]string{"SPOOL_FSYNC": "never"}, `config: storage.fsync = "never": must be always or interval`},
		{"missing file", []string{"--config", "/nonexistent/spool.yaml"}, nil, "no such file"},
		{"undeclared topic by flag", []string{"--data-dir=/d", "--subscription=nope:g"}, nil, `subscriptions[0].topic = "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("spoold", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			_, err := Resolve(fs, tc.args, envOf(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Resolve = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// BindFlags alone writes into the Config it is bound to.
func TestBindFlags(t *testing.T) {
	c := valid()
	fs := flag.NewFlagSet("spoold", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--data-dir=/flag", "--redis-addr=r:1", "--redis-addr=r:2", "--topic=extra:2"}); err != nil {
		t.Fatal(err)
	}
	if c.Node.DataDir != "/flag" || !reflect.DeepEqual(c.Redis.Addrs, []string{"r:1", "r:2"}) || len(c.Topics) != 3 {
		t.Fatalf("after flags: %+v %+v %d topics", c.Node, c.Redis, len(c.Topics))
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "guards.insecure_plaintext_remotes") {
		t.Fatalf("plaintext Redis beyond loopback: %v", err)
	}
	if err := fs.Parse([]string{"--insecure-plaintext-remotes"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil || !c.Guards.InsecurePlaintextRemotes {
		t.Fatalf("with --insecure-plaintext-remotes: %v", err)
	}
	if err := fs.Parse([]string{"--insecure-plaintext-remotes=false", "--redis-tls-ca-file=/t/ca.crt", "--redis-tls-cert-file=/t/tls.crt", "--redis-tls-key-file=/t/tls.key", "--redis-tls-server-name=redis.svc"}); err != nil {
		t.Fatal(err)
	}
	if want := (RedisTLSConfig{CAFile: "/t/ca.crt", CertFile: "/t/tls.crt", KeyFile: "/t/tls.key", ServerName: "redis.svc"}); c.Redis.TLS != want {
		t.Fatalf("redis.tls from flags: %+v", c.Redis.TLS)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Redis over TLS from flags: %v", err)
	}
}

// cluster.storage is settable without a file, by environment and by flag:
// a storage-off sidecar (an injected pod) needs only its join list.
func TestClusterStorageByEnvAndFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"env", map[string]string{"SPOOL_CLUSTER_STORAGE": "off", "SPOOL_JOIN": "spool-peers.shop.svc:7072"}, []string{"--cluster-insecure"}, StorageOff},
		{"flag", nil, []string{"--cluster-storage", "off", "--join", "spool-peers.shop.svc:7072", "--cluster-insecure"}, StorageOff},
		{"flag over env", map[string]string{"SPOOL_CLUSTER_STORAGE": "off"}, []string{"--cluster-storage=on", "--cluster-listen", "0.0.0.0:7072", "--cluster-advertise", "10.0.0.7:7072", "--cluster-insecure", "--cluster-join-secret-file", "/etc/spool/join-secret"}, StorageOn},
		{"empty env is unset", map[string]string{"SPOOL_CLUSTER_STORAGE": ""}, []string{"--cluster-listen", "127.0.0.1:7072", "--cluster-insecure", "--cluster-insecure-no-join-secret"}, StorageOn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("spoold", flag.ContinueOnError)
			c, err := Resolve(fs, append([]string{"--data-dir", t.TempDir()}, tc.args...), envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.Cluster.Storage != tc.want || !c.Cluster.Enabled() {
				t.Fatalf("cluster.storage %q (clustered: %v), want %q", c.Cluster.Storage, c.Cluster.Enabled(), tc.want)
			}
		})
	}
	fs := flag.NewFlagSet("spoold", flag.ContinueOnError)
	_, err := Resolve(fs, []string{"--data-dir", t.TempDir(), "--cluster-storage", "none", "--cluster-listen", "127.0.0.1:7072", "--cluster-insecure"}, envOf(nil))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "cluster.storage" {
		t.Fatalf("--cluster-storage none: %v, want a FieldError on cluster.storage", err)
	}
}
