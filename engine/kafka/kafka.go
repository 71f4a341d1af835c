package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/spoolmq/spool/engine"
)

// Config configures a Backend.
type Config struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// Prefix is put before Spool's topic and group names to name Kafka's
	// topics and consumer groups (default none: topic orders is the Kafka
	// topic orders).
	Prefix string
	// CreateTopics lets the backend create missing topics (and add
	// partitions a topic lacks); without it a missing topic is an error.
	CreateTopics bool
	// ReplicationFactor of the topics created; 0 takes the broker's
	// default.replication.factor.
	ReplicationFactor int
	// PublishTimeout bounds a produce from its call to Kafka's ack
	// (default 10s).
	PublishTimeout time.Duration
	// WatchInterval is how often Watch polls the end offsets of watched
	// topics (default 100ms): the delay before a message another
	// producer wrote is delivered.
	WatchInterval time.Duration
	// MetadataMaxBytes bounds the finished offsets a commit carries in
	// its metadata (default 4096, the broker's offset.metadata.max.bytes
	// default; positions.go).
	MetadataMaxBytes int
	// MaxReplyBytes bounds one reply of a broker (default
	// DefaultMaxReplyBytes): a reply declaring more closes its connection
	// before anything is allocated for it, and the call fails or is sent
	// again on a new connection (guards.kafka_max_reply_bytes).
	MaxReplyBytes int32
	// TLS, if set, connects with TLS.
	TLS *tls.Config
	// SASL, if set, authenticates with this mechanism.
	SASL sasl.Mechanism
	// ClientID names the client in the brokers' logs and quotas.
	ClientID string
	Logger   *slog.Logger
	Hooks    Hooks

	// dial, if set, opens the connections to brokers (tests inject faults).
	dial func(ctx context.Context, network, host string) (net.Conn, error)
}

// Hooks report what the sidecar counts in its metrics.
type Hooks struct {
	// PositionsTruncated: a commit's finished offsets did not fit in the
	// metadata; dropped of them were left out (they will be delivered
	// again after a restart or rebalance).
	PositionsTruncated func(group, topic string, partition int32, dropped int)
	// ReplyRefused: a broker's reply declared more than MaxReplyBytes (or
	// a negative size); its connection was closed.
	ReplyRefused func()
}

func (c *Config) validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("kafka: no broker: set storage.kafka.brokers")
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.WatchInterval == 0 {
		c.WatchInterval = 100 * time.Millisecond
	}
	if c.MetadataMaxBytes == 0 {
		c.MetadataMaxBytes = DefaultMetadataMaxBytes
	}
	if c.ClientID == "" {
		c.ClientID = "spoold"
	}
	if c.MaxReplyBytes == 0 {
		c.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if c.MaxReplyBytes < 1<<20 || c.MaxReplyBytes > 1<<30 {
		return fmt.Errorf("kafka: a broker reply limit of %d bytes: want 1 MiB to 1 GiB (guards.kafka_max_reply_bytes)", c.MaxReplyBytes)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// requestTimeout bounds one admin or fetch request.
const requestTimeout = 10 * time.Second

// Backend keeps topics in Kafka topics; see the package comment.
type Backend struct {
	cfg   Config
	cl    *kgo.Client
	admin *kadm.Client

	mu     sync.RWMutex // guards topics; a leaf except for the watch registry (watch.go)
	topics map[string]*topic

	groups groupMembers // members of shared groups (groups.go)

	wg     sync.WaitGroup // produce waiters
	ctx    context.Context
	cancel context.CancelFunc
}

type topic struct {
	spec  engine.TopicSpec
	kname string // the Kafka topic
	parts []*partition

	offsets offsetsBatch // Offsets calls sharing listings (offsets.go)

	watchMu  sync.Mutex // guards watchers and ends
	watchers map[*watcher]struct{}
	ends     map[int32]int64 // end offsets the last poll saw
}

type partition struct {
	t   *topic
	num int32

	// pubMu orders produces of the partition: a call's records are
	// buffered together and its done runs after the previous call's.
	pubMu sync.Mutex
	last  chan struct{} // closed when the previous call's done has run

	leaderMu sync.Mutex // guards leader; a leaf
	leader   *leader    // nil until a fetch asks (fetch.go)

	// expand is how many times larger the partition's records were,
	// decoded, than the batches Kafka sent for them (compression; at least
	// 1), as of the last fetch: a fetch asks Kafka for maxBytes/expand.
	expand atomic.Int64
}

// Open connects to Kafka and loads the topics that exist under the
// prefix.
func Open(cfg Config) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := append(cfg.connOpts(),
		kgo.RequiredAcks(kgo.AllISRAcks()), // with the idempotent producer, the default
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(cfg.PublishTimeout),
		kgo.ProducerLinger(0),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w (check storage.kafka)", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{cfg: cfg, cl: cl, admin: kadm.NewClient(cl), topics: map[string]*topic{}, ctx: ctx, cancel: cancel}
	if err := b.loadTopics(); err != nil {
		cancel()
		cl.Close()
		return nil, err
	}
	return b, nil
}

// connOpts are the options of every client the backend makes: where the
// brokers are and how to reach them.
func (c *Config) connOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		// Metadata answers are cached this long; the default (5s) would
		// delay seeing a topic just created, or a leader that moved.
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.WithLogger(slogger{c.Logger}),
		// A reply declaring more is refused before it is allocated; a
		// consumer's fetch (groups.go: none, the members' fetching is
		// paused) asks for no more than half of it.
		kgo.BrokerMaxReadBytes(c.MaxReplyBytes),
		kgo.FetchMaxBytes(min(50<<20, c.MaxReplyBytes/2)),
		kgo.WithHooks(replyHook{c.Hooks.ReplyRefused}),
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS))
	}
	if c.dial != nil {
		opts = append(opts, kgo.Dialer(c.dial))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(c.SASL))
	}
	return opts
}

// loadTopics finds the Kafka topics under the prefix (topics created
// earlier through spool, or by Kafka's tools).
func (b *Backend) loadTopics() error {
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	details, err := b.admin.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("kafka: listing topics at %s: %w (check storage.kafka.brokers, and that Kafka runs)", strings.Join(b.cfg.Brokers, ","), b.cfg.replyErr(err))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for kname, d := range details {
		name, ok := strings.CutPrefix(kname, b.cfg.Prefix)
		if !ok || d.Err != nil || d.IsInternal || name == "" || strings.HasPrefix(name, "__") {
			continue
		}
		b.topics[name] = b.newTopic(engine.TopicSpec{Name: name, Partitions: int32(len(d.Partitions))})
	}
	return nil
}

func (b *Backend) newTopic(spec engine.TopicSpec) *topic {
	t := &topic{spec: spec, kname: b.cfg.Prefix + spec.Name}
	for p := range spec.Partitions {
		t.parts = append(t.parts, &partition{t: t, num: p})
	}
	return t
}

// Run polls the end offsets of watched topics until ctx ends (watch.go).
func (b *Backend) Run(ctx context.Context) error {
	t := time.NewTicker(b.cfg.WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			b.poll(ctx)
		}
	}
}

// Close waits for pending produces' callbacks (failing those Kafka has
// not acked) and closes the client.
func (b *Backend) Close() error {
	if b.ctx.Err() != nil {
		return nil
	}
	b.cancel()
	b.closeGroups()
	b.cl.Close() // fails buffered records: their done runs with ErrClosed
	b.wg.Wait()
	return nil
}

// maxTopicName is Kafka's limit on topic names.
const maxTopicName = 249

// EnsureTopic checks the topic in Kafka, creating it (or adding the
// partitions it lacks) when CreateTopics allows. Fewer partitions than
// Kafka has are refused (keys would move), and so is a missing topic
// that may not be created.
func (b *Backend) EnsureTopic(spec engine.TopicSpec) error {
	if strings.HasPrefix(spec.Name, "__") {
		return fmt.Errorf("kafka: topic %q: names starting with __ are reserved for internal topics; choose another name", spec.Name)
	}
	if spec.Partitions < 1 {
		return fmt.Errorf("kafka: topic %q: %d partitions: need at least 1", spec.Name, spec.Partitions)
	}
	kname := b.cfg.Prefix + spec.Name
	if len(kname) > maxTopicName {
		return fmt.Errorf("kafka: topic %q: Kafka topic %q is longer than Kafka's %d bytes: shorten the name or storage.kafka.prefix", spec.Name, kname, maxTopicName)
	}
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	details, err := b.admin.ListTopics(ctx, kname)
	if err != nil {
		return fmt.Errorf("kafka: topic %q: %w", spec.Name, err)
	}
	d, ok := details[kname]
	switch {
	case ok && d.Err == nil:
		have := int32(len(d.Partitions))
		if have > spec.Partitions {
			return &engine.TopicConflictError{Topic: spec.Name, Stored: have, Declared: spec.Partitions}
		}
		if have < spec.Partitions {
			if !b.cfg.CreateTopics {
				return fmt.Errorf("kafka: topic %q: Kafka topic %q has %d partitions, the config declares %d: add them with kafka-topics --alter --partitions %d (keys move between partitions), or set storage.kafka.create_topics",
					spec.Name, kname, have, spec.Partitions, spec.Partitions)
			}
			resp, err := b.admin.UpdatePartitions(ctx, int(spec.Partitions), kname)
			if err == nil {
				err = resp.Error()
			}
			if err == nil {
				err = b.awaitTopic(ctx, kname, spec.Partitions)
			}
			if err != nil {
				return fmt.Errorf("kafka: topic %q: adding partitions to Kafka topic %q: %w", spec.Name, kname, err)
			}
		}
	case ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("kafka: topic %q (Kafka topic %q): %w", spec.Name, kname, d.Err)
	case !b.cfg.CreateTopics:
		return fmt.Errorf("kafka: topic %q: Kafka topic %q does not exist and storage.kafka.create_topics is false: create it (kafka-topics --create --topic %s --partitions %d), or set create_topics: true",
			spec.Name, kname, kname, spec.Partitions)
	default:
		if err := b.createTopic(ctx, kname, spec); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.topics[spec.Name]; ok && t.spec.Partitions == spec.Partitions {
		t.spec = spec
		return nil
	}
	b.topics[spec.Name] = b.newTopic(spec)
	return nil
}

func (b *Backend) createTopic(ctx context.Context, kname string, spec engine.TopicSpec) error {
	str := func(v int64) *string { s := strconv.FormatInt(v, 10); return &s }
	appendTime := "LogAppendTime"
	configs := map[string]*string{"message.timestamp.type": &appendTime, "retention.ms": str(-1), "retention.bytes": str(-1)}
	if spec.RetentionAge > 0 {
		configs["retention.ms"] = str(spec.RetentionAge.Milliseconds())
	}
	if spec.RetentionBytes > 0 {
		configs["retention.bytes"] = str(spec.RetentionBytes)
	}
	rf := int16(b.cfg.ReplicationFactor)
	if rf == 0 {
		rf = -1 // the broker's default.replication.factor
	}
	resp, err := b.admin.CreateTopic(ctx, spec.Partitions, rf, configs, kname)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) { // another sidecar created it just now
		return nil
	}
	if err != nil {
		return fmt.Errorf("kafka: creating topic %q (Kafka topic %q, %d partitions, replication factor %d): %w %s", spec.Name, kname, spec.Partitions, rf, err, resp.ErrMessage)
	}
	b.cfg.Logger.Info("kafka: created topic", "topic", kname, "partitions", spec.Partitions, "replication_factor", rf)
	if err := b.awaitTopic(ctx, kname, spec.Partitions); err != nil {
		return fmt.Errorf("kafka: created topic %q (Kafka topic %q), but %w", spec.Name, kname, err)
	}
	return nil
}

// awaitTopic waits until the brokers' metadata shows the topic with n
// partitions, each with a leader: a topic is usable once EnsureTopic
// returns (the controller answers a create before the brokers know it).
func (b *Backend) awaitTopic(ctx context.Context, kname string, n int32) error {
	for {
		details, err := b.admin.ListTopics(ctx, kname)
		if err == nil {
			if d, ok := details[kname]; ok && d.Err == nil && int32(len(d.Partitions)) == n {
				ready := true
				for _, p := range d.Partitions {
					ready = ready && p.Leader >= 0
				}
				if ready {
					b.cl.ForceMetadataRefresh()
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("its %d partitions have no leaders yet: %w", n, ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling interval of a condition wait
		}
	}
}

// Topics are the topics this backend knows, by name.
func (b *Backend) Topics() []engine.TopicSpec {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]engine.TopicSpec, 0, len(b.topics))
	for _, t := range b.topics {
		out = append(out, t.spec)
	}
	slices.SortFunc(out, func(a, b engine.TopicSpec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Partitions is a topic's partition count.
func (b *Backend) Partitions(name string) (int32, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, ok := b.topics[name]
	if !ok {
		return 0, unknownTopic(name)
	}
	return t.spec.Partitions, nil
}

func unknownTopic(name string) error {
	return fmt.Errorf("%w %q: declare it under topics in the sidecar's config", engine.ErrUnknownTopic, name)
}

func (b *Backend) partition(name string, p int32) (*partition, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	t, ok := b.topics[name]
	if !ok {
		return nil, unknownTopic(name)
	}
	if p < 0 || int(p) >= len(t.parts) {
		return nil, fmt.Errorf("%w %d of topic %q: it has partitions 0..%d", engine.ErrUnknownPartition, p, name, len(t.parts)-1)
	}
	return t.parts[p], nil
}

// DeleteTopic deletes the Kafka topic (Kafka drops the groups' committed
// offsets on it), when the backend may create topics; otherwise topics
// are Kafka's operators' to delete.
func (b *Backend) DeleteTopic(name string) error {
	if !b.cfg.CreateTopics {
		return fmt.Errorf("%w: topic %q: storage.kafka.create_topics is false, so Spool does not delete Kafka topics either: delete %q with kafka-topics --delete", engine.ErrDeleteUnsupported, name, b.cfg.Prefix+name)
	}
	b.mu.Lock()
	t, ok := b.topics[name]
	delete(b.topics, name)
	b.mu.Unlock()
	if !ok {
		return unknownTopic(name)
	}
	t.notify() // watchers look again and find it gone
	ctx, cancel := context.WithTimeout(b.ctx, requestTimeout)
	defer cancel()
	resp, err := b.admin.DeleteTopic(ctx, t.kname)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka: delete topic %q (Kafka topic %q): %w (deleting it again finishes)", name, t.kname, err)
	}
	return nil
}

// slogger is kgo's logger over slog: warnings and errors only (the
// client's info lines are per connection).
type slogger struct{ l *slog.Logger }

func (s slogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (s slogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelWarn
	if level == kgo.LogLevelError {
		lvl = slog.LevelError
	}
	s.l.Log(context.Background(), lvl, "kafka: "+msg, keyvals...)
}

// The backend implements the seam.
var _ engine.Backend = (*Backend)(nil)
