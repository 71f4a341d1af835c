// Package config owns the sidecar's configuration: the Config type, its
// defaults, the YAML file format, the SPOOL_* environment variables, the
// spoold flags, and validation with errors that name the field, the value and
// what is allowed.
//
// Precedence, lowest first: defaults < file < environment < flags. Resolve
// does the whole sequence for spoold; Load and Parse read a file alone.
//
// It is a leaf: it imports only the standard library, the YAML decoder,
// internal/backoff (whose defaults it shares) and internal/limits (the
// engine's topic limits). It must never import the engine, Redis, gRPC or
// Prometheus, so that anything may import it.
//
// docs/configuration.md describes every field for users; keep it in step.
package config

import (
	"go.yaml.in/yaml/v3"

	"os"
	"time"

	"github.com/spoolmq/spool/internal/backoff"
)

// Config is the whole sidecar configuration. The zero value is not usable:
// call ApplyDefaults (or start from Default or DevConfig), then Validate.
type Config struct {
	Node          NodeConfig           `yaml:"node"`
	Storage       StorageConfig        `yaml:"storage"`
	Limits        LimitsConfig         `yaml:"limits"`
	Topics        []TopicConfig        `yaml:"topics"`
	Subscriptions []SubscriptionConfig `yaml:"subscriptions"`
	Redis         RedisConfig          `yaml:"redis"`
	Cluster       ClusterConfig        `yaml:"cluster"`
	Tracing       TracingConfig        `yaml:"tracing"`
	Delivery      DeliveryConfig       `yaml:"delivery"`
	Publish       PublishConfig        `yaml:"publish"`
	Apps          AppsConfig           `yaml:"apps"`
	Admin         AdminConfig          `yaml:"admin"`
	Guards        GuardsConfig         `yaml:"guards"`
}

// PublishConfig bounds what publishing holds in memory, for the whole
// sidecar (docs/configuration.md, "publish").
type PublishConfig struct {
	// MemoryBytes bounds the bytes of publish requests in flight (received,
	// not yet answered), over every stream. A request that does not fit
	// waits, and its stream reads nothing more meanwhile.
	MemoryBytes int64 `yaml:"memory_bytes"`
}

// DeliveryConfig bounds what delivery holds in memory, for the whole
// sidecar (docs/configuration.md, "delivery").
type DeliveryConfig struct {
	// MemoryBytes is the byte budget of delivery: fetched-but-unfinished
	// messages of every partition's window (those at the app included),
	// the windows' rings and dead letters being published, shared evenly
	// by the consumer groups. When full, fetching pauses.
	MemoryBytes int64 `yaml:"memory_bytes"`
	// ReadsInFlight bounds the reads of one consumer group under way at
	// once (at most one per partition), made off the delivery loop where a
	// read is a network round trip: on a broker backend, or a cluster
	// member reading a partition from a peer. On one node's embedded log
	// reads are file reads, made on the loop.
	ReadsInFlight int `yaml:"reads_in_flight"`
	// LedgerWriteDelay is how long a group may gather settlements (acks,
	// releases, dead letters) before it writes them to the Redis ledger in
	// one call; a gathered batch of 256 is written at once.
	LedgerWriteDelay time.Duration `yaml:"ledger_write_delay"`
}

// TracingConfig makes spoold record OpenTelemetry spans of publishes and
// delivery attempts and export them over OTLP/gRPC (docs/protocol.md,
// "Trace context"). Without an endpoint tracing is off (the default): the
// message headers traceparent and tracestate still pass through untouched.
type TracingConfig struct {
	// OTLPEndpoint is the collector: host:port (plaintext gRPC), or
	// http://host:port (plaintext) or https://host:port (TLS).
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of new traces recorded (messages published
	// without a traceparent), 0..1; a message that has one follows its
	// publisher's sampling decision. Default 1 (nil).
	SampleRatio *float64 `yaml:"sample_ratio"`
}

// QuiesceOn is Quiesce with its default (on).
func (c ClusterConfig) QuiesceOn() bool { return c.Quiesce == nil || *c.Quiesce }

// Enabled reports whether spoold exports spans.
func (t TracingConfig) Enabled() bool { return t.OTLPEndpoint != "" }

// Ratio is SampleRatio with its default.
func (t TracingConfig) Ratio() float64 {
	if t.SampleRatio == nil {
		return DefaultTracingSampleRatio
	}
	return *t.SampleRatio
}

// ClusterConfig makes the sidecar a member of a replicated cluster
// (docs/replication.md). Without Listen the sidecar is a single node that
// holds every partition itself.
type ClusterConfig struct {
	// Listen is where peers reach this node (host:port): raft, joins,
	// forwarded publishes. Setting it turns clustering on.
	Listen string `yaml:"listen"`
	// Advertise is the address peers dial; default Listen (set it when
	// Listen is a wildcard like 0.0.0.0:7072: the pod IP and port).
	Advertise string `yaml:"advertise"`
	// Join lists peers of the cluster to join (host:port). Empty: a node
	// with an empty data dir bootstraps a new cluster. Ignored once the
	// node has joined (its data dir remembers its cluster).
	Join []string `yaml:"join"`
	// BootstrapExpect lets nodes started together with the same Join (a
	// Deployment's pods joining through their headless Service) create the
	// cluster: the one with the lowest address does once it sees this many
	// candidates, every other one answering that it is joining too. Set it to the number of pods that
	// start together. Default 0: only a node with an empty Join creates one.
	BootstrapExpect int `yaml:"bootstrap_expect"`
	// ReplicationFactor is the replica count of new topics' partitions.
	// Default 3.
	ReplicationFactor int `yaml:"replication_factor"`
	// ProduceTimeout bounds how long a publish looks for a partition's
	// leader and waits for the commit. Default 10s.
	ProduceTimeout time.Duration `yaml:"produce_timeout"`
	// DeadNodeTimeout is how long a node may be unreachable before the
	// cluster marks it down and re-creates its replicas on other nodes.
	// Default 5m.
	DeadNodeTimeout time.Duration `yaml:"dead_node_timeout"`
	// LeaveOnShutdown makes a SIGTERM a departure for good: after its
	// consumer groups stop, the node hands its leaderships and replicas to
	// other nodes and leaves the cluster (for pods that come back as new
	// nodes: a Deployment with an emptyDir data dir). Default false: a
	// stopped node is expected back with its data (a StatefulSet).
	LeaveOnShutdown bool `yaml:"leave_on_shutdown"`
	// LeaveTimeout bounds that departure; past it the node stops anyway and
	// logs the partitions left with a replica fewer. Default 60s.
	LeaveTimeout time.Duration `yaml:"leave_timeout"`
	// MoveBytesPerSecond paces the copies replica moves make (the log a
	// leader streams to a partition's new replica), per node. Default
	// 32 MiB/s, 1 MiB/s to 10 GiB/s.
	MoveBytesPerSecond int64 `yaml:"move_bytes_per_second"`
	// ReopenStoppedEvery is how often a replica stopped by a full disk is
	// opened again from disk; once space returns it runs and catches up
	// by itself. Default 2s, 100ms to 1m.
	ReopenStoppedEvery time.Duration `yaml:"reopen_stopped_every"`
	// Finalize says who raises the cluster version once every node runs a
	// release that speaks a higher one (docs/upgrading.md): "auto" (the
	// cluster, AutoFinalizeAfter after the last node was upgraded) or
	// "manual" (spool cluster finalize only). Default "auto".
	Finalize string `yaml:"finalize"`
	// AutoFinalizeAfter is how long every node must have spoken the higher
	// version before the cluster finalizes it by itself: the time to see
	// the upgrade work, and to roll a node back, before the previous
	// release is locked out. Default 10m, 1m to 7 days.
	AutoFinalizeAfter time.Duration `yaml:"auto_finalize_after"`
	// Quiesce lets an idle partition's raft group stop ticking and
	// heartbeating on every replica until something happens to it; nodes
	// then exchange one liveness heartbeat per pair instead
	// (docs/replication.md, "Quiet idle groups"). false keeps idle groups
	// ticking on a slow clock. Default true (nil).
	Quiesce *bool `yaml:"quiesce"`
	// TLS is mutual TLS between the nodes: set all three files or none.
	// Required outside node.dev unless Insecure is set (docs/security.md).
	TLS ClusterTLSConfig `yaml:"tls"`
	// Insecure runs the peer port without TLS outside node.dev: anything
	// that reaches it can read the cluster's data and, without a join
	// secret, join it. For networks where nothing else can reach the port.
	// Default false.
	Insecure bool `yaml:"insecure"`
	// JoinSecretFile holds the secret a node must present to join (the
	// same file content on every node; 16 to 1024 bytes, one trailing
	// newline ignored). Read at start. Required of a member outside
	// node.dev unless InsecureNoJoinSecret; a storage-off node never joins.
	JoinSecretFile string `yaml:"join_secret_file"`
	// InsecureNoJoinSecret lets a member (storage on) run without
	// JoinSecretFile outside node.dev: whoever reaches the peer port with
	// credentials the nodes accept (any process, without TLS) may then
	// join and receive replicas. Default false: a member needs the file.
	InsecureNoJoinSecret bool `yaml:"insecure_no_join_secret"`
	// Storage "off" makes a sidecar that holds no replicas and is not a
	// member: it learns the cluster from the nodes in Join and publishes
	// and reads through them (autoscaled stateless pods). Default "on".
	Storage string `yaml:"storage"`
	// GroupSessionTimeout: a sidecar's consumer-group member that the
	// group's coordinator has not heard from for this long (it heartbeats
	// every third of it) loses its partitions to the other members.
	// Default 10s, 3s to 5m.
	GroupSessionTimeout time.Duration `yaml:"group_session_timeout"`
	// GroupRevokeTimeout bounds how long a member may take to hand over a
	// partition it is asked to give up (drain, commit); past it the member
	// is expired. Default 15s, 1s to 5m.
	GroupRevokeTimeout time.Duration `yaml:"group_revoke_timeout"`
	// GroupDegradeAfter: a sidecar whose breakers have held a subscription's
	// deliveries this long tells the group's coordinator, which gives its
	// partitions to sidecars whose breakers are closed (when every sidecar
	// is degraded the flag counts for nothing). Default 2m, 10s to 24h.
	GroupDegradeAfter time.Duration `yaml:"group_degrade_after"`
}

// ClusterTLSConfig names the PEM files of mutual TLS between nodes. They
// are read again when they change, so certificates rotate without a
// restart.
type ClusterTLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
	// PeerURIPrefix names the cluster's nodes' certificate identities (URI
	// SANs): equal to it, or any URI below it when it ends in "/".
	// Default: this node's own certificate's spiffe:// URI SAN (every node
	// shares one identity).
	PeerURIPrefix string `yaml:"peer_uri_prefix"`
}

// Storage modes of a cluster node.
const (
	StorageOn  = "on"
	StorageOff = "off"

	FinalizeAuto   = "auto"
	FinalizeManual = "manual"
)

// Enabled reports whether the sidecar runs in a cluster (as a member, or
// with storage off as a client of one).
func (c ClusterConfig) Enabled() bool { return c.Listen != "" || c.Storage == StorageOff }

// NodeConfig is about this sidecar process.
type NodeConfig struct {
	// ID names this node in the cluster. Default: the host name.
	ID string `yaml:"id"`
	// DataDir holds the log segments. Required unless Dev.
	DataDir string `yaml:"data_dir"`
	// AppListen are the addresses where the app reaches the sidecar: TCP
	// host:port or unix:///absolute/path. Default ["127.0.0.1:7070"].
	AppListen []string `yaml:"app_listen"`
	// AdminListen serves AdminService and pprof (and, for local tools,
	// /metrics and the probes): TCP host:port or unix:///absolute/path.
	// Default "127.0.0.1:7071". Beyond loopback it needs authentication
	// (AdminConfig).
	AdminListen string `yaml:"admin_listen"`
	// ProbeListen serves /healthz, /readyz, /startupz, gRPC health and
	// /metrics, nothing else: the address kubelet and Prometheus reach
	// (the pod IP). TCP host:port. Default "": none.
	ProbeListen string `yaml:"probe_listen"`
	// DrainTimeout is the graceful shutdown budget. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// ReadyRequiresApp: /readyz waits, once, for an app stream on every
	// subscription consumed over a stream (for a pod whose app must be
	// consuming before it takes traffic). Default false. Probe start-up
	// with /startupz: the app starts only after it.
	ReadyRequiresApp bool `yaml:"ready_requires_app"`
	// MemoryLimit is the Go runtime's soft memory limit for spoold, in
	// bytes (runtime/debug.SetMemoryLimit): the GC works harder as the
	// process nears it, so that what the byte budgets (publish.memory_bytes,
	// delivery.memory_bytes) let in does not double into GC headroom.
	// Default DefaultMemoryLimit, DefaultClusterMemoryLimit on a cluster
	// member that holds replicas; -1: none. The GOMEMLIMIT environment
	// variable, when set, wins.
	MemoryLimit int64 `yaml:"memory_limit"`
	// CommitInterval is how often each group's committed offsets are
	// written (and always on shutdown). Default 200ms. Acks newer than the
	// last commit are redelivered if spoold is killed (the ledger then
	// dedupes them).
	CommitInterval time.Duration `yaml:"commit_interval"`
	// Dev: temporary data dir (made by the caller when DataDir is empty),
	// in-process ledger when Redis has no addresses.
	Dev bool `yaml:"dev"`
	// FaultInjection allows subscriptions[*].faults outside Dev: for a
	// test installation only (a named test profile). Default false: a
	// production configuration with faults is refused.
	FaultInjection bool `yaml:"fault_injection"`
}

// FsyncMode says when the log is fsynced.
type FsyncMode string

const (
	// FsyncAlways: nothing is acknowledged before it is fsynced (default).
	FsyncAlways FsyncMode = "always"
	// FsyncInterval: fsync every FsyncInterval; acknowledged messages of the
	// last interval can be lost on power loss (not on a process crash).
	FsyncInterval FsyncMode = "interval"
)

// StorageConfig chooses where messages live (Backend) and configures it:
// the embedded log (the other fields) or a broker (JetStream, Kafka).
type StorageConfig struct {
	// Backend is embedded (default: the sidecar's own log, replicated with
	// its peers by cluster), jetstream (NATS JetStream streams) or kafka
	// (Apache Kafka topics). docs/backends.md says when to choose which.
	Backend            string        `yaml:"backend"`
	Fsync              FsyncMode     `yaml:"fsync"`
	FsyncInterval      time.Duration `yaml:"fsync_interval"`
	SegmentBytes       int64         `yaml:"segment_bytes"`
	SegmentAge         time.Duration `yaml:"segment_age"`
	IndexIntervalBytes int64         `yaml:"index_interval_bytes"`
	// Sync is how an fsync: always round makes its files durable: files
	// (default: one fdatasync per dirty segment file), filesystem (one
	// syncfs of the data dir's file system when two or more are dirty;
	// for a volume of spoold's own) or journal (one fdatasync of the data
	// dir's node journal, the segments synced behind it at checkpoints;
	// docs/storage-format.md, "The node journal").
	Sync string `yaml:"sync"`
	// JournalBytes: with sync journal, a checkpoint syncs the segments and
	// cuts the journal once it passes this size (default 64 MiB).
	JournalBytes int64 `yaml:"journal_bytes"`
	// JetStream configures backend jetstream.
	JetStream JetStreamConfig `yaml:"jetstream"`
	// Kafka configures backend kafka.
	Kafka KafkaConfig `yaml:"kafka"`
}

// storage.sync values.
const (
	SyncFiles      = "files"
	SyncFileSystem = "filesystem"
	SyncJournal    = "journal"

	// DefaultJournalBytes is storage.journal_bytes' default.
	DefaultJournalBytes = 64 << 20
)

// Storage backends.
const (
	BackendEmbedded  = "embedded"
	BackendJetStream = "jetstream"
	BackendKafka     = "kafka"
)

// Broker reports whether messages live in a broker rather than in the
// embedded log.
func (s StorageConfig) Broker() bool { return s.Backend != "" && s.Backend != BackendEmbedded }

// JetStreamConfig is the NATS JetStream backend (docs/backends.md): one
// stream per topic, a subject per partition, positions and consumer
// groups in key-value buckets.
type JetStreamConfig struct {
	// URLs are the NATS servers (nats://host:port or host:port). Required.
	URLs []string `yaml:"urls"`
	// Prefix names what Spool creates in NATS: streams <prefix>_<topic>
	// (dots as underscores), subjects <prefix>.<topic>.<partition>, buckets
	// <prefix>_positions and <prefix>_groups. Default "spool"; set one per
	// Spool installation sharing a NATS account.
	Prefix string `yaml:"prefix"`
	// Replicas is the replica count of the streams and buckets Spool
	// creates (1 on a single NATS server, 3 on a NATS cluster). Default 1.
	Replicas int `yaml:"replicas"`
	// CredsFile, if set, authenticates with a NATS credentials file.
	CredsFile string `yaml:"creds_file"`
	// PublishTimeout bounds the wait for a stream's ack of a publish.
	// Default 10s.
	PublishTimeout time.Duration `yaml:"publish_timeout"`
	// SharedGroups: the sidecars of a consumer group share its partitions
	// through a coordinator kept in NATS (experimental; docs/backends.md).
	// Default false: each sidecar delivers every partition of its groups,
	// so run one sidecar per group.
	SharedGroups bool `yaml:"shared_groups"`
}

// KafkaConfig is the Apache Kafka backend (docs/backends.md): Spool's
// topics are Kafka topics, its groups' positions Kafka committed offsets.
type KafkaConfig struct {
	// Brokers are seed brokers, host:port. Required.
	Brokers []string `yaml:"brokers"`
	// Prefix is put before Spool's topic and group names to name Kafka
	// topics and consumer groups (topic orders is the Kafka topic
	// <prefix>orders). Default none.
	Prefix string `yaml:"prefix"`
	// CreateTopics lets spoold create the Kafka topics it is configured
	// with (and dead-letter topics), and add partitions; off, a missing
	// topic stops spoold with an error saying how to create it.
	CreateTopics bool `yaml:"create_topics"`
	// ReplicationFactor of the topics spoold creates; 0 (default) takes
	// the brokers' default.replication.factor.
	ReplicationFactor int `yaml:"replication_factor"`
	// PublishTimeout bounds a publish from its call to Kafka's ack.
	// Default 10s.
	PublishTimeout time.Duration `yaml:"publish_timeout"`
	// TLS connects to the brokers with TLS; TLSCAFile, if set, is the CA
	// bundle that signs their certificates (default: the system's).
	TLS       bool   `yaml:"tls"`
	TLSCAFile string `yaml:"tls_ca_file"`
	// SASLMechanism authenticates: plain, scram-sha-256 or scram-sha-512,
	// as SASLUsername with the password in SASLPasswordFile.
	SASLMechanism    string `yaml:"sasl_mechanism"`
	SASLUsername     string `yaml:"sasl_username"`
	SASLPasswordFile string `yaml:"sasl_password_file"`
	// SharedGroups: the sidecars of a consumer group share its partitions
	// as members of the Kafka consumer group <prefix><group>
	// (cooperative-sticky; docs/backends.md). Default false: each sidecar
	// delivers every partition of its groups, so run one sidecar per group.
	SharedGroups bool `yaml:"shared_groups"`
}

// LimitsConfig bounds what producers may send. Each limit is checked at
// Publish and rejected with InvalidArgument naming the limit.
type LimitsConfig struct {
	// MaxMessageBytes bounds key + payload + header names and values.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	MaxKeyBytes     int `yaml:"max_key_bytes"`
	MaxHeaders      int `yaml:"max_headers"`
	// MaxHeaderBytes bounds all header names and values of one message.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxBatchMessages bounds the messages of one Publish call.
	MaxBatchMessages int `yaml:"max_batch_messages"`
	// MaxIDBytes bounds a message id (the dedupe key in the ledger).
	MaxIDBytes int `yaml:"max_id_bytes"`
}

// TopicConfig declares a topic.
type TopicConfig struct {
	Name string `yaml:"name"`
	// Partitions: 1..1024. Default 4.
	Partitions int `yaml:"partitions"`
	// Retention by age; 0 keeps messages forever. Because 0 is meaningful,
	// ApplyDefaults leaves it alone: the 168h default is filled when a topic
	// is decoded from YAML without the field, or made by NewTopic.
	Retention time.Duration `yaml:"retention"`
	// RetentionBytes per partition; 0 = unlimited.
	RetentionBytes int64 `yaml:"retention_bytes"`
}

// Delivery says how messages reach the app.
type Delivery string

const (
	// DeliveryStream: the app opens SubscriberService.Subscribe (default).
	DeliveryStream Delivery = "stream"
	// DeliveryCallback: the sidecar calls the app's HandlerService.Handle at
	// AppAddress.
	DeliveryCallback Delivery = "callback"
)

// Ordering says which messages of a partition may be in flight together.
type Ordering string

const (
	// OrderKey: one in-flight message per key; a failing key is parked
	// while other keys flow (default).
	OrderKey Ordering = "key"
	// OrderPartition: one in-flight message per partition.
	OrderPartition Ordering = "partition"
	// OrderNone: no ordering, full parallelism up to MaxInFlight.
	OrderNone Ordering = "none"
)

// RedisPolicy says what a subscription does while the ledger is unreachable.
type RedisPolicy string

const (
	// RedisPause: deliver nothing, lose nothing (default).
	RedisPause RedisPolicy = "pause"
	// RedisDeliver: keep delivering without dedupe (at-least-once; the
	// deliveries are counted in a metric).
	RedisDeliver RedisPolicy = "deliver"
)

// SubscriptionConfig declares a consumer group on a topic.
type SubscriptionConfig struct {
	Topic    string   `yaml:"topic"`
	Group    string   `yaml:"group"`
	Delivery Delivery `yaml:"delivery"`
	// AppAddress is where the sidecar calls Handle; required for callback
	// delivery and refused for stream delivery.
	AppAddress string `yaml:"app_address"`
	// AppTokenFile holds the token the sidecar sends to the app's Handle
	// as "authorization: Bearer <token>" (callback delivery only), for an
	// app that checks who calls it. Empty: no token.
	AppTokenFile      string        `yaml:"app_token_file"`
	MaxAttempts       int           `yaml:"max_attempts"`
	Backoff           BackoffConfig `yaml:"backoff"`
	VisibilityTimeout time.Duration `yaml:"visibility_timeout"`
	Ordering          Ordering      `yaml:"ordering"`
	// MaxInFlight bounds deliveries outstanding at the app, per partition.
	MaxInFlight int `yaml:"max_in_flight"`
	// WindowMessages bounds fetched-but-unfinished messages per partition;
	// when full, fetching stops (backpressure).
	WindowMessages int `yaml:"window_messages"`
	// MaxParkedKeys bounds the keys parked behind a failing message.
	MaxParkedKeys int `yaml:"max_parked_keys"`
	// DeadLetterTopic overrides the DLQ topic; see DLQTopic.
	DeadLetterTopic  string        `yaml:"dlq_topic"`
	DedupeTTL        time.Duration `yaml:"dedupe_ttl"`
	RedisUnavailable RedisPolicy   `yaml:"redis_unavailable"`
	Breaker          BreakerConfig `yaml:"breaker"`
	// Faults makes the subscription deliver as an unreliable network
	// would, to test a handler's idempotency (docs/semantics.md, "Testing a
	// handler"). Refused unless node.dev or node.fault_injection.
	Faults FaultsConfig `yaml:"faults"`
}

// FaultsConfig is subscriptions[*].faults: the probability of each fault,
// per delivery (duplicate, delay, early_lease_expiry) or per ack
// (lose_ack), each between 0 (off, the default) and 0.5, and the seed of
// the draws (the same seed and the same events inject the same faults).
type FaultsConfig struct {
	Duplicate        float64       `yaml:"duplicate"`
	LoseAck          float64       `yaml:"lose_ack"`
	Delay            float64       `yaml:"delay"`
	DelayMax         time.Duration `yaml:"delay_max"`
	EarlyLeaseExpiry float64       `yaml:"early_lease_expiry"`
	Seed             uint64        `yaml:"seed"`
}

// On reports whether any fault is injected.
func (f FaultsConfig) On() bool {
	return f.Duplicate != 0 || f.LoseAck != 0 || f.Delay != 0 || f.EarlyLeaseExpiry != 0
}

// BackoffConfig is the retry backoff of a subscription (full jitter).
type BackoffConfig struct {
	Base       time.Duration `yaml:"base"`
	Max        time.Duration `yaml:"max"`
	Multiplier float64       `yaml:"multiplier"`
}

// Config returns the backoff package's form of b.
func (b BackoffConfig) Config() backoff.Config {
	return backoff.Config{Base: b.Base, Max: b.Max, Multiplier: b.Multiplier}
}

// BreakerConfig is the circuit breaker of a subscription toward its
// downstream(s). It trips on ConsecutiveFailures in a row, or when at least
// MinRequests were seen in Window and FailureRatio of them failed. It stays
// open OpenTimeout, doubled on every failed probe up to MaxOpenTimeout.
type BreakerConfig struct {
	ConsecutiveFailures int           `yaml:"consecutive_failures"`
	FailureRatio        float64       `yaml:"failure_ratio"`
	MinRequests         int           `yaml:"min_requests"`
	Window              time.Duration `yaml:"window"`
	OpenTimeout         time.Duration `yaml:"open_timeout"`
	MaxOpenTimeout      time.Duration `yaml:"max_open_timeout"`
}

// RedisConfig locates the dedupe ledger. No Addrs: no ledger (in --dev, an
// in-process one). One address: a single server; several: a cluster; with
// MasterName: sentinels.
type RedisConfig struct {
	Addrs      []string `yaml:"addrs"`
	MasterName string   `yaml:"master_name"`
	Username   string   `yaml:"username"`
	// Password; prefer the SPOOL_REDIS_PASSWORD environment variable to
	// writing it into the file.
	Password string `yaml:"password"`
	DB       int    `yaml:"db"`

	// TLS: `tls: true` (the system's CAs) or a mapping of files
	// (docs/security.md, "Redis ledger").
	TLS RedisTLSConfig `yaml:"tls"`
	// KeyPrefix is put before every ledger key (DefaultRedisKeyPrefix): one
	// per installation sharing a Redis, and the ACL user's key pattern.
	KeyPrefix string `yaml:"key_prefix"`
}

// RedisTLSConfig is redis.tls. In the file it is either a bool (`tls:
// true`, as before the files existed: TLS with the system's CAs) or a
// mapping; TLS is on when Enabled or any file or the server name is set.
type RedisTLSConfig struct {
	Enabled    bool   `yaml:"enabled"`
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
}

// On reports whether the ledger connects with TLS.
func (t RedisTLSConfig) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

// UnmarshalYAML reads `tls: true|false` as Enabled, and a mapping as the
// fields (the walker in load.go has already refused unknown ones).
func (t *RedisTLSConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&t.Enabled)
	}
	type plain RedisTLSConfig
	return n.Decode((*plain)(t))
}

// Topic returns the declared topic with that name.
func (c *Config) Topic(name string) (*TopicConfig, bool) {
	for i := range c.Topics {
		if c.Topics[i].Name == name {
			return &c.Topics[i], true
		}
	}
	return nil, false
}

// Subscription returns the declared subscription of group on topic.
func (c *Config) Subscription(topic, group string) (*SubscriptionConfig, bool) {
	for i := range c.Subscriptions {
		if s := &c.Subscriptions[i]; s.Topic == topic && s.Group == group {
			return s, true
		}
	}
	return nil, false
}

// DLQTopic is the dead-letter topic of the subscription: dlq_topic when set,
// else "<topic>.dlq.<group>".
func (s *SubscriptionConfig) DLQTopic() string {
	if s.DeadLetterTopic != "" {
		return s.DeadLetterTopic
	}
	return s.Topic + ".dlq." + s.Group
}

// AllTopics returns the declared topics followed by the dead-letter topics
// that are not declared and must be created automatically (1 partition,
// default retention), each once, in subscription order.
func (c *Config) AllTopics() []TopicConfig {
	out := append([]TopicConfig(nil), c.Topics...)
	seen := map[string]bool{}
	for _, t := range c.Topics {
		seen[t.Name] = true
	}
	for i := range c.Subscriptions {
		name := c.Subscriptions[i].DLQTopic()
		if !seen[name] {
			seen[name] = true
			out = append(out, TopicConfig{Name: name, Partitions: 1, Retention: DefaultRetention})
		}
	}
	return out
}

// NewTopic returns a topic with the defaults (retention 168h); partitions 0
// means the default.
func NewTopic(name string, partitions int) TopicConfig {
	t := TopicConfig{Name: name, Partitions: partitions, Retention: DefaultRetention}
	t.applyDefaults()
	return t
}

// NewSubscription returns a stream subscription with every default.
func NewSubscription(topic, group string) SubscriptionConfig {
	s := SubscriptionConfig{Topic: topic, Group: group}
	s.applyDefaults()
	return s
}

// Default returns the configuration with every default and no topics. Its
// data_dir is empty, so it validates only once one is set (or in dev mode).
func Default() Config {
	var c Config
	c.ApplyDefaults()
	return c
}

// DevConfig is what `spoold --dev` starts from when no file is given: one
// node, data_dir left empty (the caller makes a temporary directory), no
// Redis (the caller uses an in-process ledger), fsync every 50ms (the data is
// thrown away anyway), topic "demo" with 4 partitions, and a stream
// subscription demo/demo-app with quick retries (100ms..2s) so a failing
// handler reaches the DLQ in seconds. Drain budget 5s for quick restarts.
func DevConfig() Config {
	c := Default()
	c.Node.Dev = true
	c.Node.DrainTimeout = 5 * time.Second
	c.Storage.Fsync = FsyncInterval
	c.Storage.FsyncInterval = 50 * time.Millisecond
	c.Topics = []TopicConfig{NewTopic("demo", 4)}
	s := NewSubscription("demo", "demo-app")
	s.Backoff = BackoffConfig{Base: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}
	c.Subscriptions = []SubscriptionConfig{s}
	return c
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}
