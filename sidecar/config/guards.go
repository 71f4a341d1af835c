package config

import (
	"net/url"
	"strconv"
	"strings"
)

// GuardsConfig bounds what a hostile or intercepted server, and a hostile
// request, can make spoold hold or do (docs/configuration.md, "guards";
// docs/security.md). Every field has a default; 0 takes it.
type GuardsConfig struct {
	// RedisMaxReplyBytes bounds one reply of the ledger's Redis: a reply
	// declaring more fails its call and closes the connection.
	RedisMaxReplyBytes int64 `yaml:"redis_max_reply_bytes"`
	// NATSMaxFrameBytes bounds one protocol frame of a NATS server (a
	// message, its headers and payload, or a control line): more closes
	// the connection.
	NATSMaxFrameBytes int64 `yaml:"nats_max_frame_bytes"`
	// KafkaMaxReplyBytes bounds one reply of a Kafka broker: a reply
	// declaring more closes its connection before it is allocated.
	KafkaMaxReplyBytes int64 `yaml:"kafka_max_reply_bytes"`
	// KafkaSASLPlainWithoutTLS lets kafka.sasl_mechanism plain send the
	// password in clear text (no kafka.tls).
	KafkaSASLPlainWithoutTLS bool `yaml:"insecure_kafka_sasl_plain_without_tls"`
	// MaxNodePartitions is a single node's partition budget (embedded
	// storage without a cluster): a topic that would pass it is refused.
	MaxNodePartitions int `yaml:"max_node_partitions"`
	// MaxOpenFiles is a node's open-file budget: the most files its log
	// keeps open (three per segment). On a single node a topic whose new
	// partitions would pass it is refused; past 80 % spoold warns. 0: the
	// file descriptor limit less a reserve of 1,024 for listeners and
	// connections (a quarter of a limit below 4,096), resolved at start.
	MaxOpenFiles int `yaml:"max_open_files"`
	// InsecurePlaintextRemotes lets spoold reach the ledger's Redis or the
	// broker in plaintext at an address beyond loopback (each logged as
	// INSECURE at start and counted in spool_plaintext_remotes). Off (the
	// default, as node.dev aside), such a config is refused at start.
	InsecurePlaintextRemotes bool `yaml:"insecure_plaintext_remotes"`
	// RequireTLSBeyondLoopback is the earlier form of the requirement,
	// which is now the default: true (or unset) changes nothing; false,
	// which used to turn it off, is refused with the name of
	// InsecurePlaintextRemotes rather than quietly read as it.
	RequireTLSBeyondLoopback *bool `yaml:"require_tls_beyond_loopback"`
}

// PlaintextRemote is an address of the ledger or the broker that spoold
// reaches without TLS beyond loopback.
type PlaintextRemote struct {
	Peer  string // redis, nats or kafka
	Field string // the setting that names it
	Addr  string // credentials redacted
}

// PlaintextRemotes lists the addresses beyond loopback that the config
// reaches without TLS: redis.addrs without redis.tls, storage.jetstream.urls
// when none is tls:// (one tls:// URL makes every NATS server TLS,
// engine/jetstream; without one, a server may still ask for TLS and spoold
// then uses it), storage.kafka.brokers without storage.kafka.tls.
func (c *Config) PlaintextRemotes() []PlaintextRemote {
	var out []PlaintextRemote
	if !c.Redis.TLS.On() {
		for i, a := range c.Redis.Addrs {
			if !LoopbackOrUnix(a) {
				out = append(out, PlaintextRemote{"redis", "redis.addrs[" + strconv.Itoa(i) + "]", a})
			}
		}
	}
	switch c.Storage.Backend {
	case BackendJetStream:
		anyTLS := false
		for _, raw := range c.Storage.JetStream.URLs {
			for _, one := range strings.Split(raw, ",") {
				if u, err := url.Parse(strings.TrimSpace(one)); err == nil && u.Scheme == "tls" {
					anyTLS = true
				}
			}
		}
		for i, raw := range c.Storage.JetStream.URLs {
			if anyTLS {
				break
			}
			for _, one := range strings.Split(raw, ",") {
				one = strings.TrimSpace(one)
				hostport, scheme := one, ""
				if u, err := url.Parse(one); err == nil && u.Host != "" {
					hostport, scheme = u.Host, u.Scheme
				} else if at := strings.LastIndexByte(one, '@'); at >= 0 {
					hostport = one[at+1:]
				}
				if scheme != "tls" && !LoopbackOrUnix(hostport) {
					out = append(out, PlaintextRemote{"nats", "storage.jetstream.urls[" + strconv.Itoa(i) + "]", hostport})
				}
			}
		}
	case BackendKafka:
		if !c.Storage.Kafka.TLS {
			for i, a := range c.Storage.Kafka.Brokers {
				if !LoopbackOrUnix(a) {
					out = append(out, PlaintextRemote{"kafka", "storage.kafka.brokers[" + strconv.Itoa(i) + "]", a})
				}
			}
		}
	}
	return out
}

const (
	// DefaultRedisMaxReplyBytes: the ledger's largest honest reply (a
	// script's answer for 1,000 keys with 1 KiB errors) is under 2 MiB.
	DefaultRedisMaxReplyBytes = 64 << 20
	// DefaultNATSMaxFrameBytes is NATS's own largest max_payload (64 MiB)
	// plus room for a message's subject, reply and headers.
	DefaultNATSMaxFrameBytes = 64<<20 + 1<<20
	// DefaultKafkaMaxReplyBytes is franz-go's own bound, above the largest
	// reply Spool asks for (a fetch of at most 64 MiB, or half the bound,
	// plus one record batch).
	DefaultKafkaMaxReplyBytes = 100 << 20
	// DefaultMaxNodePartitions: each partition holds three open files per
	// segment, so 4,096 partitions of one segment take 12,288 descriptors.
	DefaultMaxNodePartitions = 4096
	// MaxMaxNodePartitions bounds max_node_partitions (the controller's
	// MaxTotalPartitions).
	MaxMaxNodePartitions = 100_000
	// MinMaxOpenFiles and MaxMaxOpenFiles bound max_open_files: a topic
	// of one partition needs three files beside the lock; the upper bound
	// is embedded.MaxOpenFilesCap.
	MinMaxOpenFiles = 16
	MaxMaxOpenFiles = 1 << 24
	// MinGuardReplyBytes and MaxGuardReplyBytes bound both reply limits.
	MinGuardReplyBytes = 1 << 20
	MaxGuardReplyBytes = 1 << 30
)

func (g *GuardsConfig) applyDefaults() {
	if g.RedisMaxReplyBytes == 0 {
		g.RedisMaxReplyBytes = DefaultRedisMaxReplyBytes
	}
	if g.NATSMaxFrameBytes == 0 {
		g.NATSMaxFrameBytes = DefaultNATSMaxFrameBytes
	}
	if g.KafkaMaxReplyBytes == 0 {
		g.KafkaMaxReplyBytes = DefaultKafkaMaxReplyBytes
	}
	if g.MaxNodePartitions == 0 {
		g.MaxNodePartitions = DefaultMaxNodePartitions
	}
}

func (c *Config) validateGuards(v *validator) {
	g := c.Guards
	v.intRange("guards.redis_max_reply_bytes", g.RedisMaxReplyBytes, MinGuardReplyBytes, MaxGuardReplyBytes)
	v.intRange("guards.nats_max_frame_bytes", g.NATSMaxFrameBytes, MinGuardReplyBytes, MaxGuardReplyBytes)
	v.intRange("guards.kafka_max_reply_bytes", g.KafkaMaxReplyBytes, MinGuardReplyBytes, MaxGuardReplyBytes)
	if m := int64(c.Limits.MaxMessageBytes); c.Storage.Backend == BackendKafka && g.KafkaMaxReplyBytes >= MinGuardReplyBytes && g.KafkaMaxReplyBytes < m+64<<10 {
		v.add("guards.kafka_max_reply_bytes", strconv.FormatInt(g.KafkaMaxReplyBytes, 10),
			"at least limits.max_message_bytes + 65536 (a message Spool stores must fit in a reply)")
	}
	v.intRange("guards.max_node_partitions", int64(g.MaxNodePartitions), 1, MaxMaxNodePartitions)
	if g.MaxOpenFiles != 0 {
		v.intRange("guards.max_open_files", int64(g.MaxOpenFiles), MinMaxOpenFiles, MaxMaxOpenFiles)
	}
	if m := int64(c.Limits.MaxMessageBytes); c.Storage.Backend == BackendJetStream && g.NATSMaxFrameBytes < m+64<<10 {
		v.add("guards.nats_max_frame_bytes", strconv.FormatInt(g.NATSMaxFrameBytes, 10),
			"at least limits.max_message_bytes + 65536 (a message Spool stores must fit in a frame)")
	}
	if r := g.RequireTLSBeyondLoopback; r != nil && !*r {
		v.add("guards.require_tls_beyond_loopback", "false",
			"true or unset: TLS beyond loopback is now required by default; to reach Redis or the broker in plaintext, set guards.insecure_plaintext_remotes: true instead")
	}
	if !g.InsecurePlaintextRemotes && !c.Node.Dev {
		for _, r := range c.PlaintextRemotes() {
			v.add(r.Field, r.Addr, "a loopback address or TLS (redis.tls, a tls:// URL, storage.kafka.tls): anyone on the path reads and changes what spoold sends and receives; "+
				"set guards.insecure_plaintext_remotes: true only where nothing else can reach "+r.Peer+" (docs/security.md)")
		}
	}
	k := c.Storage.Kafka
	if c.Storage.Backend == BackendKafka && k.SASLMechanism == "plain" && k.SASLPasswordFile != "" && !k.TLS && !g.KafkaSASLPlainWithoutTLS {
		v.add("storage.kafka.sasl_mechanism", k.SASLMechanism,
			"scram-sha-256 or scram-sha-512, or plain with storage.kafka.tls: plain without TLS sends the password in clear text to anyone on the path (guards.insecure_kafka_sasl_plain_without_tls: true allows it)")
	}
}
