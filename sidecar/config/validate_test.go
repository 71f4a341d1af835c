package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// valid returns a configuration that validates, to be broken one field at a
// time.
func valid() Config {
	c := Default()
	c.Node.ID = "node-1"
	c.Node.DataDir = "/var/lib/spool"
	c.Topics = []TopicConfig{NewTopic("orders", 8), NewTopic("payments", 0)}
	c.Subscriptions = []SubscriptionConfig{NewSubscription("orders", "email-workers"), NewSubscription("payments", "ledger")}
	return c
}

func fieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

func TestValidConfigs(t *testing.T) {
	for name, c := range map[string]Config{"valid": valid(), "dev": DevConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Subscribing to an undeclared DLQ topic is fine: it is created.
	c := valid()
	c.Subscriptions = append(c.Subscriptions, NewSubscription("orders.dlq.email-workers", "alerts"))
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	// Listen forms that are accepted.
	c = valid()
	c.Node.AppListen = []string{":7070", "[::1]:7070", "localhost:0", "unix:///run/spool/app.sock"}
	c.Apps.TokensFile = "/etc/spool/app-tokens" // :7070 listens beyond loopback
	c.Subscriptions[0].Delivery = DeliveryCallback
	c.Subscriptions[0].AppAddress = "unix:///run/app.sock"
	c.Redis.Addrs = []string{"redis-0:6379", "redis-1:6379"}
	c.Redis.TLS.Enabled = true // beyond loopback
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	// Tracing endpoints that are accepted.
	for _, e := range []string{"127.0.0.1:4317", "otel-collector:4317", "http://collector:4317", "https://collector.example:4317"} {
		c = valid()
		zero := 0.0
		c.Tracing = TracingConfig{OTLPEndpoint: e, SampleRatio: &zero}
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	long := strings.Repeat("x", 201)
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		field   string
		value   string
		allowed string // a substring of Allowed
	}{
		{"node id", func(c *Config) { c.Node.ID = "node 1" }, "node.id", "node 1", "a-z A-Z 0-9"},
		{"data dir missing", func(c *Config) { c.Node.DataDir = "" }, "node.data_dir", "", "unless node.dev is true"},
		{"no app listen", func(c *Config) { c.Node.AppListen = nil }, "node.app_listen", "", "at least one address"},
		{"app listen no port", func(c *Config) { c.Node.AppListen = []string{"localhost"} }, "node.app_listen[0]", "localhost", "host:port"},
		{"app listen bad port", func(c *Config) { c.Node.AppListen = []string{"localhost:http"} }, "node.app_listen[0]", "localhost:http", "host:port"},
		{"app listen port range", func(c *Config) { c.Node.AppListen = []string{":70000"} }, "node.app_listen[0]", ":70000", "host:port"},
		{"app listen relative unix", func(c *Config) { c.Node.AppListen = []string{"unix://app.sock"} }, "node.app_listen[0]", "unix://app.sock", "must be absolute"},
		{"app listen long unix", func(c *Config) { c.Node.AppListen = []string{"unix:///" + strings.Repeat("s", 120)} }, "node.app_listen[0]", "unix:///" + strings.Repeat("s", 120), "at most 107 bytes"},
		{"app listen unix scheme typo", func(c *Config) { c.Node.AppListen = []string{"unix:/run/app.sock"} }, "node.app_listen[0]", "unix:/run/app.sock", "unix:///absolute/path"},
		{"app listen duplicate", func(c *Config) { c.Node.AppListen = []string{"127.0.0.1:7070", "127.0.0.1:7070"} }, "node.app_listen[1]", "127.0.0.1:7070", "unique"},
		{"admin listen relative unix", func(c *Config) { c.Node.AdminListen = "unix://admin.sock" }, "node.admin_listen", "unix://admin.sock", "must be absolute"},
		{"admin exposed without auth", func(c *Config) { c.Node.AdminListen = "0.0.0.0:7071" }, "node.admin_listen", "0.0.0.0:7071", "while no admin authentication is set"},
		{"admin on every interface without auth", func(c *Config) { c.Node.AdminListen = ":7071" }, "node.admin_listen", ":7071", "node.probe_listen"},
		{"admin on a pod IP without auth", func(c *Config) { c.Node.AdminListen = "10.1.2.3:7071" }, "node.admin_listen", "10.1.2.3:7071", "admin.insecure_no_auth"},
		{"admin socket mode open to others", func(c *Config) { c.Admin.SocketMode = "0666" }, "admin.socket_mode", "0666", "gives others no access"},
		{"admin client without ca", func(c *Config) { c.Admin.Clients = []AdminClient{{Identity: "ops", Role: RoleOperate}} }, "admin.clients", "1", "admin.tls.client_ca_file"},
		{"admin read header timeout", func(c *Config) { c.Admin.ReadHeaderTimeout = time.Hour }, "admin.read_header_timeout", "1h0m0s", "between 100ms and 1m0s"},
		{"probe listen unix", func(c *Config) { c.Node.ProbeListen = "unix:///run/probe.sock" }, "node.probe_listen", "unix:///run/probe.sock", "host:port"},
		{"probe listen clash", func(c *Config) { c.Node.ProbeListen = DefaultAdminListen }, "node.probe_listen", DefaultAdminListen, "different from node.admin_listen"},
		{"admin listen clash", func(c *Config) { c.Node.AdminListen = DefaultAppListen }, "node.admin_listen", DefaultAppListen, "different from every node.app_listen"},
		// The app port beyond loopback needs authentication, or the loud opt-out.
		{"app port beyond loopback without auth", func(c *Config) { c.Node.AppListen = []string{"0.0.0.0:7070"} }, "node.app_listen[0]", "0.0.0.0:7070", "apps.tokens_file"},
		{"app port on a host name without auth", func(c *Config) { c.Node.AppListen = []string{"spool.local:7070"} }, "node.app_listen[0]", "spool.local:7070", "apps.allow_insecure_tcp"},
		{"app tls key without cert", func(c *Config) { c.Apps.TLSKeyFile = "/k" }, "apps.tls_key_file", "/k", "both or neither"},
		{"app client CA without cert", func(c *Config) { c.Apps.TLSClientCAFile = "/ca" }, "apps.tls_client_ca_file", "/ca", "only with apps.tls_cert_file"},
		{"app socket mode without owner write", func(c *Config) { c.Apps.SocketMode = "0400" }, "apps.socket_mode", "0400", "owner read and write"},
		{"app socket mode not octal", func(c *Config) { c.Apps.SocketMode = "rw-------" }, "apps.socket_mode", "rw-------", "four octal digits"},
		{"app socket mode too wide", func(c *Config) { c.Apps.SocketMode = "01777" }, "apps.socket_mode", "01777", "four octal digits"},
		{"default identity", func(c *Config) { c.Apps.DefaultIdentity = "a b" }, "apps.default_identity", "a b", "1 to 128 bytes"},
		{"app identity duplicate", func(c *Config) { c.Apps.Identities = []AppIdentityConfig{{Name: "a"}, {Name: "a"}} }, "apps.identities[1].name", "a", "unique"},
		{"app publish scope with a group", func(c *Config) {
			c.Apps.Identities = []AppIdentityConfig{{Name: "a", Publish: &[]string{"orders:mail"}}}
		}, "apps.identities[0].publish[0]", "orders:mail", "a topic name"},
		{"app publish scope star inside", func(c *Config) { c.Apps.Identities = []AppIdentityConfig{{Name: "a", Publish: &[]string{"or*ders"}}} }, "apps.identities[0].publish[0]", "or*ders", "ending in *"},
		{"app subscribe scope", func(c *Config) {
			c.Apps.Identities = []AppIdentityConfig{{Name: "a", Subscribe: &[]string{"orders:mail:x"}}}
		}, "apps.identities[0].subscribe[0]", "orders:mail:x", "topic:group"},
		{"app rate negative", func(c *Config) { c.Apps.PublishRate = -1 }, "apps.publish_rate", "-1", "0 (unlimited)"},
		{"app identity burst negative", func(c *Config) { c.Apps.Identities = []AppIdentityConfig{{Name: "a", PublishBurst: -1}} }, "apps.identities[0].publish_burst", "-1", "between 0"},
		{"drain timeout", func(c *Config) { c.Node.DrainTimeout = -time.Second }, "node.drain_timeout", "-1s", "positive duration"},
		{"memory limit", func(c *Config) { c.Node.MemoryLimit = 1 << 20 }, "node.memory_limit", "1048576", "or -1 for no limit"},
		{"memory limit below the budgets", func(c *Config) { c.Node.MemoryLimit = 64 << 20; c.Delivery.MemoryBytes = 48 << 20 }, "node.memory_limit", "67108864", "at least 2 × publish.memory_bytes + delivery.memory_bytes (83886080)"},
		{"too many reads in flight", func(c *Config) { c.Delivery.ReadsInFlight = 5000 }, "delivery.reads_in_flight", "5000", "1 to 1024 reads"},
		{"ledger write delay too long", func(c *Config) { c.Delivery.LedgerWriteDelay = 2 * time.Second }, "delivery.ledger_write_delay", "2s", "between 1ms and 1s"},
		{"fsync enum", func(c *Config) { c.Storage.Fsync = "sometimes" }, "storage.fsync", "sometimes", "always or interval"},
		{"sync enum", func(c *Config) { c.Storage.Sync = "fs" }, "storage.sync", "fs", "files, filesystem or journal"},
		{"journal with interval", func(c *Config) { c.Storage.Sync = SyncJournal; c.Storage.Fsync = FsyncInterval }, "storage.sync", "journal", "files with storage.fsync interval"},
		{"journal bytes", func(c *Config) { c.Storage.JournalBytes = 1 << 10 }, "storage.journal_bytes", "1024", ""},
		{"sync filesystem with interval", func(c *Config) { c.Storage.Sync = SyncFileSystem; c.Storage.Fsync = FsyncInterval }, "storage.sync", "filesystem", "files with storage.fsync interval"},
		{"fsync interval", func(c *Config) { c.Storage.FsyncInterval = time.Minute }, "storage.fsync_interval", "1m0s", "between 1ms and 10s"},
		{"segment bytes", func(c *Config) { c.Storage.SegmentBytes = 1000 }, "storage.segment_bytes", "1000", "between 1048576 and 1073741824"},
		{"segment below message", func(c *Config) { c.Limits.MaxMessageBytes = 32 << 20; c.Storage.SegmentBytes = 16 << 20 }, "storage.segment_bytes", "16777216", "at least limits.max_message_bytes"},
		{"segment age", func(c *Config) { c.Storage.SegmentAge = time.Second }, "storage.segment_age", "1s", "at least 1m0s"},
		{"index interval", func(c *Config) { c.Storage.IndexIntervalBytes = 1 }, "storage.index_interval_bytes", "1", "between 64 and 1048576"},
		{"max message", func(c *Config) { c.Limits.MaxMessageBytes = 1 << 30 }, "limits.max_message_bytes", "1073741824", "between 1024 and 67108864"},
		{"max key", func(c *Config) { c.Limits.MaxKeyBytes = -1 }, "limits.max_key_bytes", "-1", "between 1 and"},
		{"max headers", func(c *Config) { c.Limits.MaxHeaders = 5000 }, "limits.max_headers", "5000", "between 1 and 1024"},
		{"max header bytes", func(c *Config) { c.Limits.MaxHeaderBytes = 2 << 20 }, "limits.max_header_bytes", "2097152", "between 1 and 1048576"},
		{"max batch", func(c *Config) { c.Limits.MaxBatchMessages = 1_000_000 }, "limits.max_batch_messages", "1000000", "between 1 and 100000"},
		{"max id", func(c *Config) { c.Limits.MaxIDBytes = 4096 }, "limits.max_id_bytes", "4096", "between 1 and 1024"},
		{"topic name chars", func(c *Config) { c.Topics[1].Name = "pay/ments"; c.Subscriptions = c.Subscriptions[:1] }, "topics[1].name", "pay/ments", "a-z A-Z 0-9 . _ -"},
		{"topic name internal", func(c *Config) { c.Topics[1].Name = "__offsets"; c.Subscriptions = c.Subscriptions[:1] }, "topics[1].name", "__offsets", "not starting with __"},
		{"topic name dots", func(c *Config) { c.Topics[1].Name = ".."; c.Subscriptions = c.Subscriptions[:1] }, "topics[1].name", "..", "not . or .."},
		{"topic name long", func(c *Config) { c.Topics[1].Name = long; c.Subscriptions = c.Subscriptions[:1] }, "topics[1].name", long, "1 to 200 bytes"},
		{"topic name empty", func(c *Config) { c.Topics[1].Name = ""; c.Subscriptions = c.Subscriptions[:1] }, "topics[1].name", "", "1 to 200 bytes"},
		{"topic duplicate", func(c *Config) { c.Topics[1].Name = "orders"; c.Subscriptions = c.Subscriptions[:1] }, "topics[1].name", "orders", `unique, ignoring case (topics[0] is "orders")`},
		{"topic duplicate case", func(c *Config) { c.Topics[1].Name = "Orders"; c.Subscriptions = c.Subscriptions[:1] }, "topics[1].name", "Orders", "ignoring case"},
		{"partitions", func(c *Config) { c.Topics[0].Partitions = 2000 }, "topics[0].partitions", "2000", "between 1 and 1024"},
		{"retention", func(c *Config) { c.Topics[0].Retention = -time.Hour }, "topics[0].retention", "-1h0m0s", "0s (forever)"},
		{"retention bytes", func(c *Config) { c.Topics[0].RetentionBytes = -1 }, "topics[0].retention_bytes", "-1", "0 (unlimited)"},
		{"undeclared topic", func(c *Config) { c.Subscriptions[1].Topic = "refunds" }, "subscriptions[1].topic", "refunds", "declared: orders, payments"},
		{"group name", func(c *Config) { c.Subscriptions[0].Group = "email workers" }, "subscriptions[0].group", "email workers", "a-z A-Z 0-9"},
		{"subscription duplicate", func(c *Config) { c.Subscriptions[1] = NewSubscription("orders", "email-workers") }, "subscriptions[1].group", "email-workers", "unique per topic (subscriptions[0]"},
		{"delivery enum", func(c *Config) { c.Subscriptions[0].Delivery = "push" }, "subscriptions[0].delivery", "push", "stream or callback"},
		{"otlp endpoint no port", func(c *Config) { c.Tracing.OTLPEndpoint = "collector" }, "tracing.otlp_endpoint", "collector", "host:port of an OTLP/gRPC collector"},
		{"otlp endpoint scheme", func(c *Config) { c.Tracing.OTLPEndpoint = "grpc://collector:4317" }, "tracing.otlp_endpoint", "grpc://collector:4317", "https://host:port"},
		{"sample ratio", func(c *Config) { r := 1.5; c.Tracing.SampleRatio = &r }, "tracing.sample_ratio", "1.5", "0 to 1"},
		{"callback without address", func(c *Config) { c.Subscriptions[0].Delivery = DeliveryCallback }, "subscriptions[0].app_address", "", "set when delivery is callback"},
		{"callback bad address", func(c *Config) {
			c.Subscriptions[0].Delivery = DeliveryCallback
			c.Subscriptions[0].AppAddress = "http://app:8080"
		}, "subscriptions[0].app_address", "http://app:8080", "host:port"},
		{"stream with address", func(c *Config) { c.Subscriptions[0].AppAddress = "app:8080" }, "subscriptions[0].app_address", "app:8080", "empty unless delivery is callback"},
		{"stream with a token file", func(c *Config) { c.Subscriptions[0].AppTokenFile = "/etc/spool/token" }, "subscriptions[0].app_token_file", "/etc/spool/token", "empty unless delivery is callback"},
		{"max attempts", func(c *Config) { c.Subscriptions[0].MaxAttempts = 0 }, "subscriptions[0].max_attempts", "0", "between 1 and 1000"},
		{"backoff base", func(c *Config) { c.Subscriptions[0].Backoff.Base = -time.Second }, "subscriptions[0].backoff.base", "-1s", "positive duration"},
		{"backoff max below base", func(c *Config) { c.Subscriptions[0].Backoff.Max = 500 * time.Millisecond }, "subscriptions[0].backoff.max", "500ms", "at least backoff.base (1s)"},
		{"backoff multiplier", func(c *Config) { c.Subscriptions[0].Backoff.Multiplier = 0.5 }, "subscriptions[0].backoff.multiplier", "0.5", "between 1 and 100"},
		{"backoff multiplier NaN", func(c *Config) { c.Subscriptions[0].Backoff.Multiplier = math.NaN() }, "subscriptions[0].backoff.multiplier", "NaN", "between 1 and 100"},
		{"visibility timeout", func(c *Config) { c.Subscriptions[0].VisibilityTimeout = 24 * time.Hour }, "subscriptions[0].visibility_timeout", "24h0m0s", "between 1s and 12h0m0s"},
		{"ordering enum", func(c *Config) { c.Subscriptions[0].Ordering = "keyy" }, "subscriptions[0].ordering", "keyy", "key, partition or none"},
		{"max in flight", func(c *Config) { c.Subscriptions[0].MaxInFlight = 200_000 }, "subscriptions[0].max_in_flight", "200000", "between 1 and 100000"},
		{"window below in flight", func(c *Config) { c.Subscriptions[0].WindowMessages = 100 }, "subscriptions[0].window_messages", "100", "between 256 and 1000000"},
		{"max parked keys", func(c *Config) { c.Subscriptions[0].MaxParkedKeys = -5 }, "subscriptions[0].max_parked_keys", "-5", "between 1 and 1000000"},
		{"dlq equals topic", func(c *Config) { c.Subscriptions[0].DeadLetterTopic = "orders" }, "subscriptions[0].dlq_topic", "orders", "different from the subscription's topic"},
		{"dlq bad name", func(c *Config) { c.Subscriptions[0].DeadLetterTopic = "orders dlq" }, "subscriptions[0].dlq_topic", "orders dlq", "a-z A-Z 0-9"},
		{"default dlq too long", func(c *Config) {
			c.Topics[0].Name = strings.Repeat("o", 190)
			c.Subscriptions[0].Topic = c.Topics[0].Name
		}, "subscriptions[0].dlq_topic", strings.Repeat("o", 190) + ".dlq.email-workers", "set dlq_topic"},
		{"dedupe ttl", func(c *Config) { c.Subscriptions[0].DedupeTTL = time.Second }, "subscriptions[0].dedupe_ttl", "1s", "between 1m0s and 8760h0m0s"},
		{"redis policy enum", func(c *Config) { c.Subscriptions[0].RedisUnavailable = "panic" }, "subscriptions[0].redis_unavailable", "panic", "pause or deliver"},
		{"breaker failures", func(c *Config) { c.Subscriptions[0].Breaker.ConsecutiveFailures = -1 }, "subscriptions[0].breaker.consecutive_failures", "-1", "between 1 and 1000000"},
		{"breaker ratio", func(c *Config) { c.Subscriptions[0].Breaker.FailureRatio = 1.5 }, "subscriptions[0].breaker.failure_ratio", "1.5", "above 0 and at most 1"},
		{"breaker min requests", func(c *Config) { c.Subscriptions[0].Breaker.MinRequests = -1 }, "subscriptions[0].breaker.min_requests", "-1", "between 1 and 1000000"},
		{"breaker window", func(c *Config) { c.Subscriptions[0].Breaker.Window = time.Millisecond }, "subscriptions[0].breaker.window", "1ms", "between 100ms and 1h0m0s"},
		{"breaker open timeout", func(c *Config) { c.Subscriptions[0].Breaker.OpenTimeout = 2 * time.Hour }, "subscriptions[0].breaker.open_timeout", "2h0m0s", "between 100ms and 1h0m0s"},
		{"breaker max open timeout", func(c *Config) { c.Subscriptions[0].Breaker.MaxOpenTimeout = time.Second }, "subscriptions[0].breaker.max_open_timeout", "1s", "between breaker.open_timeout (5s) and 24h"},
		{"redis addr", func(c *Config) { c.Redis.Addrs, c.Redis.TLS.Enabled = []string{"redis"}, true }, "redis.addrs[0]", "redis", "host:port"},
		{"redis addr duplicate", func(c *Config) { c.Redis.Addrs, c.Redis.TLS.Enabled = []string{"redis:6379", "redis:6379"}, true }, "redis.addrs[1]", "redis:6379", "unique"},
		{"sentinel without addrs", func(c *Config) { c.Redis.MasterName = "mymaster" }, "redis.addrs", "", "at least one sentinel address"},
		{"password without addrs", func(c *Config) { c.Redis.Password = "secret" }, "redis.addrs", "", "no address means no ledger"},
		{"redis db negative", func(c *Config) { c.Redis.DB = -1 }, "redis.db", "-1", "0 or more"},
		{"redis db in cluster", func(c *Config) {
			c.Redis.Addrs, c.Redis.TLS.Enabled, c.Redis.DB = []string{"a:6379", "b:6379"}, true, 3
		}, "redis.db", "3", "a cluster has only database 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			err := c.Validate()
			fes := fieldErrors(err)
			if len(fes) != 1 {
				t.Fatalf("Validate = %v, want exactly one *FieldError", err)
			}
			fe := fes[0]
			if fe.Field != tc.field || fe.Value != tc.value || !strings.Contains(fe.Allowed, tc.allowed) {
				t.Fatalf("got %#v, want field %q value %q allowed ~%q", fe, tc.field, tc.value, tc.allowed)
			}
			msg := err.Error()
			for _, w := range []string{"config: ", tc.field, `"` + tc.value + `"`, "must be " + fe.Allowed} {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			var as *FieldError
			if !errors.As(err, &as) {
				t.Error("errors.As(*FieldError) failed")
			}
		})
	}
}

func TestValidateReportsEverything(t *testing.T) {
	c := valid()
	c.Node.DataDir = ""
	c.Storage.Fsync = "never"
	c.Subscriptions[0].Ordering = "keyy"
	c.Subscriptions[1].Topic = "nope"
	fes := fieldErrors(c.Validate())
	var fields []string
	for _, fe := range fes {
		fields = append(fields, fe.Field)
	}
	want := "node.data_dir storage.fsync subscriptions[0].ordering subscriptions[1].topic"
	if strings.Join(fields, " ") != want {
		t.Fatalf("fields = %v, want %s", fields, want)
	}
}

func TestFieldErrorText(t *testing.T) {
	e := &FieldError{Field: "subscriptions[0].ordering", Value: "keyy", Allowed: "key, partition or none"}
	if got, want := e.Error(), `config: subscriptions[0].ordering = "keyy": must be key, partition or none`; got != want {
		t.Fatalf("Error() = %s, want %s", got, want)
	}
}

func TestDevConfig(t *testing.T) {
	c := DevConfig()
	if !c.Node.Dev || c.Node.DataDir != "" || c.Storage.Fsync != FsyncInterval || len(c.Redis.Addrs) != 0 {
		t.Errorf("dev node/storage/redis = %+v %+v %+v", c.Node, c.Storage, c.Redis)
	}
	if d, ok := c.Topic("demo"); !ok || d.Partitions != 4 {
		t.Errorf("demo topic = %+v %v", d, ok)
	}
	if _, ok := c.Subscription("demo", "demo-app"); !ok {
		t.Error("no demo/demo-app subscription")
	}
}

// Port 0 means "any free port": two such addresses do not collide.
func TestAnyPortAddressesDoNotCollide(t *testing.T) {
	c := Default()
	c.Node.DataDir = "/var/lib/spool"
	c.Node.AppListen = []string{"127.0.0.1:0", "127.0.0.1:0"}
	c.Node.AdminListen = "127.0.0.1:0"
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

// The departure settings: a bounded leave_timeout, and no leave for a node
// that holds nothing (storage off).
func TestValidateLeaveOnShutdown(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		mutate                func(*Config)
		field, value, allowed string
	}{
		{"leave timeout too long", func(c *Config) { c.Cluster.LeaveTimeout = 2 * time.Hour }, "cluster.leave_timeout", "2h0m0s", "between 1s and 1h"},
		{"bootstrap expect without join", func(c *Config) { c.Cluster.BootstrapExpect = 3 }, "cluster.bootstrap_expect", "3", "0 when cluster.join is empty"},
		{"leave with storage off", func(c *Config) { c.Cluster.Storage = StorageOff; c.Cluster.Join = []string{"peer:7072"} }, "cluster.leave_on_shutdown", "true", "false when cluster.storage is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			c.Cluster.Listen = "127.0.0.1:7072"
			c.Cluster.Insecure = true
			c.Cluster.JoinSecretFile = "/etc/spool/join-secret"
			c.Cluster.LeaveOnShutdown = true
			c.ApplyDefaults()
			if err := c.Validate(); err != nil {
				t.Fatalf("a cluster node leaving on shutdown: %v", err)
			}
			tc.mutate(&c)
			fes := fieldErrors(c.Validate())
			if len(fes) != 1 || fes[0].Field != tc.field || fes[0].Value != tc.value || !strings.Contains(fes[0].Allowed, tc.allowed) {
				t.Fatalf("Validate: %v, want one error on %s = %q allowing ~%q", c.Validate(), tc.field, tc.value, tc.allowed)
			}
		})
	}
}

// jetStream returns a valid configuration on the JetStream backend.
func jetStream() Config {
	c := valid()
	c.Node.DataDir = "" // a broker backend keeps nothing on the sidecar's disk
	c.Storage.Backend = BackendJetStream
	c.Storage.JetStream.URLs = []string{"nats://127.0.0.1:4222", "nats-1:4222", "tls://user:pw@nats-2:4222"}
	c.Guards.InsecurePlaintextRemotes = true // nats-1 in plaintext (TestPlaintextRemotes)
	c.ApplyDefaults()
	return c
}

// kafka returns a valid configuration on the Kafka backend.
func kafka() Config {
	c := valid()
	c.Node.DataDir = ""
	c.Storage.Backend = BackendKafka
	c.Storage.Kafka.Brokers = []string{"127.0.0.1:9092", "kafka-1.kafka:9092"}
	c.Guards.InsecurePlaintextRemotes = true // kafka-1 in plaintext (TestPlaintextRemotes)
	c.ApplyDefaults()
	return c
}

func TestKafkaBackend(t *testing.T) {
	if c := kafka(); c.Validate() != nil {
		t.Fatalf("kafka: %v", c.Validate())
	}
	if c := kafka(); c.Storage.Kafka.PublishTimeout != DefaultProduceTimeout {
		t.Fatalf("publish_timeout default %v, want %v", c.Storage.Kafka.PublishTimeout, DefaultProduceTimeout)
	}
	for _, tc := range []struct {
		name           string
		mutate         func(*Config)
		field, allowed string
	}{
		{"no brokers", func(c *Config) { c.Storage.Kafka.Brokers = nil }, "storage.kafka.brokers", "at least one Kafka broker"},
		{"bad broker", func(c *Config) { c.Storage.Kafka.Brokers = []string{"kafka://x"} }, "storage.kafka.brokers[0]", "host:port"},
		{"bad prefix", func(c *Config) { c.Storage.Kafka.Prefix = "a/b" }, "storage.kafka.prefix", "a-z A-Z 0-9 . _ -"},
		{"replication factor", func(c *Config) { c.Storage.Kafka.ReplicationFactor = 9 }, "storage.kafka.replication_factor", "between 0 and 7"},
		{"publish timeout", func(c *Config) { c.Storage.Kafka.PublishTimeout = time.Hour }, "storage.kafka.publish_timeout", "between 100ms and 5m"},
		{"ca without tls", func(c *Config) { c.Storage.Kafka.TLSCAFile = "/ca.pem" }, "storage.kafka.tls_ca_file", "unless storage.kafka.tls"},
		{"bad sasl", func(c *Config) {
			c.Storage.Kafka.SASLMechanism, c.Storage.Kafka.SASLUsername, c.Storage.Kafka.SASLPasswordFile = "gssapi", "u", "/p"
		}, "storage.kafka.sasl_mechanism", "plain, scram-sha-256 or scram-sha-512"},
		{"sasl without password", func(c *Config) { c.Storage.Kafka.SASLMechanism, c.Storage.Kafka.SASLUsername = "plain", "u" }, "storage.kafka.sasl_password_file", "a file holding the password"},
		{"cluster with kafka", func(c *Config) { c.Cluster.Listen = "127.0.0.1:7072" }, "cluster.listen", "unset with storage.backend kafka"},
		{"sasl plain without tls", func(c *Config) {
			c.Storage.Kafka.SASLMechanism, c.Storage.Kafka.SASLUsername, c.Storage.Kafka.SASLPasswordFile = "plain", "u", "/p"
		}, "storage.kafka.sasl_mechanism", "guards.insecure_kafka_sasl_plain_without_tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafka()
			tc.mutate(&c)
			errs := fieldErrors(c.Validate())
			if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Allowed, tc.allowed) {
				t.Fatalf("errors %v; want one for %s allowing %q", errs, tc.field, tc.allowed)
			}
		})
	}
}

func TestStorageBackend(t *testing.T) {
	if c := jetStream(); c.Validate() != nil {
		t.Fatalf("jetstream: %v", c.Validate())
	}
	for _, tc := range []struct {
		name           string
		mutate         func(*Config)
		field, allowed string
	}{
		{"unknown backend", func(c *Config) { c.Storage.Backend = "rabbitmq" }, "storage.backend", "embedded, jetstream or kafka"},
		{"no urls", func(c *Config) { c.Storage.JetStream.URLs = nil }, "storage.jetstream.urls", "at least one NATS server"},
		{"bad url", func(c *Config) { c.Storage.JetStream.URLs = []string{"http://x"} }, "storage.jetstream.urls[0]", "nats://host:port"},
		{"bad prefix", func(c *Config) { c.Storage.JetStream.Prefix = "a.b" }, "storage.jetstream.prefix", "a-z A-Z 0-9 _ -"},
		{"replicas", func(c *Config) { c.Storage.JetStream.Replicas = 7 }, "storage.jetstream.replicas", "between 1 and 5"},
		{"cluster with a broker", func(c *Config) { c.Cluster.Listen = "127.0.0.1:7072" }, "cluster.listen", "unset with storage.backend jetstream"},
		{"group timeouts still checked", func(c *Config) { c.Cluster.GroupSessionTimeout = time.Second }, "cluster.group_session_timeout", "between 3s and 5m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := jetStream()
			tc.mutate(&c)
			errs := fieldErrors(c.Validate())
			if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Allowed, tc.allowed) {
				t.Fatalf("errors %v; want one for %s allowing %q", errs, tc.field, tc.allowed)
			}
		})
	}
	// The embedded log still needs its data dir.
	c := valid()
	c.Node.DataDir = ""
	if errs := fieldErrors(c.Validate()); len(errs) != 1 || errs[0].Field != "node.data_dir" {
		t.Fatalf("embedded without data_dir: %v", errs)
	}
}

// A cluster node outside dev mode needs mutual TLS between the nodes, or
// the operator's explicit cluster.insecure; a member needs a join secret
// file, or the explicit cluster.insecure_no_join_secret (a storage-off
// node never joins); the file (read at start) must hold a secret of a
// sensible size.
func TestValidateClusterSecurity(t *testing.T) {
	dir := t.TempDir()
	short, good := filepath.Join(dir, "short"), filepath.Join(dir, "good")
	if err := os.WriteFile(short, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		field  string // "" : valid
	}{
		{"no tls", func(c *Config) {}, "cluster.tls"},
		{"storage off without tls", func(c *Config) {
			c.Cluster.Listen, c.Cluster.Storage, c.Cluster.Join = "", StorageOff, []string{"spool-0:7072"}
		}, "cluster.tls"},
		{"insecure", func(c *Config) { c.Cluster.Insecure = true }, ""},
		{"dev", func(c *Config) { c.Node.Dev, c.Cluster.JoinSecretFile = true, "" }, ""},
		{"tls", func(c *Config) {
			c.Cluster.TLS = ClusterTLSConfig{CertFile: "c", KeyFile: "k", CAFile: "ca", PeerURIPrefix: "spiffe://td/spool/"}
		}, ""},
		{"prefix without tls", func(c *Config) { c.Cluster.Insecure = true; c.Cluster.TLS.PeerURIPrefix = "spiffe://td/" }, "cluster.tls.peer_uri_prefix"},
		{"tls without join secret", func(c *Config) {
			c.Cluster.TLS = ClusterTLSConfig{CertFile: "c", KeyFile: "k", CAFile: "ca"}
			c.Cluster.JoinSecretFile = ""
		}, "cluster.join_secret_file"},
		{"insecure without join secret", func(c *Config) { c.Cluster.Insecure, c.Cluster.JoinSecretFile = true, "" }, "cluster.join_secret_file"},
		{"without join secret, the opt-out", func(c *Config) {
			c.Cluster.TLS = ClusterTLSConfig{CertFile: "c", KeyFile: "k", CAFile: "ca"}
			c.Cluster.JoinSecretFile, c.Cluster.InsecureNoJoinSecret = "", true
		}, ""},
		{"storage off without join secret", func(c *Config) {
			c.Cluster.Listen, c.Cluster.Storage, c.Cluster.Join = "", StorageOff, []string{"spool-0:7072"}
			c.Cluster.TLS = ClusterTLSConfig{CertFile: "c", KeyFile: "k", CAFile: "ca"}
			c.Cluster.JoinSecretFile = ""
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			c.Cluster.Listen = "127.0.0.1:7072"
			c.Cluster.JoinSecretFile = good
			tc.mutate(&c)
			c.ApplyDefaults()
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want a refusal of %s", err, tc.field)
			}
		})
	}
	if b, err := ReadJoinSecret(good); err != nil || string(b) != "0123456789abcdef0123" {
		t.Fatalf("ReadJoinSecret = %q, %v", b, err)
	}
	spaced := filepath.Join(dir, "spaced")
	if err := os.WriteFile(spaced, []byte("0123456789 abcdef\x00123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{short, filepath.Join(dir, "none"), spaced} {
		if _, err := ReadJoinSecret(bad); err == nil {
			t.Fatalf("ReadJoinSecret(%s) took it", bad)
		}
	}
}

// TestGuardsKafkaSASLPlain: plain is accepted with TLS or with the
// explicit insecure setting, never silently in clear text.
func TestGuardsKafkaSASLPlain(t *testing.T) {
	c := kafka()
	c.Storage.Kafka.SASLMechanism, c.Storage.Kafka.SASLUsername, c.Storage.Kafka.SASLPasswordFile = "plain", "u", "/p"
	c.Storage.Kafka.TLS = true
	if err := c.Validate(); err != nil {
		t.Fatalf("plain over TLS: %v", err)
	}
	c.Storage.Kafka.TLS = false
	c.Guards.KafkaSASLPlainWithoutTLS = true
	if err := c.Validate(); err != nil {
		t.Fatalf("plain with the insecure setting: %v", err)
	}
	c.Guards.KafkaSASLPlainWithoutTLS = false
	c.Guards.RedisMaxReplyBytes = 10
	errs := fieldErrors(c.Validate())
	if len(errs) != 2 || errs[0].Field != "guards.redis_max_reply_bytes" || errs[1].Field != "storage.kafka.sasl_mechanism" {
		t.Fatalf("errors %v", errs)
	}
}

// TestPlaintextRemotes: addresses beyond loopback reached without TLS are
// listed (credentials left out) and refused at start, the error naming the
// opt-out, unless guards.insecure_plaintext_remotes or node.dev allows them.
func TestPlaintextRemotes(t *testing.T) {
	c := jetStream()
	c.Guards.InsecurePlaintextRemotes = false
	c.Storage.JetStream.URLs = []string{"nats://127.0.0.1:4222", "nats-1:4222", "nats://[::1]:4222", "nats://alice:secret-pw@nats-3:4222", "localhost:4222"}
	c.Redis.Addrs = []string{"127.0.0.1:6379", "redis:6379"}
	var got []string
	for _, r := range c.PlaintextRemotes() {
		got = append(got, r.Peer+" "+r.Field+" "+r.Addr)
	}
	want := []string{"redis redis.addrs[1] redis:6379", "nats storage.jetstream.urls[1] nats-1:4222", "nats storage.jetstream.urls[3] nats-3:4222"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("PlaintextRemotes = %q, want %q", got, want)
	}
	errs := fieldErrors(c.Validate())
	if len(errs) != 3 || errs[0].Field != "redis.addrs[1]" {
		t.Fatalf("by default: %v", errs)
	}
	if msg := errors.Join(c.Validate()).Error(); strings.Contains(msg, "secret-pw") || !strings.Contains(msg, "guards.insecure_plaintext_remotes: true") {
		t.Fatalf("the error quotes a secret or does not name the opt-out: %s", msg)
	}
	c.Guards.InsecurePlaintextRemotes = true
	if err := c.Validate(); err != nil {
		t.Fatalf("with guards.insecure_plaintext_remotes: %v", err)
	}
	c.Guards.InsecurePlaintextRemotes = false
	c.Node.Dev = true
	if err := c.Validate(); err != nil {
		t.Fatalf("with node.dev: %v", err)
	}
	c.Node.Dev = false
	c.Redis.Addrs = []string{"127.0.0.1:6379"}
	c.Storage.JetStream.URLs = []string{"nats://127.0.0.1:4222", "tls://nats-2:4222", "[::1]:4222"}
	if err := c.Validate(); err != nil {
		t.Fatalf("loopback and tls:// only: %v", err)
	}
	// One tls:// URL makes every NATS server TLS (engine/jetstream), so
	// the others are not plaintext.
	c.Storage.JetStream.URLs = []string{"nats://nats-1:4222", "tls://user:pw@nats-2:4222"}
	if r := c.PlaintextRemotes(); len(r) != 0 {
		t.Fatalf("with a tls:// URL: %v", r)
	}
	c.Redis.Addrs = []string{"redis:6379"}
	c.Redis.TLS.Enabled = true
	if err := c.Validate(); err != nil {
		t.Fatalf("redis.tls: %v", err)
	}

	k := kafka()
	k.Guards.InsecurePlaintextRemotes = false
	if errs := fieldErrors(k.Validate()); len(errs) != 1 || errs[0].Field != "storage.kafka.brokers[1]" {
		t.Fatalf("kafka: %v", errs)
	}
	k.Storage.Kafka.TLS = true
	if err := k.Validate(); err != nil {
		t.Fatalf("kafka over TLS: %v", err)
	}
}

// TestRequireTLSBeyondLoopbackKept: the earlier setting still reads; true
// is the default, and false, which used to turn the requirement off, is
// refused with the name of the opt-out rather than ignored.
func TestRequireTLSBeyondLoopbackKept(t *testing.T) {
	c, err := Parse([]byte("node: {data_dir: /d}\nredis: {addrs: [127.0.0.1:6379]}\nguards: {require_tls_beyond_loopback: true}\n"))
	if err != nil {
		t.Fatalf("require_tls_beyond_loopback: true: %v", err)
	}
	if c.Guards.InsecurePlaintextRemotes {
		t.Fatal("require_tls_beyond_loopback: true allowed plaintext")
	}
	_, err = Parse([]byte("node: {data_dir: /d}\nredis: {addrs: [127.0.0.1:6379]}\nguards: {require_tls_beyond_loopback: false}\n"))
	errs := fieldErrors(err)
	if len(errs) != 1 || errs[0].Field != "guards.require_tls_beyond_loopback" || !strings.Contains(err.Error(), "guards.insecure_plaintext_remotes: true") {
		t.Fatalf("require_tls_beyond_loopback: false: %v", err)
	}
}

// TestNATSURLErrorRedacted: a malformed URL is quoted without its password.
func TestNATSURLErrorRedacted(t *testing.T) {
	c := jetStream()
	c.Storage.JetStream.URLs = []string{"nats://alice:pw-s3cret@nats-1"}
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "pw-s3cret") || !strings.Contains(err.Error(), "alice:xxxxx@nats-1") {
		t.Fatalf("Validate = %v", err)
	}
}

// TestGuardsKafkaMaxReplyBytes: the Kafka reply bound has a default, a
// range, and holds a message Spool stores.
func TestGuardsKafkaMaxReplyBytes(t *testing.T) {
	c := kafka()
	if err := c.Validate(); err != nil || c.Guards.KafkaMaxReplyBytes != DefaultKafkaMaxReplyBytes {
		t.Fatalf("default: %d, %v; want %d", c.Guards.KafkaMaxReplyBytes, err, DefaultKafkaMaxReplyBytes)
	}
	for _, bad := range []int64{10, 2 << 30} {
		c.Guards.KafkaMaxReplyBytes = bad
		if errs := fieldErrors(c.Validate()); len(errs) != 1 || errs[0].Field != "guards.kafka_max_reply_bytes" {
			t.Errorf("%d: errors %v", bad, errs)
		}
	}
	c.Guards.KafkaMaxReplyBytes = 2 << 20
	c.Limits.MaxMessageBytes = 4 << 20
	if errs := fieldErrors(c.Validate()); len(errs) != 1 || errs[0].Field != "guards.kafka_max_reply_bytes" || !strings.Contains(errs[0].Error(), "limits.max_message_bytes") {
		t.Errorf("a reply bound below a message: %v", errs)
	}
}

// TestGuardsMaxOpenFiles: 0 leaves the budget to the descriptor limit;
// a set value is bounded, and one out of range is refused by name.
func TestGuardsMaxOpenFiles(t *testing.T) {
	for _, n := range []int{0, MinMaxOpenFiles, 100_000, MaxMaxOpenFiles} {
		c := valid()
		c.Guards.MaxOpenFiles = n
		if err := c.Validate(); err != nil {
			t.Errorf("max_open_files %d: %v", n, err)
		}
	}
	for _, n := range []int{-1, MinMaxOpenFiles - 1, MaxMaxOpenFiles + 1} {
		c := valid()
		c.Guards.MaxOpenFiles = n
		if errs := fieldErrors(c.Validate()); len(errs) != 1 || errs[0].Field != "guards.max_open_files" {
			t.Errorf("max_open_files %d: %v", n, errs)
		}
	}
}

// Fault injection is refused outside node.dev and node.fault_injection, so
// that a production configuration cannot turn it on by mistake.
func TestFaultsRefusedOutsideATestInstallation(t *testing.T) {
	base := "node: {data_dir: /d%s}\ntopics: [{name: a}]\nsubscriptions: [{topic: a, group: g, faults: {duplicate: 0.1, lose_ack: 0.05, seed: 7}}]\n"
	_, err := Parse([]byte(fmt.Sprintf(base, "")))
	if err == nil || !strings.Contains(err.Error(), "subscriptions[0].faults") || !strings.Contains(err.Error(), "node.fault_injection") {
		t.Fatalf("faults in a production configuration: err = %v, want a refusal naming subscriptions[0].faults and node.fault_injection", err)
	}
	for _, allow := range []string{", dev: true", ", fault_injection: true"} {
		c, err := Parse([]byte(fmt.Sprintf(base, allow)))
		if err != nil {
			t.Fatalf("faults with%s: %v", allow, err)
		}
		if f := c.Subscriptions[0].Faults; f.Duplicate != 0.1 || f.LoseAck != 0.05 || f.Seed != 7 {
			t.Fatalf("faults with%s = %+v", allow, f)
		}
	}
	_, err = Parse([]byte("node: {data_dir: /d, dev: true}\ntopics: [{name: a}]\nsubscriptions: [{topic: a, group: g, faults: {lose_ack: 0.9}}]\n"))
	if err == nil || !strings.Contains(err.Error(), "subscriptions[0].faults.lose_ack") {
		t.Fatalf("lose_ack 0.9: err = %v, want it refused", err)
	}
}
