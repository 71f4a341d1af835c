package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spoolmq/spool/engine"
)

// Config configures a Backend.
type Config struct {
	// URLs are the NATS servers.
	URLs []string
	// Prefix names Spool's streams, subjects and buckets (default "spool").
	Prefix string
	// Replicas of the streams and buckets created (default 1).
	Replicas int
	// CredsFile authenticates with a NATS credentials file, if set.
	CredsFile string
	// PublishTimeout bounds the wait for a publish's ack (default 10s).
	PublishTimeout time.Duration
	// Name is the connection's name as NATS monitoring shows it.
	Name   string
	Logger *slog.Logger
	// MaxFrameBytes bounds one frame the server sends (0:
	// DefaultMaxFrameBytes); OnFrameRefused, if set, is called for each
	// connection closed for one over it (metrics).
	MaxFrameBytes  int64
	OnFrameRefused func()
}

func (c *Config) validate() error {
	if len(c.URLs) == 0 {
		return errors.New("jetstream: no NATS server: set storage.jetstream.urls")
	}
	if c.Prefix == "" {
		c.Prefix = "spool"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	return nil
}

// requestTimeout bounds one JetStream API call (stream info, direct get,
// key-value read or write).
const requestTimeout = 10 * time.Second

// Backend keeps topics in JetStream streams; see the package comment.
type Backend struct {
	cfg       Config
	nc        *nats.Conn
	js        jetstream.JetStream
	positions jetstream.KeyValue
	groups    jetstream.KeyValue

	mu     sync.RWMutex // guards topics; a leaf except for the watch registry (watch.go)
	topics map[string]*topic

	wg     sync.WaitGroup // produce waiters and watch consumers
	closed chan struct{}
}

type topic struct {
	spec  engine.TopicSpec
	parts []*partition

	watchMu  sync.Mutex // guards watchers and following
	watchers map[*watcher]struct{}
	follow   []jetstream.ConsumeContext // one per partition once watched
}

type partition struct {
	topic   string
	num     int32
	stream  string
	subject string

	// pubMu orders publishes of the partition: a call's messages are sent
	// together and its done runs after the previous call's.
	pubMu sync.Mutex
	last  chan struct{} // closed when the previous call's done has run

	// undecodableSeen: a message that is no Spool record was logged.
	undecodableSeen atomic.Bool
}

// Open connects to NATS, creates or finds the buckets, and loads the
// topics whose streams exist (topics created earlier through spool).
func Open(cfg Config) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name(cfg.Name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				cfg.Logger.Warn("jetstream: disconnected from NATS; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			cfg.Logger.Info("jetstream: reconnected to NATS", "server", nc.ConnectedUrlRedacted())
		}),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	opts = append(opts, nats.SetCustomDialer(&cappedDialer{timeout: 5 * time.Second, maxFrame: cfg.MaxFrameBytes,
		tlsHosts: tlsHostsOf(cfg.URLs), refused: cfg.OnFrameRefused}))
	nc, err := nats.Connect(strings.Join(cfg.URLs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect to %s: %w (check storage.jetstream.urls and that nats-server runs with -js)", strings.Join(RedactURLs(cfg.URLs), ","), redactErr(err, cfg.URLs))
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout), jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b := &Backend{cfg: cfg, nc: nc, js: js, topics: map[string]*topic{}, closed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	for _, kv := range []struct {
		dst  *jetstream.KeyValue
		name string
		what string
	}{{&b.positions, cfg.Prefix + "_positions", "Spool's committed positions of consumer groups"}, {&b.groups, cfg.Prefix + "_groups", "Spool's consumer groups across sidecars"}} {
		*kv.dst, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: kv.name, Description: kv.what, Storage: jetstream.FileStorage, Replicas: cfg.Replicas, History: 1})
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("jetstream: key-value bucket %s: %w (is JetStream enabled on the server: nats-server -js?)", kv.name, err)
		}
	}
	if err := b.loadTopics(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return b, nil
}

// Metadata keys of Spool's streams.
const (
	metaTopic     = "spool_topic"
	metaPartition = "spool_partition"
)

// loadTopics finds the streams of Spool's topics.
func (b *Backend) loadTopics(ctx context.Context) error {
	found := map[string]*engine.TopicSpec{}
	l := b.js.ListStreams(ctx, jetstream.WithStreamListSubject(b.cfg.Prefix+".>"))
	for si := range l.Info() {
		name, ok := si.Config.Metadata[metaTopic]
		p, err := strconv.Atoi(si.Config.Metadata[metaPartition])
		if !ok || err != nil || si.Config.Name != b.streamName(name, int32(p)) {
			continue
		}
		t := found[name]
		if t == nil {
			t = &engine.TopicSpec{Name: name, RetentionAge: si.Config.MaxAge, RetentionBytes: max(si.Config.MaxBytes, 0)}
			found[name] = t
		}
		t.Partitions = max(t.Partitions, int32(p)+1)
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("jetstream: listing Spool's streams: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, spec := range found {
		b.topics[spec.Name] = b.newTopic(*spec)
	}
	return nil
}

func (b *Backend) newTopic(spec engine.TopicSpec) *topic {
	t := &topic{spec: spec}
	for p := range spec.Partitions {
		t.parts = append(t.parts, &partition{topic: spec.Name, num: p, stream: b.streamName(spec.Name, p), subject: b.subject(spec.Name, p)})
	}
	return t
}

// streamName is the stream of a topic partition: dots, which stream
// names cannot hold, become underscores (the stream's metadata says which
// topic it is, so two topics that map to one name are told apart).
func (b *Backend) streamName(topic string, p int32) string {
	return b.cfg.Prefix + "_" + strings.ReplaceAll(topic, ".", "_") + "_" + strconv.Itoa(int(p))
}

func (b *Backend) subject(topic string, p int32) string {
	return b.cfg.Prefix + "." + topic + "." + strconv.Itoa(int(p))
}

// Run signals watchers once a second (a safety net for a notification
// lost in a reconnect) until ctx ends.
func (b *Backend) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			b.mu.RLock()
			ts := make([]*topic, 0, len(b.topics))
			for _, t := range b.topics {
				ts = append(ts, t)
			}
			b.mu.RUnlock()
			for _, t := range ts {
				t.notify()
			}
		}
	}
}

// Close stops the watch consumers, waits for pending publishes' callbacks,
// and closes the connection.
func (b *Backend) Close() error {
	select {
	case <-b.closed:
		return nil
	default:
	}
	close(b.closed)
	b.mu.Lock()
	for _, t := range b.topics {
		t.stopFollowing()
	}
	b.mu.Unlock()
	b.wg.Wait()
	return b.nc.Drain()
}

// EnsureTopic creates the topic's streams, or updates their retention.
// Fewer partitions than exist are refused (keys would move).
func (b *Backend) EnsureTopic(spec engine.TopicSpec) error {
	if strings.HasPrefix(spec.Name, "__") {
		return fmt.Errorf("jetstream: topic %q: names starting with __ are reserved for internal topics; choose another name", spec.Name)
	}
	if spec.Partitions < 1 {
		return fmt.Errorf("jetstream: topic %q: %d partitions: need at least 1", spec.Name, spec.Partitions)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if _, err := b.js.Stream(ctx, b.streamName(spec.Name, spec.Partitions)); err == nil {
		stored := spec.Partitions + 1
		for {
			if _, err := b.js.Stream(ctx, b.streamName(spec.Name, stored)); err != nil {
				break
			}
			stored++
		}
		return &engine.TopicConflictError{Topic: spec.Name, Stored: stored, Declared: spec.Partitions}
	}
	for p := range spec.Partitions {
		name := b.streamName(spec.Name, p)
		if s, err := b.js.Stream(ctx, name); err == nil {
			if other := s.CachedInfo().Config.Metadata[metaTopic]; other != spec.Name {
				return fmt.Errorf("jetstream: topic %q maps to stream %s, which holds topic %q: rename one of them (dots and underscores map to the same stream name)", spec.Name, name, other)
			}
		}
		_, err := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: fmt.Sprintf("Spool topic %s, partition %d", spec.Name, p),
			Subjects:    []string{b.subject(spec.Name, p)},
			Storage:     jetstream.FileStorage,
			Replicas:    b.cfg.Replicas,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			MaxAge:      spec.RetentionAge,
			MaxBytes:    cmpOr(spec.RetentionBytes, -1),
			AllowDirect: true,
			Metadata:    map[string]string{metaTopic: spec.Name, metaPartition: strconv.Itoa(int(p))},
		})
		if err != nil {
			return fmt.Errorf("jetstream: topic %q partition %d (stream %s): %w", spec.Name, p, name, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.topics[spec.Name]; ok && t.spec.Partitions == spec.Partitions {
		t.spec = spec
		return nil
	} else if ok {
		t.stopFollowing()
	}
	b.topics[spec.Name] = b.newTopic(spec)
	return nil
}

func cmpOr(v, def int64) int64 {
	if v <= 0 {
		return def
	}
	return v
}

// Topics are the topics whose streams this backend knows, by name.
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

// DeleteTopic deletes the topic's streams and every group's positions on
// it.
func (b *Backend) DeleteTopic(name string) error {
	b.mu.Lock()
	t, ok := b.topics[name]
	if ok {
		delete(b.topics, name)
		t.stopFollowing()
	}
	b.mu.Unlock()
	if !ok {
		return unknownTopic(name)
	}
	t.notify() // watchers look again and find it gone
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	var errs []error
	for _, p := range t.parts {
		if err := b.js.DeleteStream(ctx, p.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("stream %s: %w", p.stream, err))
		}
	}
	keys, err := b.positions.ListKeys(ctx)
	if err == nil {
		for k := range keys.Keys() {
			if strings.HasSuffix(k, "/"+keyPart(name)) {
				if err := b.positions.Delete(ctx, k); err != nil {
					errs = append(errs, fmt.Errorf("positions %s: %w", k, err))
				}
			}
		}
	} else if !errors.Is(err, jetstream.ErrNoKeysFound) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("jetstream: delete topic %q: %w (deleting it again finishes)", name, err)
	}
	return nil
}

// The backend implements the seam, and the group coordinator over NATS.
var (
	_ engine.Backend          = (*Backend)(nil)
	_ engine.GroupCoordinator = (*Backend)(nil)
)
