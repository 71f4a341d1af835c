package config

import (
	"time"

	"github.com/spoolmq/spool/internal/backoff"
	"github.com/spoolmq/spool/internal/limits"
	"github.com/spoolmq/spool/sidecar/breaker"
)

// Defaults. A zero (or empty) field gets its default from ApplyDefaults,
// except the fields where zero means something: topic retention and
// retention_bytes (forever, unlimited), redis.db, node.dev, redis.tls.
const (
	DefaultAppListen    = "127.0.0.1:7070"
	DefaultAdminListen  = "127.0.0.1:7071"
	DefaultDrainTimeout = 30 * time.Second
	// DefaultGroupSessionTimeout and DefaultGroupRevokeTimeout are the
	// group coordinator's defaults (docs/groups.md says why they fit
	// Kubernetes).
	DefaultGroupSessionTimeout = 10 * time.Second
	DefaultGroupRevokeTimeout  = 15 * time.Second
	// DefaultGroupDegradeAfter: breakers holding deliveries this long make a
	// member degraded (docs/groups.md, "Degraded members").
	DefaultGroupDegradeAfter = 2 * time.Minute
	DefaultCommitInterval    = 200 * time.Millisecond

	// DefaultRedisKeyPrefix is redis.key_prefix's default, the ledger's
	// prefix before it was configurable; MaxRedisKeyPrefixBytes bounds it
	// (the same as ledger.MaxKeyPrefixBytes, which config may not import).
	DefaultRedisKeyPrefix  = "spool:l:"
	MaxRedisKeyPrefixBytes = 64

	// DefaultJetStreamPrefix names Spool's streams, subjects and buckets
	// in NATS.
	DefaultJetStreamPrefix = "spool"

	DefaultFsync              = FsyncAlways
	DefaultFsyncInterval      = 50 * time.Millisecond
	DefaultSegmentBytes       = 64 << 20
	DefaultSegmentAge         = 24 * time.Hour
	DefaultIndexIntervalBytes = 4096

	DefaultMaxMessageBytes  = 1 << 20
	DefaultMaxKeyBytes      = 1024
	DefaultMaxHeaders       = 64
	DefaultMaxHeaderBytes   = 16 << 10
	DefaultMaxBatchMessages = 10_000
	DefaultMaxIDBytes       = 128

	DefaultReplicationFactor = 3
	DefaultProduceTimeout    = 10 * time.Second
	DefaultDeadNodeTimeout   = 5 * time.Minute
	// DefaultLeaveTimeout bounds a departure on SIGTERM
	// (cluster.leave_on_shutdown): room for a few partitions' copies at the
	// default move pace; set terminationGracePeriodSeconds above
	// node.drain_timeout + cluster.leave_timeout.
	DefaultLeaveTimeout       = 60 * time.Second
	DefaultMoveBytesPerSecond = 32 << 20
	// DefaultReopenStoppedEvery: cluster.reopen_stopped_every (the
	// engine's cluster.DefaultReopenStoppedEvery).
	DefaultReopenStoppedEvery = 2 * time.Second
	// DefaultAutoFinalizeAfter: cluster.auto_finalize_after (the engine's
	// cluster.DefaultAutoFinalizeAfter).
	DefaultAutoFinalizeAfter = 10 * time.Minute
	// MaxReplicationFactor is the most replicas a partition may have: what
	// the engine allows (internal/limits).
	MaxReplicationFactor = limits.MaxReplicationFactor

	DefaultPartitions = 4
	DefaultRetention  = 168 * time.Hour

	DefaultDelivery          = DeliveryStream
	DefaultMaxAttempts       = 5
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultOrdering          = OrderKey
	DefaultMaxInFlight       = 256
	DefaultWindowMessages    = 1_000
	DefaultMaxParkedKeys     = 1000
	DefaultDedupeTTL         = 168 * time.Hour
	DefaultRedisUnavailable  = RedisPause

	DefaultBreakerConsecutiveFailures = 5
	DefaultBreakerFailureRatio        = 0.5
	DefaultBreakerMinRequests         = 20
	DefaultBreakerWindow              = 10 * time.Second
	DefaultBreakerOpenTimeout         = 5 * time.Second
	DefaultBreakerMaxOpenTimeout      = 60 * time.Second
	DefaultTracingSampleRatio         = 1.0
	DefaultDeliveryMemoryBytes        = 16 << 20
	DefaultDeliveryReadsInFlight      = 8
	// MaxDeliveryReadsInFlight bounds delivery.reads_in_flight.
	MaxDeliveryReadsInFlight = 1024
	// DefaultLedgerWriteDelay is delivery.ledger_write_delay: at 5,000
	// msgs/s it makes a completion call carry ~25 acks instead of one
	// frame's few (docs/benchmarks/memory-and-cpu.md, "Steady load").
	DefaultLedgerWriteDelay = 5 * time.Millisecond
	// MaxLedgerWriteDelay bounds delivery.ledger_write_delay: settlements
	// not yet written are redelivered after a crash.
	MaxLedgerWriteDelay = time.Second
	// DefaultPublishMemoryBytes is publish.memory_bytes: publish requests
	// in flight, for the whole sidecar. Each is held twice until it is on
	// disk (the request and the log batch it is encoded into).
	DefaultPublishMemoryBytes = 16 << 20
	// DefaultMemoryLimit is node.memory_limit of a sidecar that holds no
	// replicated partitions (one node, storage off, a broker backend):
	// with the default budgets its peak RSS stays under 140 MiB whatever
	// the message size and the number of partitions (docs/benchmarks.md,
	// e2e-16k and e2e-64p). The runtime's own memory and the binary come on
	// top of it: peak RSS is this plus ~22 MiB when the budgets are full.
	DefaultMemoryLimit = 112 << 20
	// DefaultClusterMemoryLimit is node.memory_limit of a cluster member
	// holding replicas: raft's messages and followers' appends in flight
	// come on top of the budgets.
	DefaultClusterMemoryLimit = 512 << 20
	// MinMemoryLimit is the smallest node.memory_limit: below it the GC
	// would run all the time for the runtime's own needs.
	MinMemoryLimit = 32 << 20
	// MaxDeliveryMemoryBytes bounds delivery.memory_bytes (1 TiB: a typo
	// guard, not a recommendation).
	MaxDeliveryMemoryBytes = 1 << 40
)

// ApplyDefaults fills every zero field that has a default; it never
// overwrites a set field and never fails. Run it before Validate.
func (c *Config) ApplyDefaults() {
	n := &c.Node
	if n.ID == "" {
		n.ID = hostname()
	}
	if len(n.AppListen) == 0 {
		n.AppListen = []string{DefaultAppListen}
	}
	setString(&n.AdminListen, DefaultAdminListen)
	c.Admin.applyDefaults()
	setDur(&n.DrainTimeout, DefaultDrainTimeout)
	setDur(&n.CommitInterval, DefaultCommitInterval)
	if n.MemoryLimit == 0 {
		n.MemoryLimit = DefaultMemoryLimit
		if c.Cluster.Listen != "" && c.Cluster.Storage != StorageOff {
			n.MemoryLimit = DefaultClusterMemoryLimit
		}
	}
	if c.Publish.MemoryBytes == 0 {
		c.Publish.MemoryBytes = DefaultPublishMemoryBytes
	}
	if c.Delivery.MemoryBytes == 0 {
		c.Delivery.MemoryBytes = DefaultDeliveryMemoryBytes
	}
	if c.Delivery.ReadsInFlight == 0 {
		c.Delivery.ReadsInFlight = DefaultDeliveryReadsInFlight
	}
	setDur(&c.Delivery.LedgerWriteDelay, DefaultLedgerWriteDelay)
	c.Apps.applyDefaults()
	c.Guards.applyDefaults()
	setString(&c.Redis.KeyPrefix, DefaultRedisKeyPrefix)

	s := &c.Storage
	setString(&s.Backend, BackendEmbedded)
	setString(&s.Sync, SyncFiles)
	if s.JournalBytes == 0 {
		s.JournalBytes = DefaultJournalBytes
	}
	if s.Backend == BackendJetStream {
		setString(&s.JetStream.Prefix, DefaultJetStreamPrefix)
		setInt(&s.JetStream.Replicas, 1)
		setDur(&s.JetStream.PublishTimeout, DefaultProduceTimeout)
	}
	if s.Backend == BackendKafka {
		setDur(&s.Kafka.PublishTimeout, DefaultProduceTimeout)
	}
	if s.Fsync == "" {
		s.Fsync = DefaultFsync
	}
	setDur(&s.FsyncInterval, DefaultFsyncInterval)
	setInt64(&s.SegmentBytes, DefaultSegmentBytes)
	setDur(&s.SegmentAge, DefaultSegmentAge)
	setInt64(&s.IndexIntervalBytes, DefaultIndexIntervalBytes)

	if s.Broker() {
		// The broker's sidecars of one group share its partitions through
		// a coordinator over the broker, with the cluster's group timeouts.
		setDur(&c.Cluster.GroupSessionTimeout, DefaultGroupSessionTimeout)
		setDur(&c.Cluster.GroupRevokeTimeout, DefaultGroupRevokeTimeout)
		setDur(&c.Cluster.GroupDegradeAfter, DefaultGroupDegradeAfter)
	}
	if c.Cluster.Enabled() {
		setString(&c.Cluster.Storage, StorageOn)
		setString(&c.Cluster.Advertise, c.Cluster.Listen)
		setInt(&c.Cluster.ReplicationFactor, DefaultReplicationFactor)
		setDur(&c.Cluster.ProduceTimeout, DefaultProduceTimeout)
		setDur(&c.Cluster.DeadNodeTimeout, DefaultDeadNodeTimeout)
		setDur(&c.Cluster.LeaveTimeout, DefaultLeaveTimeout)
		setDur(&c.Cluster.ReopenStoppedEvery, DefaultReopenStoppedEvery)
		setString(&c.Cluster.Finalize, FinalizeAuto)
		setDur(&c.Cluster.AutoFinalizeAfter, DefaultAutoFinalizeAfter)
		if c.Cluster.MoveBytesPerSecond == 0 {
			c.Cluster.MoveBytesPerSecond = DefaultMoveBytesPerSecond
		}
		setDur(&c.Cluster.GroupSessionTimeout, DefaultGroupSessionTimeout)
		setDur(&c.Cluster.GroupRevokeTimeout, DefaultGroupRevokeTimeout)
		setDur(&c.Cluster.GroupDegradeAfter, DefaultGroupDegradeAfter)
	}

	l := &c.Limits
	setInt(&l.MaxMessageBytes, DefaultMaxMessageBytes)
	setInt(&l.MaxKeyBytes, DefaultMaxKeyBytes)
	setInt(&l.MaxHeaders, DefaultMaxHeaders)
	setInt(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setInt(&l.MaxBatchMessages, DefaultMaxBatchMessages)
	setInt(&l.MaxIDBytes, DefaultMaxIDBytes)

	for i := range c.Topics {
		c.Topics[i].applyDefaults()
	}
	for i := range c.Subscriptions {
		c.Subscriptions[i].applyDefaults()
	}
}

func (t *TopicConfig) applyDefaults() {
	setInt(&t.Partitions, DefaultPartitions)
}

func (s *SubscriptionConfig) applyDefaults() {
	if s.Delivery == "" {
		s.Delivery = DefaultDelivery
	}
	setInt(&s.MaxAttempts, DefaultMaxAttempts)
	setDur(&s.Backoff.Base, backoff.DefaultBase)
	setDur(&s.Backoff.Max, backoff.DefaultMax)
	if s.Backoff.Multiplier == 0 {
		s.Backoff.Multiplier = backoff.DefaultMultiplier
	}
	setDur(&s.VisibilityTimeout, DefaultVisibilityTimeout)
	if s.Ordering == "" {
		s.Ordering = DefaultOrdering
	}
	setInt(&s.MaxInFlight, DefaultMaxInFlight)
	setInt(&s.WindowMessages, DefaultWindowMessages)
	setInt(&s.MaxParkedKeys, DefaultMaxParkedKeys)
	setDur(&s.DedupeTTL, DefaultDedupeTTL)
	if s.RedisUnavailable == "" {
		s.RedisUnavailable = DefaultRedisUnavailable
	}
	b := &s.Breaker
	// Below max_attempts, so that detecting an outage cannot use a
	// message's last attempt (validateBreakerTrip).
	setInt(&b.ConsecutiveFailures, min(DefaultBreakerConsecutiveFailures, breaker.MaxConsecutiveFailures(s.MaxAttempts)))
	if b.FailureRatio == 0 {
		b.FailureRatio = DefaultBreakerFailureRatio
	}
	setInt(&b.MinRequests, DefaultBreakerMinRequests)
	setDur(&b.Window, DefaultBreakerWindow)
	setDur(&b.OpenTimeout, DefaultBreakerOpenTimeout)
	setDur(&b.MaxOpenTimeout, DefaultBreakerMaxOpenTimeout)
}

func setString(p *string, d string) {
	if *p == "" {
		*p = d
	}
}

func setInt(p *int, d int) {
	if *p == 0 {
		*p = d
	}
}

func setInt64(p *int64, d int64) {
	if *p == 0 {
		*p = d
	}
}

func setDur(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}
