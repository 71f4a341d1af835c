package sidecar

import (
	"time"

	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/cluster"
	"github.com/spoolmq/spool/engine/embedded"
	"github.com/spoolmq/spool/engine/jetstream"
	"github.com/spoolmq/spool/engine/kafka"
	"github.com/spoolmq/spool/sidecar/config"
	"github.com/spoolmq/spool/sidecar/deliver"
	"github.com/spoolmq/spool/sidecar/metrics"
)

// openBackend opens the log the config chooses (storage.backend): the
// embedded one in dataDir, or a broker's (docs/backends.md). Everything
// above it sees an engine.Backend only; embedded-only operations (cluster
// administration, quarantine) are found by type assertion.
func openBackend(cfg *config.Config, dataDir string, m *metrics.Metrics, logger *slog.Logger) (engine.Backend, error) {
	switch cfg.Storage.Backend {
	case config.BackendEmbedded, "":
		// The engine logs the damage once; operators see it here and in /readyz.
		hooks := embedded.Hooks{PartitionQuarantined: func(q engine.Quarantine) {
			m.PartitionQuarantined.WithLabelValues(q.Topic, strconv.Itoa(int(q.Partition))).Set(1)
		}, PartitionRepaired: func(topic string, partition int32) {
			m.PartitionQuarantined.DeleteLabelValues(topic, strconv.Itoa(int(partition)))
		}}
		checkFileLimit(cfg.Guards.MaxOpenFiles, logger)
		if cfg.Cluster.Enabled() {
			cc, err := clusterConfig(cfg)
			if err != nil {
				return nil, err
			}
			if cfg.Cluster.Insecure && cfg.Cluster.TLS.CertFile == "" {
				logger.Warn("INSECURE: cluster.insecure is set: the peer port takes plaintext from anyone who reaches it, who can read every topic"+
					" and, without cluster.join_secret_file, join the cluster (docs/security.md, \"Peers\")", "cluster_listen", cfg.Cluster.Listen)
			}
			if cfg.Cluster.InsecureNoJoinSecret && cfg.Cluster.JoinSecretFile == "" && !cfg.Node.Dev {
				logger.Warn("INSECURE: cluster.insecure_no_join_secret is set: any process the peer port accepts can join the cluster and receive replicas of every topic (docs/security.md, \"Peers\")", "cluster_listen", cfg.Cluster.Listen)
			}
			return cluster.Open(cluster.Config{DataDir: dataDir, Log: logOptions(cfg), Logger: logger, Cluster: cc, Hooks: hooks})
		}
		return embedded.Open(embedded.Config{DataDir: dataDir, Log: logOptions(cfg), Logger: logger, Hooks: hooks,
			MaxPartitions: cfg.Guards.MaxNodePartitions, MaxOpenFiles: maxOpenFiles(cfg.Guards.MaxOpenFiles)})
	case config.BackendJetStream:
		js := cfg.Storage.JetStream
		b, err := jetstream.Open(jetstream.Config{URLs: js.URLs, Prefix: js.Prefix, Replicas: js.Replicas, CredsFile: js.CredsFile,
			PublishTimeout: js.PublishTimeout, Name: "spoold " + cfg.Node.ID, Logger: logger,
			MaxFrameBytes: cfg.Guards.NATSMaxFrameBytes, OnFrameRefused: func() { m.RemoteRefused.WithLabelValues("nats").Inc() }})
		if err != nil {
			return nil, err
		}
		logger.Info("storage: NATS JetStream", "urls", jetstream.RedactURLs(js.URLs), "prefix", js.Prefix, "replicas", js.Replicas, "shared_groups", js.SharedGroups)
		if !js.SharedGroups {
			return privateGroups{b}, nil
		}
		return b, nil
	case config.BackendKafka:
		return openKafka(cfg, m, logger)
	}
	return nil, fmt.Errorf("storage.backend %q: not available in this spoold; use embedded, jetstream or kafka (docs/backends.md)", cfg.Storage.Backend)
}

// openKafka opens the Kafka backend. With storage.kafka.shared_groups
// the sidecars of a group share its partitions as members of the Kafka
// consumer group; without, each delivers every partition of its groups.
func openKafka(cfg *config.Config, m *metrics.Metrics, logger *slog.Logger) (engine.Backend, error) {
	k := cfg.Storage.Kafka
	kc := kafka.Config{Brokers: k.Brokers, Prefix: k.Prefix, CreateTopics: k.CreateTopics, ReplicationFactor: k.ReplicationFactor,
		PublishTimeout: k.PublishTimeout, ClientID: "spoold-" + cfg.Node.ID, Logger: logger,
		MaxReplyBytes: int32(cfg.Guards.KafkaMaxReplyBytes),
		Hooks: kafka.Hooks{PositionsTruncated: func(group, topic string, _ int32, dropped int) {
			m.KafkaPositionsTruncated.WithLabelValues(group, topic).Add(float64(dropped))
		}, ReplyRefused: func() { m.RemoteRefused.WithLabelValues("kafka").Inc() }}}
	if k.TLS {
		kc.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if k.TLSCAFile != "" {
			pem, err := os.ReadFile(k.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("storage.kafka.tls_ca_file: %w", err)
			}
			kc.TLS.RootCAs = x509.NewCertPool()
			if !kc.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("storage.kafka.tls_ca_file %s: no PEM certificate in it", k.TLSCAFile)
			}
		}
	}
	if k.SASLMechanism != "" {
		pw, err := os.ReadFile(k.SASLPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("storage.kafka.sasl_password_file: %w", err)
		}
		kc.SASL = kafkaSASL(k.SASLMechanism, k.SASLUsername, strings.TrimRight(string(pw), "\r\n"))
	}
	b, err := kafka.Open(kc)
	if err != nil {
		return nil, err
	}
	logger.Info("storage: Apache Kafka", "brokers", k.Brokers, "prefix", k.Prefix, "create_topics", k.CreateTopics, "shared_groups", k.SharedGroups)
	if !k.SharedGroups {
		return privateGroups{b}, nil
	}
	return b, nil
}

// kafkaSASL is the SASL mechanism storage.kafka.sasl_mechanism names
// (validated by the config).
func kafkaSASL(mechanism, user, password string) sasl.Mechanism {
	switch mechanism {
	case "scram-sha-256":
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
	}
	return plain.Auth{User: user, Pass: password}.AsMechanism()
}

// privateGroups hides a broker backend's group coordinator: each sidecar
// delivers every partition of its groups, committing positions itself
// (storage.jetstream.shared_groups and storage.kafka.shared_groups false).
type privateGroups struct{ engine.Backend }

// clusterStatus is the embedded cluster's status; false on a single node
// and on a broker backend.
func clusterStatus(eng engine.Backend) (engine.ClusterStatus, bool) {
	if cl, ok := eng.(engine.ClusterAdmin); ok {
		return cl.ClusterStatus()
	}
	return engine.ClusterStatus{}, false
}

// coordinatorOf is the group coordinator through which the sidecars of a
// group share its partitions: the embedded cluster's, or a broker
// backend's; nil on a single embedded node (it delivers every partition).
func coordinatorOf(eng engine.Backend) deliver.Coordinator {
	if cl, ok := eng.(engine.ClusterAdmin); ok {
		if _, clustered := cl.ClusterStatus(); !clustered {
			return nil
		}
		if gc, ok := eng.(engine.GroupCoordinator); ok {
			return clusterCoordinator{stateCoordinator: stateCoordinator{gc}, eng: eng, cl: cl}
		}
		return nil
	}
	if gc, ok := eng.(engine.GroupCoordinator); ok {
		return brokerCoordinator{stateCoordinator{gc}}
	}
	if kb, ok := eng.(*kafka.Backend); ok {
		return brokerCoordinator{kafkaCoordinator{kb}}
	}
	return nil
}

// stateCoordinator is a coordinator whose groups are the state machine of
// engine/groups/coord (the embedded cluster's, JetStream's).
type stateCoordinator struct{ engine.GroupCoordinator }

func (c stateCoordinator) DescribeGroup(ctx context.Context, group string) (deliver.GroupView, error) {
	st, err := c.GroupCoordinator.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// kafkaCoordinator is Kafka's own group membership: Kafka assigns the
// partitions, engine/kafka translates (groups.go there).
type kafkaCoordinator struct{ k *kafka.Backend }

func (c kafkaCoordinator) Coordinate(ctx context.Context, cmd engine.GroupCommand) (engine.GroupResult, error) {
	return c.k.Coordinate(ctx, cmd)
}

func (c kafkaCoordinator) DescribeGroup(ctx context.Context, group string) (deliver.GroupView, error) {
	v, err := c.k.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// groupCoordinator is what brokerCoordinator adds Node and Replicas to.
type groupCoordinator interface {
	Coordinate(ctx context.Context, cmd engine.GroupCommand) (engine.GroupResult, error)
	DescribeGroup(ctx context.Context, group string) (deliver.GroupView, error)
}

// brokerCoordinator is a broker backend's group coordinator. A broker's
// partitions are on no sidecar's node: members join without a node, and
// no assignment prefers local reads.
type brokerCoordinator struct{ groupCoordinator }

// Node is 0 and known: the member is on no storage node.
func (brokerCoordinator) Node() (uint64, bool) { return 0, true }

// Replicas are unknown: no partition is local to a sidecar.
func (brokerCoordinator) Replicas(string) [][]uint64 { return nil }

// clusterAdmin is the embedded cluster's administration, or an
// *engine.UnsupportedError naming the backend for op.
func (a *admin) clusterAdmin(op string) (engine.ClusterAdmin, error) {
	if cl, ok := a.eng.(engine.ClusterAdmin); ok {
		return cl, nil
	}
	return nil, &engine.UnsupportedError{Backend: a.cfg.Storage.Backend, Op: op,
		Instead: "the broker's own tools manage its servers and replicas (docs/backends.md)"}
}

// clusterConfig is the engine's view of the cluster section.
func clusterConfig(cfg *config.Config) (cluster.ClusterConfig, error) {
	cl := cfg.Cluster
	var secret []byte
	if cl.JoinSecretFile != "" {
		var err error
		if secret, err = config.ReadJoinSecret(cl.JoinSecretFile); err != nil {
			return cluster.ClusterConfig{}, fmt.Errorf("cluster.join_secret_file %s: want %v", cl.JoinSecretFile, err)
		}
	}
	return cluster.ClusterConfig{
		JoinSecret:         secret,
		Listen:             cl.Listen,
		Advertise:          cl.Advertise,
		Join:               cl.Join,
		BootstrapExpect:    cl.BootstrapExpect,
		ReplicationFactor:  int32(cl.ReplicationFactor),
		ProduceTimeout:     cl.ProduceTimeout,
		DeadNodeTimeout:    cl.DeadNodeTimeout,
		MoveBytesPerSecond: cl.MoveBytesPerSecond,
		ReopenStoppedEvery: cl.ReopenStoppedEvery,
		AutoFinalizeAfter:  autoFinalizeAfter(cl),
		TLS:                cluster.ClusterTLS{CertFile: cl.TLS.CertFile, KeyFile: cl.TLS.KeyFile, CAFile: cl.TLS.CAFile, PeerURIPrefix: cl.TLS.PeerURIPrefix},
		StorageOff:         cl.Storage == config.StorageOff,
		QuiesceOff:         !cl.QuiesceOn(),
	}, nil
}

// autoFinalizeAfter is the engine's AutoFinalizeAfter: < 0 when the cluster
// version is finalized by hand only (cluster.finalize: manual).
func autoFinalizeAfter(cl config.ClusterConfig) time.Duration {
	if cl.Finalize == config.FinalizeManual {
		return -1
	}
	return cl.AutoFinalizeAfter
}

// maxOpenFiles resolves guards.max_open_files: the setting, or the
// process's file descriptor limit less a reserve for listeners and
// connections (embedded.DefaultMaxOpenFiles).
func maxOpenFiles(setting int) int {
	if setting > 0 {
		return setting
	}
	return embedded.DefaultMaxOpenFiles(embedded.FileLimit())
}

// checkFileLimit warns at start when guards.max_open_files is set above
// what the file descriptor limit leaves for the log: the budget then does
// not protect the node, and the limit should be raised (or the budget
// lowered).
func checkFileLimit(setting int, logger *slog.Logger) {
	nofile := embedded.FileLimit()
	if setting > embedded.DefaultMaxOpenFiles(nofile) {
		logger.Warn("guards.max_open_files is above what the file descriptor limit leaves for the log: a node out of descriptors stops accepting on every port; raise the limit (ulimit -n) or lower guards.max_open_files",
			"nofile", nofile, "max_open_files", setting, "reserve", embedded.MaxFileReserve)
	}
}
