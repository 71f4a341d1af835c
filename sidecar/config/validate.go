package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spoolmq/spool/internal/limits"
	"github.com/spoolmq/spool/internal/redact"
	"github.com/spoolmq/spool/sidecar/breaker"
)

// The sidecar never allows more partitions than the engine does (a
// compile-time check: a negative constant does not convert to uint).
const _ = uint(limits.MaxPartitions - MaxPartitions)

// FieldError is one problem with one configuration value. Validate and
// ApplyEnv return them joined (errors.Join); find them with errors.As.
type FieldError struct {
	// Field is the path of the value in YAML terms, like
	// "subscriptions[0].ordering", or the environment variable's name.
	Field string
	// Value is the offending value as text.
	Value string
	// Allowed says what would be accepted; it reads after "must be".
	Allowed string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("config: %s = %q: must be %s", e.Field, e.Value, e.Allowed)
}

// Bounds of the ranges Validate enforces.
const (
	// MaxNameBytes is the longest topic, group or subscription name: what
	// the engine allows a topic or group name.
	MaxNameBytes = limits.MaxNameBytes
	// MaxPartitions is the most partitions of a topic the sidecar makes,
	// declared here or created with AdminService.CreateTopic. A product
	// limit, a quarter of what the engine accepts (engine.MaxPartitions,
	// 4096): on one node each partition is a directory of segment files and
	// open files, and in a cluster a raft group on every replica; a topic
	// needing more parallelism is better split. The engine's own internal
	// topics may have more.
	MaxPartitions  = 1024
	MaxMaxAttempts = 1000
	// MaxFaultProbability bounds each of subscriptions[*].faults: a fault
	// that always fires would deliver a message forever. The same bound as
	// deliver.MaxFaultProbability (the delivery machine checks it again).
	MaxFaultProbability = 0.5
	MinVisibility       = time.Second
	MaxVisibility       = 12 * time.Hour
	MaxMaxInFlight      = 100_000
	MaxWindowMessages   = 1_000_000
	MaxMaxParkedKeys    = 1_000_000
	MinSegmentBytes     = 1 << 20
	MaxSegmentBytes     = 1 << 30
	MaxMaxMessageBytes  = 64 << 20
	MaxMaxBatchMessages = 100_000
	MaxMaxHeaders       = 1024
	MaxMaxIDBytes       = 1024
	MaxUnixPathBytes    = 107 // sun_path is 108 bytes on Linux, NUL included
)

type validator struct{ errs []error }

func (v *validator) add(field, value, allowed string) {
	v.errs = append(v.errs, &FieldError{Field: field, Value: value, Allowed: allowed})
}

func (v *validator) intRange(field string, x, lo, hi int64) {
	if x < lo || x > hi {
		v.add(field, strconv.FormatInt(x, 10), fmt.Sprintf("between %d and %d", lo, hi))
	}
}

func (v *validator) durRange(field string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		if hi == math.MaxInt64 {
			v.add(field, d.String(), fmt.Sprintf("at least %v", lo))
			return
		}
		v.add(field, d.String(), fmt.Sprintf("between %v and %v", lo, hi))
	}
}

func (v *validator) enum(field, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	v.add(field, value, orList(allowed))
}

func orList(s []string) string {
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Validate reports every problem at once, joined with errors.Join, each a
// *FieldError. It does not fill defaults: run ApplyDefaults first (Load,
// Parse and Resolve do), or zero fields are reported as out of range.
func (c *Config) Validate() error {
	var v validator
	c.validateNode(&v)
	c.validateStorage(&v)
	c.validateLimits(&v)
	c.validateTopics(&v)
	c.validateSubscriptions(&v)
	c.validateRedis(&v)
	if !c.Storage.Broker() {
		c.validateCluster(&v) // a broker backend refuses the cluster section in validateJetStream
	}
	c.validateTracing(&v)
	c.validateApps(&v)
	c.validateAdmin(&v)
	c.validateGuards(&v)
	if m := c.Delivery.MemoryBytes; m < 0 || m > MaxDeliveryMemoryBytes {
		v.add("delivery.memory_bytes", strconv.FormatInt(m, 10), "1 to 1099511627776 bytes (0 = default, 16777216)")
	}
	if n := c.Delivery.ReadsInFlight; n < 0 || n > MaxDeliveryReadsInFlight {
		v.add("delivery.reads_in_flight", strconv.Itoa(n), "1 to 1024 reads (0 = default, 8)")
	}
	v.durRange("delivery.ledger_write_delay", c.Delivery.LedgerWriteDelay, time.Millisecond, MaxLedgerWriteDelay)
	if m := c.Publish.MemoryBytes; m < 0 || m > MaxDeliveryMemoryBytes {
		v.add("publish.memory_bytes", strconv.FormatInt(m, 10), "1 to 1099511627776 bytes (0 = default, 16777216)")
	}
	switch m := c.Node.MemoryLimit; {
	case m == -1 || m == 0: // none, or the default
	case m < MinMemoryLimit || m > MaxDeliveryMemoryBytes:
		v.add("node.memory_limit", strconv.FormatInt(m, 10), "33554432 to 1099511627776 bytes, or -1 for no limit (0 = default: 117440512, 536870912 on a cluster member holding replicas)")
	case 2*c.Publish.MemoryBytes+c.Delivery.MemoryBytes > m:
		// Publishes are held twice (request and log batch) until on disk.
		v.add("node.memory_limit", strconv.FormatInt(m, 10), fmt.Sprintf(
			"at least 2 × publish.memory_bytes + delivery.memory_bytes (%d): below what the budgets let in, the GC would run all the time; raise node.memory_limit (-1: none) or lower the budgets",
			2*c.Publish.MemoryBytes+c.Delivery.MemoryBytes))
	}
	return errors.Join(v.errs...)
}

const (
	allowedNames  = "1 to 200 bytes of a-z A-Z 0-9 . _ -, not starting with __, not . or .."
	allowedListen = "host:port (like 127.0.0.1:7070 or :7070) or unix:///absolute/path"
	allowedTCP    = "host:port (like 127.0.0.1:7071 or :7071)"
)

func (c *Config) validateNode(v *validator) {
	n := &c.Node
	if !validNodeID(n.ID) {
		v.add("node.id", n.ID, "1 to 253 bytes of a-z A-Z 0-9 . _ - (default: the host name)")
	}
	if n.DataDir == "" && !n.Dev && !c.Storage.Broker() {
		v.add("node.data_dir", n.DataDir, "set (a directory for the log), unless node.dev is true (--dev) or storage.backend is a broker")
	}
	if len(n.AppListen) == 0 {
		v.add("node.app_listen", "", "at least one address: "+allowedListen)
	}
	seen := map[string]int{}
	for i, a := range n.AppListen {
		f := fmt.Sprintf("node.app_listen[%d]", i)
		if !validListen(a, true) {
			v.add(f, a, allowedListen+unixHint(a))
			continue
		}
		if j, dup := seen[a]; dup && !anyPort(a) {
			v.add(f, a, fmt.Sprintf("unique (node.app_listen[%d] is the same)", j))
		}
		seen[a] = i
	}
	if !validListen(n.AdminListen, true) {
		v.add("node.admin_listen", n.AdminListen, allowedListen+unixHint(n.AdminListen))
	} else if _, dup := seen[n.AdminListen]; dup && !anyPort(n.AdminListen) {
		v.add("node.admin_listen", n.AdminListen, "different from every node.app_listen address")
	}
	if n.CommitInterval < 10*time.Millisecond || n.CommitInterval > time.Hour {
		v.add("node.commit_interval", n.CommitInterval.String(), "a duration between 10ms and 1h")
	}
	if n.DrainTimeout <= 0 {
		v.add("node.drain_timeout", n.DrainTimeout.String(), "a positive duration like 30s")
	}
}

func (c *Config) validateStorage(v *validator) {
	s := &c.Storage
	switch s.Backend {
	case BackendEmbedded:
	case BackendJetStream:
		c.validateJetStream(v)
		return // the embedded log's settings are not used
	case BackendKafka:
		c.validateKafka(v)
		return // the embedded log's settings are not used
	default:
		v.add("storage.backend", s.Backend, "embedded, jetstream or kafka (docs/backends.md says which to choose)")
		return
	}
	v.enum("storage.fsync", string(s.Fsync), string(FsyncAlways), string(FsyncInterval))
	v.durRange("storage.fsync_interval", s.FsyncInterval, time.Millisecond, 10*time.Second)
	v.enum("storage.sync", s.Sync, SyncFiles, SyncFileSystem, SyncJournal)
	if s.Sync != SyncFiles && s.Fsync == FsyncInterval {
		v.add("storage.sync", s.Sync, "files with storage.fsync interval ("+s.Sync+" changes how fsync: always rounds sync; with interval there are none)")
	}
	v.intRange("storage.journal_bytes", s.JournalBytes, 1<<20, 1<<30)
	v.intRange("storage.segment_bytes", s.SegmentBytes, MinSegmentBytes, MaxSegmentBytes)
	v.durRange("storage.segment_age", s.SegmentAge, time.Minute, math.MaxInt64)
	v.intRange("storage.index_interval_bytes", s.IndexIntervalBytes, 64, 1<<20)
	// Cross-field checks only between values that are valid on their own,
	// so one mistake yields one error.
	m := int64(c.Limits.MaxMessageBytes)
	if s.SegmentBytes >= MinSegmentBytes && s.SegmentBytes <= MaxSegmentBytes && m <= MaxMaxMessageBytes && m > s.SegmentBytes {
		v.add("storage.segment_bytes", strconv.FormatInt(s.SegmentBytes, 10),
			fmt.Sprintf("at least limits.max_message_bytes (%d), so that a message fits in a segment", c.Limits.MaxMessageBytes))
	}
}

func (c *Config) validateLimits(v *validator) {
	l := &c.Limits
	v.intRange("limits.max_message_bytes", int64(l.MaxMessageBytes), 1024, MaxMaxMessageBytes)
	v.intRange("limits.max_key_bytes", int64(l.MaxKeyBytes), 1, min(int64(l.MaxMessageBytes), 64<<10))
	v.intRange("limits.max_headers", int64(l.MaxHeaders), 1, MaxMaxHeaders)
	v.intRange("limits.max_header_bytes", int64(l.MaxHeaderBytes), 1, max(int64(l.MaxMessageBytes), 1))
	v.intRange("limits.max_batch_messages", int64(l.MaxBatchMessages), 1, MaxMaxBatchMessages)
	v.intRange("limits.max_id_bytes", int64(l.MaxIDBytes), 1, MaxMaxIDBytes)
}

func (c *Config) validateTopics(v *validator) {
	seen := map[string]int{}
	for i := range c.Topics {
		t := &c.Topics[i]
		p := fmt.Sprintf("topics[%d]", i)
		if !validName(t.Name) {
			v.add(p+".name", t.Name, allowedNames)
		} else if j, dup := seen[strings.ToLower(t.Name)]; dup {
			v.add(p+".name", t.Name, fmt.Sprintf("unique, ignoring case (topics[%d] is %q)", j, c.Topics[j].Name))
		} else {
			seen[strings.ToLower(t.Name)] = i
		}
		v.intRange(p+".partitions", int64(t.Partitions), 1, MaxPartitions)
		if t.Retention < 0 {
			v.add(p+".retention", t.Retention.String(), "0s (forever) or a positive duration like 168h")
		}
		if t.RetentionBytes < 0 {
			v.add(p+".retention_bytes", strconv.FormatInt(t.RetentionBytes, 10), "0 (unlimited) or a positive number of bytes")
		}
	}
}

func (c *Config) validateSubscriptions(v *validator) {
	declared := make([]string, 0, len(c.Topics))
	for _, t := range c.Topics {
		declared = append(declared, t.Name)
	}
	// A subscription may read an undeclared DLQ topic: it is created.
	dlqs := map[string]bool{}
	for i := range c.Subscriptions {
		dlqs[c.Subscriptions[i].DLQTopic()] = true
	}
	type key struct{ topic, group string }
	seen := map[key]int{}
	for i := range c.Subscriptions {
		s := &c.Subscriptions[i]
		p := fmt.Sprintf("subscriptions[%d]", i)
		if _, ok := c.Topic(s.Topic); !ok && !dlqs[s.Topic] {
			list := "none"
			if len(declared) > 0 {
				list = strings.Join(declared, ", ")
			}
			v.add(p+".topic", s.Topic, "a topic declared under topics (declared: "+list+") or the dead-letter topic of a subscription")
		}
		if !validName(s.Group) {
			v.add(p+".group", s.Group, allowedNames)
		}
		k := key{s.Topic, s.Group}
		if j, dup := seen[k]; dup {
			v.add(p+".group", s.Group, fmt.Sprintf("unique per topic (subscriptions[%d] is also %s/%s)", j, s.Topic, s.Group))
		} else {
			seen[k] = i
		}
		v.enum(p+".delivery", string(s.Delivery), string(DeliveryStream), string(DeliveryCallback))
		switch {
		case s.Delivery == DeliveryCallback && s.AppAddress == "":
			v.add(p+".app_address", "", "set when delivery is callback: "+allowedListen+" where the app serves HandlerService (or pass --app-address)")
		case s.Delivery == DeliveryCallback && !validListen(s.AppAddress, true):
			v.add(p+".app_address", s.AppAddress, allowedListen+unixHint(s.AppAddress))
		case s.Delivery != DeliveryCallback && s.AppAddress != "":
			v.add(p+".app_address", s.AppAddress, `empty unless delivery is callback (did you mean "delivery: callback"?)`)
		case s.Delivery != DeliveryCallback && s.AppTokenFile != "":
			v.add(p+".app_token_file", s.AppTokenFile, `empty unless delivery is callback: it is sent to the app's HandlerService`)
		}
		v.intRange(p+".max_attempts", int64(s.MaxAttempts), 1, MaxMaxAttempts)
		b := &s.Backoff
		if b.Base <= 0 {
			v.add(p+".backoff.base", b.Base.String(), "a positive duration like 1s")
		}
		if b.Max < b.Base || b.Max <= 0 {
			v.add(p+".backoff.max", b.Max.String(), fmt.Sprintf("a positive duration at least backoff.base (%v)", max(b.Base, 0)))
		}
		if math.IsNaN(b.Multiplier) || math.IsInf(b.Multiplier, 0) || b.Multiplier < 1 || b.Multiplier > 100 {
			v.add(p+".backoff.multiplier", strconv.FormatFloat(b.Multiplier, 'g', -1, 64), "a number between 1 and 100")
		}
		v.durRange(p+".visibility_timeout", s.VisibilityTimeout, MinVisibility, MaxVisibility)
		v.enum(p+".ordering", string(s.Ordering), string(OrderKey), string(OrderPartition), string(OrderNone))
		v.intRange(p+".max_in_flight", int64(s.MaxInFlight), 1, MaxMaxInFlight)
		winLo := int64(1)
		if s.MaxInFlight >= 1 && s.MaxInFlight <= MaxMaxInFlight {
			winLo = int64(s.MaxInFlight) // at least max_in_flight, when that is valid
		}
		v.intRange(p+".window_messages", int64(s.WindowMessages), winLo, MaxWindowMessages)
		v.intRange(p+".max_parked_keys", int64(s.MaxParkedKeys), 1, MaxMaxParkedKeys)
		dlq := s.DLQTopic()
		switch {
		case s.DeadLetterTopic == "" && (!validName(s.Topic) || !validName(s.Group)):
			// reported on the topic or group already
		case !validName(dlq):
			v.add(p+".dlq_topic", dlq, allowedNames+" (the default <topic>.dlq.<group> may be too long: set dlq_topic)")
		case dlq == s.Topic:
			v.add(p+".dlq_topic", dlq, "different from the subscription's topic")
		}
		v.durRange(p+".dedupe_ttl", s.DedupeTTL, time.Minute, 8760*time.Hour)
		v.enum(p+".redis_unavailable", string(s.RedisUnavailable), string(RedisPause), string(RedisDeliver))
		br := &s.Breaker
		v.intRange(p+".breaker.consecutive_failures", int64(br.ConsecutiveFailures), 1, 1_000_000)
		if !(br.FailureRatio > 0 && br.FailureRatio <= 1) {
			v.add(p+".breaker.failure_ratio", strconv.FormatFloat(br.FailureRatio, 'g', -1, 64), "a ratio above 0 and at most 1")
		}
		validateBreakerTrip(v, p, s)
		c.validateFaults(v, p, s)
		v.intRange(p+".breaker.min_requests", int64(br.MinRequests), 1, 1_000_000)
		v.durRange(p+".breaker.window", br.Window, 100*time.Millisecond, time.Hour)
		v.durRange(p+".breaker.open_timeout", br.OpenTimeout, 100*time.Millisecond, time.Hour)
		lo := 100 * time.Millisecond
		if br.OpenTimeout >= lo && br.OpenTimeout <= time.Hour {
			lo = br.OpenTimeout // at least open_timeout, when that is valid
		}
		if br.MaxOpenTimeout < lo || br.MaxOpenTimeout > 24*time.Hour {
			v.add(p+".breaker.max_open_timeout", br.MaxOpenTimeout.String(), fmt.Sprintf("between breaker.open_timeout (%v) and 24h", lo))
		}
	}
}

// validateFaults refuses fault injection outside a development or test
// installation, and probabilities that would deliver a message forever.
func (c *Config) validateFaults(v *validator, p string, s *SubscriptionConfig) {
	f := &s.Faults
	if f.On() && !c.Node.Dev && !c.Node.FaultInjection {
		v.add(p+".faults", "set", "off outside a test installation: set node.dev or node.fault_injection to inject faults (never in production)")
	}
	for _, x := range []struct {
		name string
		v    float64
	}{{"duplicate", f.Duplicate}, {"lose_ack", f.LoseAck}, {"delay", f.Delay}, {"early_lease_expiry", f.EarlyLeaseExpiry}} {
		if !(x.v >= 0 && x.v <= MaxFaultProbability) {
			v.add(p+".faults."+x.name, strconv.FormatFloat(x.v, 'g', -1, 64), fmt.Sprintf("a probability between 0 (off) and %v", MaxFaultProbability))
		}
	}
	v.durRange(p+".faults.delay_max", f.DelayMax, 0, time.Minute)
}

// validateBreakerTrip holds breaker.consecutive_failures below max_attempts
// (breaker.MaxConsecutiveFailures): detecting a downstream outage costs up
// to consecutive_failures-1 counted attempts, and must not bring a message
// to its last attempt (docs/breaker.md, "The guarantee").
func validateBreakerTrip(v *validator, p string, s *SubscriptionConfig) {
	c, m := s.Breaker.ConsecutiveFailures, s.MaxAttempts
	if c < 1 || c > 1_000_000 || m < 1 || m > MaxMaxAttempts {
		return // reported by the range checks
	}
	if hi := breaker.MaxConsecutiveFailures(m); c > hi {
		allowed := fmt.Sprintf("at most %d (below max_attempts, %d, so that detecting a downstream outage cannot use a message's last attempt): lower it or raise max_attempts", hi, m)
		if m == 1 {
			allowed = "1 when max_attempts is 1 (detecting a downstream outage must not dead-letter messages): lower it or raise max_attempts"
		}
		v.add(p+".breaker.consecutive_failures", strconv.Itoa(c), allowed)
	}
}

func (c *Config) validateRedis(v *validator) {
	r := &c.Redis
	seen := map[string]int{}
	for i, a := range r.Addrs {
		f := fmt.Sprintf("redis.addrs[%d]", i)
		if !validListen(a, false) || strings.HasPrefix(a, ":") {
			v.add(f, a, "host:port (like redis:6379)")
			continue
		}
		if j, dup := seen[a]; dup {
			v.add(f, a, fmt.Sprintf("unique (redis.addrs[%d] is the same)", j))
		}
		seen[a] = i
	}
	if r.MasterName != "" && len(r.Addrs) == 0 {
		v.add("redis.addrs", "", "at least one sentinel address when redis.master_name is set")
	}
	if r.DB < 0 {
		v.add("redis.db", strconv.Itoa(r.DB), "0 or more")
	} else if r.DB != 0 && len(r.Addrs) > 1 && r.MasterName == "" {
		v.add("redis.db", strconv.Itoa(r.DB), "0 with a Redis Cluster (several addrs without master_name): a cluster has only database 0")
	}
	if r.MasterName == "" && len(r.Addrs) == 0 && (r.Username != "" || r.Password != "" || r.TLS.On()) {
		// Credentials without a server are almost surely a forgotten address.
		v.add("redis.addrs", "", "set when redis.username, redis.password or redis.tls is (no address means no ledger)")
	}
	r.validateKeyPrefixAndTLS(v)
}

// validateKeyPrefixAndTLS: redis.key_prefix and redis.tls. The prefix's
// rule is ledger.CheckKeyPrefix's (config may not import the ledger):
// bounded (it is sent with every key), no whitespace or control
// characters (they make the ACL rule ambiguous), no braces (Redis Cluster
// takes the first {...} of a key as its hash tag).
func (r *RedisConfig) validateKeyPrefixAndTLS(v *validator) {
	bad := len(r.KeyPrefix) == 0 || len(r.KeyPrefix) > MaxRedisKeyPrefixBytes || !utf8.ValidString(r.KeyPrefix)
	for _, c := range r.KeyPrefix {
		bad = bad || unicode.IsSpace(c) || unicode.IsControl(c) || c == '{' || c == '}'
	}
	if bad {
		v.add("redis.key_prefix", r.KeyPrefix, fmt.Sprintf("1 to %d bytes of UTF-8 without whitespace, control characters or braces", MaxRedisKeyPrefixBytes))
	}
	if (r.TLS.CertFile == "") != (r.TLS.KeyFile == "") {
		f, val := "redis.tls.key_file", r.TLS.KeyFile
		if r.TLS.CertFile == "" {
			f, val = "redis.tls.cert_file", r.TLS.CertFile
		}
		v.add(f, val, "set with redis.tls.cert_file and redis.tls.key_file both (a client certificate and its key), or neither")
	}
}

// validName: topic and group names. They become directory names and
// metric labels, hence the small alphabet.
func validName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameBytes || strings.HasPrefix(s, "__") || s == "." || s == ".." {
		return false
	}
	return ValidNameBytes(s)
}

func validNodeID(s string) bool {
	return len(s) > 0 && len(s) <= 253 && ValidNameBytes(s)
}

// ValidNameBytes reports whether s uses only the bytes allowed in topic,
// group and node names: a-z A-Z 0-9 . _ - (publish checks topic names
// against the same rule, so that a name no config can declare is refused
// as invalid rather than unknown). The rule is internal/limits', the
// engine's too.
func ValidNameBytes(s string) bool { return limits.ValidNameBytes(s) }

// validListen accepts host:port with a numeric port, and unix:///path when
// unix is allowed.
func validListen(a string, unix bool) bool {
	if p, ok := strings.CutPrefix(a, "unix://"); ok {
		return unix && strings.HasPrefix(p, "/") && len(p) > 1 && len(p) <= MaxUnixPathBytes
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || strings.ContainsAny(host, " /") {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

func unixHint(a string) string {
	p, ok := strings.CutPrefix(a, "unix://")
	switch {
	case !ok:
		return ""
	case len(p) > MaxUnixPathBytes:
		return fmt.Sprintf("; a socket path is at most %d bytes", MaxUnixPathBytes)
	case !strings.HasPrefix(p, "/"):
		return "; the path must be absolute: unix:// then /"
	}
	return ""
}

// anyPort reports whether a TCP address asks for any free port (port 0):
// two such addresses do not collide.
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// validateClusterSecurity: mutual TLS between the nodes unless the node
// is a dev one or the operator says the peer port is unreachable to
// others (cluster.insecure); a join secret on every member unless dev or
// cluster.insecure_no_join_secret.
func (c *Config) validateClusterSecurity(v *validator) {
	cl := &c.Cluster
	t := cl.TLS
	switch {
	case (t.CertFile != "" || t.KeyFile != "" || t.CAFile != "") && (t.CertFile == "" || t.KeyFile == "" || t.CAFile == ""):
		v.add("cluster.tls", fmt.Sprintf("cert_file=%q key_file=%q ca_file=%q", t.CertFile, t.KeyFile, t.CAFile), "all three files set (mutual TLS between nodes), or none")
	case t.CertFile == "" && !cl.Insecure && !c.Node.Dev:
		v.add("cluster.tls", "none", "cert_file, key_file and ca_file: a cluster's nodes authenticate each other with mutual TLS (docs/security.md, \"Peers\"); "+
			"set cluster.insecure: true only where nothing else can reach cluster.listen")
	case t.PeerURIPrefix != "" && t.CertFile == "":
		v.add("cluster.tls.peer_uri_prefix", t.PeerURIPrefix, "unset unless cluster.tls names the certificate files")
	}
	// Every member admits joins; one without the secret admits anyone.
	if cl.Storage == StorageOn && cl.JoinSecretFile == "" && !cl.InsecureNoJoinSecret && !c.Node.Dev {
		v.add("cluster.join_secret_file", "none", "a file holding the cluster's join secret, the same on every node (docs/security.md, \"Peers\"); "+
			"set cluster.insecure_no_join_secret: true only where no process but the cluster's nodes can reach cluster.listen with credentials they accept")
	}
}

// Join secrets' sizes.
const (
	MinJoinSecretBytes = 16
	MaxJoinSecretBytes = 1024
)

// ReadJoinSecret reads a join secret file (cluster.join_secret_file, at
// start): 16 to 1024 printable ASCII bytes without spaces (it travels in
// gRPC metadata), one trailing newline ignored.
func ReadJoinSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("a readable file: %v", err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) < MinJoinSecretBytes || len(b) > MaxJoinSecretBytes || bytes.ContainsFunc(b, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return nil, fmt.Errorf("a file of %d to %d printable ASCII bytes without spaces (it has %d bytes): a random secret, like `head -c 32 /dev/urandom | base64`", MinJoinSecretBytes, MaxJoinSecretBytes, len(b))
	}
	return b, nil
}

func (c *Config) validateCluster(v *validator) {
	cl := &c.Cluster
	if !cl.Enabled() {
		if cl.Advertise != "" || len(cl.Join) > 0 || cl.Storage != "" {
			v.add("cluster.listen", "", "set (host:port peers reach this node at) when cluster.advertise, cluster.join or cluster.storage is set, unless cluster.storage is off")
		}
		return
	}
	c.validateClusterSecurity(v) // a storage-off node's too: it reads every topic it serves
	if cl.Storage != StorageOn && cl.Storage != StorageOff {
		v.add("cluster.storage", cl.Storage, "on (a member holding replicas) or off (a client of the cluster's members)")
	}
	if cl.Storage == StorageOff {
		if cl.LeaveOnShutdown {
			v.add("cluster.leave_on_shutdown", "true", "false when cluster.storage is off (such a node holds no replicas: it has nothing to hand over)")
		}
		if len(cl.Join) == 0 {
			v.add("cluster.join", "", "at least one member's host:port when cluster.storage is off (the node learns the cluster from them)")
		}
		for i, j := range cl.Join {
			if !validListen(j, false) || anyPort(j) {
				v.add(fmt.Sprintf("cluster.join[%d]", i), j, allowedTCP)
			}
		}
		return
	}
	if !validListen(cl.Listen, false) {
		v.add("cluster.listen", cl.Listen, allowedTCP)
	}
	if !validListen(cl.Advertise, false) || anyPort(cl.Advertise) || wildcardHost(cl.Advertise) {
		v.add("cluster.advertise", cl.Advertise, "host:port that peers can dial (not a wildcard address, not port 0): set it when cluster.listen is like 0.0.0.0:7072")
	}
	for i, j := range cl.Join {
		if !validListen(j, false) || anyPort(j) {
			v.add(fmt.Sprintf("cluster.join[%d]", i), j, allowedTCP)
		}
	}
	if cl.BootstrapExpect < 0 || cl.BootstrapExpect > 128 {
		v.add("cluster.bootstrap_expect", strconv.Itoa(cl.BootstrapExpect), "0 (off) to 128: the number of nodes that start together")
	} else if cl.BootstrapExpect > 0 && len(cl.Join) == 0 {
		v.add("cluster.bootstrap_expect", strconv.Itoa(cl.BootstrapExpect), "0 when cluster.join is empty (a node with no join list creates the cluster by itself); or list the nodes in cluster.join")
	}
	if cl.ReplicationFactor < 1 || cl.ReplicationFactor > MaxReplicationFactor {
		v.add("cluster.replication_factor", strconv.Itoa(cl.ReplicationFactor), fmt.Sprintf("1 to %d", MaxReplicationFactor))
	}
	if cl.ProduceTimeout <= 0 {
		v.add("cluster.produce_timeout", cl.ProduceTimeout.String(), "a positive duration, like 10s")
	}
	c.validateGroupTimeouts(v)
	if cl.MoveBytesPerSecond < 1<<20 || cl.MoveBytesPerSecond > 10<<30 {
		v.add("cluster.move_bytes_per_second", fmt.Sprint(cl.MoveBytesPerSecond), "between 1048576 (1 MiB/s) and 10737418240 (10 GiB/s) (default 33554432: 32 MiB/s)")
	}
	if cl.ReopenStoppedEvery < 100*time.Millisecond || cl.ReopenStoppedEvery > time.Minute {
		v.add("cluster.reopen_stopped_every", cl.ReopenStoppedEvery.String(), "between 100ms and 1m (default 2s)")
	}
	if cl.Finalize != FinalizeAuto && cl.Finalize != FinalizeManual {
		v.add("cluster.finalize", cl.Finalize, "auto or manual (default auto)")
	}
	if cl.AutoFinalizeAfter < time.Minute || cl.AutoFinalizeAfter > 7*24*time.Hour {
		v.add("cluster.auto_finalize_after", cl.AutoFinalizeAfter.String(), "between 1m and 168h (default 10m)")
	}
	if cl.DeadNodeTimeout < 10*time.Second {
		v.add("cluster.dead_node_timeout", cl.DeadNodeTimeout.String(), "at least 10s (default 5m: longer than a restart or a rolling update, so that they never move data)")
	}
	if cl.LeaveTimeout < time.Second || cl.LeaveTimeout > time.Hour {
		v.add("cluster.leave_timeout", cl.LeaveTimeout.String(), "between 1s and 1h (default 60s; keep node.drain_timeout + cluster.leave_timeout under the pod's terminationGracePeriodSeconds)")
	}
	if c.Storage.Fsync != FsyncAlways {
		v.add("storage.fsync", string(c.Storage.Fsync), "always in a cluster (a replica acknowledges only what is on disk)")
	}
	if c.Node.Dev && c.Node.DataDir == "" {
		v.add("node.data_dir", "", "set in a cluster: a node's identity and replicas must outlive the process")
	}
}

// wildcardHost: an address whose host is empty or a wildcard.
func wildcardHost(a string) bool {
	h, _, err := net.SplitHostPort(a)
	return err != nil || h == "" || h == "0.0.0.0" || h == "::"
}

func (c *Config) validateTracing(v *validator) {
	t := &c.Tracing
	if e := t.OTLPEndpoint; e != "" {
		if u, err := url.Parse(e); strings.Contains(e, "://") && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			v.add("tracing.otlp_endpoint", e, "host:port of an OTLP/gRPC collector (like 127.0.0.1:4317), or http://host:port or https://host:port")
		} else if !strings.Contains(e, "://") {
			if _, _, err := net.SplitHostPort(e); err != nil {
				v.add("tracing.otlp_endpoint", e, "host:port of an OTLP/gRPC collector (like 127.0.0.1:4317), or http://host:port or https://host:port")
			}
		}
	}
	if r := t.SampleRatio; r != nil && !(*r >= 0 && *r <= 1) {
		v.add("tracing.sample_ratio", strconv.FormatFloat(*r, 'g', -1, 64), "0 to 1 (the share of new traces recorded)")
	}
}

// validateJetStream checks the JetStream backend's settings and what does
// not go with a broker backend.
func (c *Config) validateJetStream(v *validator) {
	js := &c.Storage.JetStream
	if len(js.URLs) == 0 {
		v.add("storage.jetstream.urls", "", "at least one NATS server, like nats://127.0.0.1:4222, when storage.backend is jetstream")
	}
	for i, u := range js.URLs {
		if !validNATSURL(u) {
			v.add(fmt.Sprintf("storage.jetstream.urls[%d]", i), redact.URL(u), "nats://host:port, tls://host:port or host:port")
		}
	}
	if !validPrefix(js.Prefix) {
		v.add("storage.jetstream.prefix", js.Prefix, "1 to 32 bytes of a-z A-Z 0-9 _ - (default spool)")
	}
	v.intRange("storage.jetstream.replicas", int64(js.Replicas), 1, 5)
	v.durRange("storage.jetstream.publish_timeout", js.PublishTimeout, 100*time.Millisecond, 5*time.Minute)
	if c.Cluster.Enabled() {
		v.add("cluster.listen", c.Cluster.Listen, "unset with storage.backend jetstream: NATS replicates the messages, and the sidecars of a group share its partitions through NATS (remove the cluster section, keep the group_* timeouts if you set them)")
		return
	}
	c.validateGroupTimeouts(v)
}

// validateKafka checks the Kafka backend's settings and what does not go
// with a broker backend.
func (c *Config) validateKafka(v *validator) {
	k := &c.Storage.Kafka
	if len(k.Brokers) == 0 {
		v.add("storage.kafka.brokers", "", "at least one Kafka broker, like 127.0.0.1:9092, when storage.backend is kafka")
	}
	for i, b := range k.Brokers {
		h, p, err := net.SplitHostPort(b)
		n, perr := strconv.Atoi(p)
		if err != nil || h == "" || strings.Contains(h, "/") || perr != nil || n <= 0 || n >= 1<<16 {
			v.add(fmt.Sprintf("storage.kafka.brokers[%d]", i), b, "host:port")
		}
	}
	if len(k.Prefix) > 100 || !kafkaNameBytes(k.Prefix) {
		v.add("storage.kafka.prefix", k.Prefix, "up to 100 bytes of a-z A-Z 0-9 . _ - (default none)")
	}
	v.intRange("storage.kafka.replication_factor", int64(k.ReplicationFactor), 0, 7)
	v.durRange("storage.kafka.publish_timeout", k.PublishTimeout, 100*time.Millisecond, 5*time.Minute)
	if k.TLSCAFile != "" && !k.TLS {
		v.add("storage.kafka.tls_ca_file", k.TLSCAFile, "unset unless storage.kafka.tls is true")
	}
	if k.SASLMechanism != "" {
		v.enum("storage.kafka.sasl_mechanism", k.SASLMechanism, "plain", "scram-sha-256", "scram-sha-512")
		if k.SASLUsername == "" {
			v.add("storage.kafka.sasl_username", "", "set with storage.kafka.sasl_mechanism")
		}
		if k.SASLPasswordFile == "" {
			v.add("storage.kafka.sasl_password_file", "", "a file holding the password, with storage.kafka.sasl_mechanism")
		}
	} else if k.SASLUsername != "" || k.SASLPasswordFile != "" {
		v.add("storage.kafka.sasl_mechanism", "", "plain, scram-sha-256 or scram-sha-512 when a SASL username or password file is set")
	}
	if c.Cluster.Enabled() {
		v.add("cluster.listen", c.Cluster.Listen, "unset with storage.backend kafka: Kafka replicates the messages (remove the cluster section)")
	}
}

// kafkaNameBytes: the bytes Kafka allows in topic names.
func kafkaNameBytes(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// validateGroupTimeouts checks the consumer-group coordinator's timeouts
// (cluster.group_*), used by a cluster and by a broker backend.
func (c *Config) validateGroupTimeouts(v *validator) {
	cl := &c.Cluster
	if cl.GroupSessionTimeout < 3*time.Second || cl.GroupSessionTimeout > 5*time.Minute {
		v.add("cluster.group_session_timeout", cl.GroupSessionTimeout.String(), "between 3s and 5m (default 10s)")
	}
	if cl.GroupRevokeTimeout < time.Second || cl.GroupRevokeTimeout > 5*time.Minute {
		v.add("cluster.group_revoke_timeout", cl.GroupRevokeTimeout.String(), "between 1s and 5m (default 15s)")
	}
	if cl.GroupDegradeAfter < 10*time.Second || cl.GroupDegradeAfter > 24*time.Hour {
		v.add("cluster.group_degrade_after", cl.GroupDegradeAfter.String(), "between 10s and 24h (default 2m)")
	}
}

// validNATSURL: host:port with an optional nats:// or tls:// scheme.
func validNATSURL(u string) bool {
	for _, scheme := range []string{"nats://", "tls://"} {
		if rest, ok := strings.CutPrefix(u, scheme); ok {
			u = rest
			break
		}
	}
	if i := strings.LastIndexByte(u, '@'); i >= 0 { // user:password@ or token@
		u = u[i+1:]
	}
	h, p, err := net.SplitHostPort(u)
	n, perr := strconv.Atoi(p)
	return err == nil && h != "" && !strings.Contains(h, "/") && perr == nil && n > 0 && n < 1<<16
}

// validPrefix: a name for streams, buckets and a subject token.
func validPrefix(p string) bool {
	if p == "" || len(p) > 32 {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
