package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/spoolmq/spool/internal/testpki"
)

// Scenario is one loadtest/scenarios/NAME.yaml file.
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Mode: publish (measure publish → durable ack), drain (publish a
	// backlog unmeasured, then measure consuming it), e2e (publish and
	// consume together, measured end to end), failover (kill -9 of a
	// leader, per round), idle (CPU with no traffic), rebalance (a rolling
	// restart of the sidecars under load; pauses of the partitions).
	Mode string `yaml:"mode"`

	MessageBytes int `yaml:"message_bytes"` // payload bytes of each message (≥ 16: seq + send time)
	Messages     int `yaml:"messages"`      // messages published (the backlog, for drain)
	// MaxDuration bounds the measured phase; producers stop and consumers
	// give up when it passes (what was not done by then counts as lost).
	// In rebalance mode it bounds the wait, after the load stopped, until
	// every acknowledged message was handled.
	MaxDuration time.Duration `yaml:"max_duration"`
	// RatePerS caps the publish rate over all producers (0: as fast as acks allow).
	RatePerS int `yaml:"rate_per_s"`

	Producers     int `yaml:"producers"`      // PublishStream streams, one gRPC connection each
	PipelineDepth int `yaml:"pipeline_depth"` // requests awaiting their ack, per stream
	BatchMessages int `yaml:"batch_messages"` // messages per PublishStreamRequest
	Keys          int `yaml:"keys"`           // distinct keys (0: keyless, partitions rotate per request)
	// Acks of every publish request: all (default: at commit) or leader
	// (once on the partition leader's disk; lossy, docs/semantics.md).
	Acks string `yaml:"acks"`

	Partitions          int    `yaml:"partitions"`
	Fsync               string `yaml:"fsync"`                // always | interval
	FsyncInterval       string `yaml:"fsync_interval"`       // with fsync: interval
	StorageSync         string `yaml:"storage_sync"`         // storage.sync: files (default) | filesystem
	Ordering            string `yaml:"ordering"`             // key | partition | none
	SubMaxInFlight      int    `yaml:"sub_max_in_flight"`    // subscription max_in_flight (per partition)
	SubWindowMessages   int    `yaml:"sub_window_messages"`  // subscription window_messages (per partition)
	Consumers           int    `yaml:"consumers"`            // Subscribe calls (SDK), one connection each; in a cluster consumer i talks to node i % nodes
	ConsumerConcurrency int    `yaml:"consumer_concurrency"` // spool.WithConcurrency per consumer
	ConsumerPrefetch    int    `yaml:"consumer_prefetch"`    // spool.WithPrefetch per consumer (-1: SDK default)
	// ConsumerSDK: which SDK consumes (modes drain and e2e): go (the
	// default: the Go SDK in the loadtest's process), or a consumer program
	// of its own process, go-process, python, typescript or java
	// (loadtest/consumers/, consumerproc.go), whose CPU is measured.
	ConsumerSDK string `yaml:"consumer_sdk"`
	// ConsumerOptions are passed to a consumer program as they are: the
	// settings one SDK has and others do not (loadtest/consumers/README.md).
	ConsumerOptions map[string]string `yaml:"consumer_options"`

	// SidecarGOMEMLIMIT, when set, is spoold's GOMEMLIMIT (for example
	// "100MiB"): a deployment setting, not a code change.
	SidecarGOMEMLIMIT string `yaml:"sidecar_gomemlimit"`
	// SidecarYAML is appended to each spoold's configuration file: sections
	// the generated file does not have (publish:, delivery:), to measure a
	// setting without a code change.
	SidecarYAML string `yaml:"sidecar_yaml"`

	// Redis: start a redis-server for the run (free 127.0.0.1 port,
	// persistence off) and give it to spoold as its idempotency ledger
	// (`redis: {addrs: [...]}`), so every delivery is claimed in and every
	// ack completed in Redis. Its CPU is measured next to spoold's.
	Redis bool `yaml:"redis"`
	// Backend runs spoold on a broker the run starts (docs/backends.md):
	// embedded (default), jetstream (nats-server) or kafka (Apache Kafka,
	// KRaft). Its CPU is reported as broker_cpu_us_per_msg. One node only.
	Backend string `yaml:"backend"`
	// BrokerSync: always makes the broker sync every write to disk before
	// it answers, as spoold's `fsync: always` does: nats-server's
	// `jetstream { sync_interval: always }` (its default syncs every 2
	// minutes). jetstream only; unset: the broker's default.
	BrokerSync string `yaml:"broker_sync"`
	// brokerStorage is the storage section of spoold's config once the
	// run has started the backend's broker.
	brokerStorage string
	// clusterTLS, when set (--cluster-tls), are the cluster's peer
	// certificate files (peerCerts): the nodes talk mutual TLS.
	clusterTLS *testpki.Files

	// Nodes > 1 runs a cluster of that many spoold processes on 127.0.0.1
	// (the first bootstraps, the others join it) with ReplicationFactor
	// (default: Nodes). Producers are spread over the nodes' app ports;
	// CPU and RSS are summed over all spoold processes.
	Nodes             int `yaml:"nodes"`
	ReplicationFactor int `yaml:"replication_factor"`
	// Rounds (failover mode): kills, each followed by a restart of the
	// killed node. --rounds overrides it.
	Rounds int `yaml:"rounds"`
	// Restarts (rebalance mode): how many sidecars are restarted, one
	// after another (node 1 first); default: all of them.
	Restarts int `yaml:"restarts"`
	// RestartGap (rebalance mode): steady load before the first restart
	// and after the group settled from each one (default 3s).
	RestartGap time.Duration `yaml:"restart_gap"`
	// IdleDuration (idle mode): how long the idle CPU is measured.
	IdleDuration time.Duration `yaml:"idle_duration"`
	// NoSubscription: the sidecars get no subscription (idle mode: only the
	// replicas' own cost is measured).
	NoSubscription bool `yaml:"no_subscription"`

	// Verify (publish and failover modes): after the measured phase, consume everything
	// (not measured) to count lost and duplicated messages.
	Verify bool `yaml:"verify"`
}

func (s *Scenario) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	s.validateCluster(bad)
	s.validateMode(bad)
	s.validateLoad(bad)
	return errors.Join(errs...)
}

// validateCluster checks the mode, the backend and the cluster's shape,
// filling defaults; bad records a problem.
func (s *Scenario) validateCluster(bad func(format string, a ...any)) {
	switch s.Mode {
	case "publish", "drain", "e2e":
	case "failover", "idle", "rebalance":
		if s.Nodes < 2 {
			bad("mode %s needs a cluster: nodes = %d, want 2..%d", s.Mode, s.Nodes, maxNodes)
		}
	default:
		bad("mode = %q: must be publish, drain, e2e, failover, idle or rebalance", s.Mode)
	}
	switch s.Backend {
	case "", "embedded":
	case "jetstream", "kafka":
		if s.Nodes > 1 || s.Mode != "publish" && s.Mode != "drain" && s.Mode != "e2e" {
			bad("backend = %s: one node (nodes unset) and mode publish, drain or e2e", s.Backend)
		}
	default:
		bad("backend = %q: must be embedded (the default), jetstream or kafka", s.Backend)
	}
	if s.BrokerSync != "" && (s.BrokerSync != "always" || s.Backend != "jetstream") {
		bad("broker_sync = %q with backend %q: only always, with backend jetstream", s.BrokerSync, s.Backend)
	}
	if s.Acks != "" && s.Acks != "all" && s.Acks != "leader" {
		bad("acks = %q: must be all (the default) or leader", s.Acks)
	}
	if s.Nodes == 0 {
		s.Nodes = 1
	}
	if s.Nodes < 1 || s.Nodes > maxNodes {
		bad("nodes = %d: must be 1..%d", s.Nodes, maxNodes)
	}
	if s.ReplicationFactor == 0 && s.Nodes > 1 {
		s.ReplicationFactor = s.Nodes
	}
	if s.Nodes > 1 && (s.ReplicationFactor < 1 || s.ReplicationFactor > s.Nodes) {
		bad("replication_factor = %d: must be 1..nodes (%d)", s.ReplicationFactor, s.Nodes)
	}
	if s.Nodes == 1 && s.ReplicationFactor != 0 {
		bad("replication_factor = %d without a cluster: set nodes too", s.ReplicationFactor)
	}
}

// validateMode checks the settings of modes failover, rebalance and idle,
// filling defaults.
func (s *Scenario) validateMode(bad func(format string, a ...any)) {
	if s.Mode == "failover" {
		if s.Rounds == 0 {
			s.Rounds = 20
		}
		if s.Rounds < 1 || s.Rounds > 1000 {
			bad("rounds = %d: must be 1..1000", s.Rounds)
		}
	}
	if s.Mode == "rebalance" {
		if s.Restarts == 0 {
			s.Restarts = s.Nodes
		}
		if s.Restarts < 1 || s.Restarts > s.Nodes {
			bad("restarts = %d: must be 1..nodes (%d)", s.Restarts, s.Nodes)
		}
		if s.RestartGap == 0 {
			s.RestartGap = 3 * time.Second
		}
		if s.RestartGap < 0 || s.RestartGap > time.Minute {
			bad("restart_gap = %s: must be up to 1m", s.RestartGap)
		}
		if s.RatePerS <= 0 {
			bad("rate_per_s = %d: rebalance needs a steady load (a pause counts only while messages wait): set it", s.RatePerS)
		}
		if s.Consumers != s.Nodes {
			bad("consumers = %d: rebalance runs one app per sidecar: set it to nodes (%d)", s.Consumers, s.Nodes)
		}
		if s.NoSubscription {
			bad("no_subscription with mode rebalance: the apps consume the subscription")
		}
	}
	if s.Mode == "idle" {
		if s.IdleDuration == 0 {
			s.IdleDuration = 30 * time.Second
		}
		if s.IdleDuration < time.Second || s.IdleDuration > 5*time.Minute {
			bad("idle_duration = %s: must be 1s..5m", s.IdleDuration)
		}
	}
}

// validateLoad checks the load's settings (messages, producers,
// consumers, storage), filling defaults.
func (s *Scenario) validateLoad(bad func(format string, a ...any)) {
	if s.MessageBytes == 0 {
		s.MessageBytes = 1024
	}
	if s.MessageBytes < 16 || s.MessageBytes > 1<<20 {
		bad("message_bytes = %d: must be 16..1048576 (the first 16 bytes carry sequence and send time)", s.MessageBytes)
	}
	if s.Messages < 1 || s.Messages > 20_000_000 {
		bad("messages = %d: must be 1..20000000", s.Messages)
	}
	if s.MaxDuration == 0 {
		s.MaxDuration = 60 * time.Second
	}
	if s.MaxDuration < 0 || s.MaxDuration > 5*time.Minute {
		bad("max_duration = %s: must be up to 5m", s.MaxDuration)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.Producers, 4)
	def(&s.PipelineDepth, 4)
	def(&s.BatchMessages, 100)
	def(&s.Partitions, 4)
	def(&s.Consumers, 1)
	def(&s.ConsumerConcurrency, 64)
	def(&s.SubMaxInFlight, 256) // spoold's default
	if s.ConsumerPrefetch == 0 {
		s.ConsumerPrefetch = -1
	}
	if s.Producers < 1 || s.Producers > 64 {
		bad("producers = %d: must be 1..64", s.Producers)
	}
	if s.PipelineDepth < 1 || s.PipelineDepth > 1024 {
		bad("pipeline_depth = %d: must be 1..1024", s.PipelineDepth)
	}
	if s.BatchMessages < 1 || s.BatchMessages > 10000 {
		bad("batch_messages = %d: must be 1..10000 (the sidecar's max_batch_messages)", s.BatchMessages)
	}
	if s.Partitions < 1 || s.Partitions > 1024 {
		bad("partitions = %d: must be 1..1024", s.Partitions)
	}
	if s.Consumers < 1 || s.Consumers > 64 {
		bad("consumers = %d: must be 1..64", s.Consumers)
	}
	if s.Keys < 0 || s.RatePerS < 0 {
		bad("keys and rate_per_s must not be negative")
	}
	if s.Fsync == "" {
		s.Fsync = "always"
	}
	if s.Fsync != "always" && s.Fsync != "interval" {
		bad("fsync = %q: must be always or interval", s.Fsync)
	}
	if s.Ordering == "" {
		s.Ordering = "none"
	}
	if s.ConsumerSDK == "" {
		s.ConsumerSDK = "go"
	}
	if _, ok := consumerLangs[s.ConsumerSDK]; !ok && s.ConsumerSDK != "go" {
		bad("consumer_sdk = %q: must be go (in the loadtest's process), go-process, python, typescript or java", s.ConsumerSDK)
	} else if s.ConsumerSDK != "go" && (s.Mode != "drain" && s.Mode != "e2e" || s.Nodes != 1) {
		bad("consumer_sdk = %s: consumer programs run in modes drain and e2e on one node (mode %s, nodes %d): use consumer_sdk go", s.ConsumerSDK, s.Mode, s.Nodes)
	}
	if len(s.ConsumerOptions) > 0 && s.ConsumerSDK == "go" {
		bad("consumer_options are for consumer programs: set consumer_sdk")
	}
	if s.Ordering != "key" && s.Ordering != "partition" && s.Ordering != "none" {
		bad("ordering = %q: must be key, partition or none", s.Ordering)
	}
}

// maxNodes bounds a cluster run (each node is a spoold process on this machine).
const maxNodes = 7

// loadScenario reads name (a scenario name under dir, or a path to a .yaml file).
func loadScenario(dir, name string) (*Scenario, error) {
	path := name
	if !strings.HasSuffix(name, ".yaml") {
		path = filepath.Join(dir, name+".yaml")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario %q: %w (scenarios live in %s)", name, err, dir)
	}
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), ".yaml")
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("scenario %s:\n%w", path, err)
	}
	return &s, nil
}
