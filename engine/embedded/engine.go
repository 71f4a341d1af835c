package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/transport"
)

// Config configures a Node.
type Config struct {
	// DataDir holds the log (DataDir/log) and group positions (DataDir/groups).
	DataDir string
	// Log configures the partition log of this node.
	Log log.Options
	// Hooks report events operators need (quarantined partitions).
	Hooks Hooks
	// Logger receives operational events; nil means slog.Default().
	Logger *slog.Logger
	// Cluster, if set, makes this node a member of a replicated cluster
	// (docs/replication.md); nil is a single node holding every partition.
	Cluster *ClusterConfig
}

// Node is this node's view of the partitioned log.
type Node struct {
	cfg    Config
	store  *log.Store
	groups *groups.Store

	mu     sync.RWMutex // guards topics; see engine/embedded/LOCKS.md
	topics map[string]*topic

	cl *cluster // nil on a single node
}

type topic struct {
	name  string           // immutable: read without Node.mu
	spec  engine.TopicSpec // guarded by Node.mu (EnsureTopic may replace it)
	parts []*partition
	// learning are this node's replicas of partitions it is getting in a
	// replica move (in the move's target, not yet in its replicas), by
	// partition number; guarded by Node.mu. They copy the leader's log
	// while reads and writes go to the replicas; once the move finishes,
	// the learning partition replaces the one in parts.
	learning map[int32]*partition

	mu       sync.Mutex            // guards changed and watchers
	changed  chan struct{}         // closed and replaced when a partition's committed end moves
	watchers map[*watcher]struct{} // signalled (without blocking) when a partition's end moves
}

// partition is one topic partition. It keeps the two ends of the log that
// replication tells apart: the durable end (log.Partition.DurableOffset:
// fsynced on this node) and the committed end (here: what readers may see).
// On one node the committed end follows the durable end through the log's
// OnDurable hook; with raft, the commit index will call setCommitted
// instead, and may lag the local durable end.
type partition struct {
	topic *topic
	num   int32
	// log is the partition's log on this node; nil in a cluster when this
	// node holds no replica of it (reads and writes go to peers).
	log *log.Partition
	// raftGroup places the partition in a cluster: the raft group of its
	// replicas (0 on a single node, and while a topic waits for enough
	// nodes); placing a topic replaces its partition values. mem is its
	// replica set, which replica moves change (nil with raft group 0).
	raftGroup uint64
	mem       atomic.Pointer[replicaSet]
	// replica is the raft id of this node's replica (transport.ReplicaID;
	// 0 when log is nil).
	replica   uint64
	committed atomic.Int64  // Fetch, Offsets and notifications use this end
	compl     completer     // runs Produce callbacks off the appender
	fwdMu     sync.Mutex    // a leaf: guards fwd
	fwd       forwarder     // records on their way to the leader (cluster)
	producers producerTable // the last batch of each producer (cluster; cluster_dedupe.go)
	// limit caps committed once the partition is quarantined (noLimit until
	// then): nothing at or past the damage is served.
	limit    atomic.Int64
	reported atomic.Bool // the quarantine was logged and hooked
}

// replicaSet is where a partition's replicas are: replicas (the first is
// the preferred leader) and, during a replica move, target.
type replicaSet struct {
	replicas, target []uint64
	incs             map[uint64]uint32 // meta.Partition.Incarnations
}

// newReplicaSet is mp's replica set, copied.
func newReplicaSet(mp meta.Partition) *replicaSet {
	return &replicaSet{replicas: slices.Clone(mp.Replicas), target: slices.Clone(mp.Target), incs: maps.Clone(mp.Incarnations)}
}

// replicaIDs are the raft ids of the replicas on nodes.
func (m *replicaSet) replicaIDs(nodes []uint64) []uint64 {
	ids := make([]uint64, len(nodes))
	for i, n := range nodes {
		ids[i] = transport.ReplicaID(n, m.incs[n])
	}
	return ids
}

// replicas are the nodes holding the partition (nil on a single node).
func (p *partition) replicas() []uint64 {
	if m := p.mem.Load(); m != nil {
		return m.replicas
	}
	return nil
}

// holders are the nodes holding a replica or getting one: the replicas,
// then the move's target nodes not among them. Any of them can name the
// leader.
func (p *partition) holders() []uint64 {
	m := p.mem.Load()
	if m == nil {
		return nil
	}
	out := m.replicas
	for _, id := range m.target {
		if !slices.Contains(out, id) {
			out = append(slices.Clip(out), id)
		}
	}
	return out
}

// setCommitted moves the committed end up to end (never down) and signals
// the topic's watchers when it moved.
func (p *partition) setCommitted(end int64) {
	for {
		cur := p.committed.Load()
		lim := min(end, p.limit.Load())
		if lim <= cur {
			return
		}
		if p.committed.CompareAndSwap(cur, lim) {
			p.topic.notify()
			return
		}
	}
}

// Open opens (or creates) the node's data dir. Call Run to start the
// appender, and Close when done.
func Open(cfg Config) (*Node, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("engine: no data dir: set node.data_dir (or run spoold --dev for a temporary one)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Log.Logger == nil {
		cfg.Log.Logger = cfg.Logger
	}
	// A damaged partition is quarantined, not fatal: the rest of the node serves.
	cfg.Log.QuarantineCorrupt = true
	st, err := log.OpenStore(filepath.Join(cfg.DataDir, "log"), cfg.Log)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	cfg.Log = st.Options()
	gs, err := groups.Open(cfg.Log.FS, filepath.Join(cfg.DataDir, "groups"))
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	n := &Node{cfg: cfg, store: st, groups: gs, topics: map[string]*topic{}}
	if cfg.Cluster != nil {
		if n.cl, err = newCluster(n, *cfg.Cluster); err != nil {
			_ = st.Close()
			return nil, err
		}
	}
	return n, nil
}

// Run drives the log's appender (and, in a cluster, the replicas, the
// transport and the controller) until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	if n.cl == nil {
		return n.store.Run(ctx)
	}
	storeErr := make(chan error, 1)
	storeCtx, stopStore := context.WithCancel(context.Background())
	go func() { storeErr <- n.store.Run(storeCtx) }() // owned: stopped after the replicas
	err := n.cl.run(ctx)
	stopStore()
	return errors.Join(err, <-storeErr)
}

// Close flushes and closes the log. Produce after Close fails with ErrClosed.
func (n *Node) Close() error { return n.store.Close() }

// SyncStats counts the syncs the log's append rounds made (LogOptions.SyncFileSystem).
func (n *Node) SyncStats() engine.SyncStats { return n.store.SyncStats() }

// DeleteTopic removes a topic from a single node: its partitions' files
// and every group's committed positions on it. Appends already queued are
// written first (and then deleted); later calls for the topic fail with
// ErrUnknownTopic, and a topic created again under the name starts empty
// at offset 0. The caller checks that nothing uses it (subscriptions).
// A crash in the middle leaves some files, which a later DeleteTopic (or
// the topic created again) finds; nothing half-deleted is served, since
// the topic is not reopened unless declared.
//
// On a cluster the topic is deleted on every node (engine/embedded/cluster_delete.go):
// refused with ErrTopicInUse while a consumer group's member subscribes to
// it, with ErrDeleteUnsupported for internal topics and on a node with
// storage off. It returns once this node has applied the deletion; the
// other nodes apply it as they apply the controller's log.
func (n *Node) DeleteTopic(name string) error {
	if n.cl != nil {
		return n.cl.deleteTopic(name)
	}
	n.mu.Lock()
	t, ok := n.topics[name]
	if ok {
		delete(n.topics, name)
	}
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w %q", engine.ErrUnknownTopic, name)
	}
	t.notify() // watchers look again and find it gone
	var errs []error
	for _, p := range t.parts {
		errs = append(errs, n.store.Drop(engine.PartitionName(name, p.num)))
	}
	errs = append(errs, n.groups.Forget(name))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: delete topic %q: %w (its files may be left in the data dir; deleting it again finishes)", name, err)
	}
	return nil
}

// storedPartitions counts the partitions of topic found on disk.
func (n *Node) storedPartitions(name string) int32 {
	var count int32
	for _, pn := range n.store.Partitions() {
		i := strings.LastIndexByte(pn, '-')
		if i <= 0 || pn[:i] != name {
			continue
		}
		if p, err := strconv.Atoi(pn[i+1:]); err == nil && int32(p) >= count {
			count = int32(p) + 1
		}
	}
	return count
}

// EnsureTopic opens or creates the topic's partitions. Declaring fewer
// partitions than are stored is refused (keys would lose their order). A
// partition whose data is damaged opens quarantined (see Quarantined); that
// is reported, not returned as an error.
func (n *Node) EnsureTopic(spec engine.TopicSpec) error {
	if strings.HasPrefix(spec.Name, "__") {
		// The engine's internal topics (meta.GroupsTopic) are its own.
		return fmt.Errorf("engine: topic %q: names starting with __ are reserved for internal topics; choose another name", spec.Name)
	}
	if n.cl != nil {
		if spec.Partitions < 1 {
			return fmt.Errorf("engine: topic %q: %d partitions: need at least 1", spec.Name, spec.Partitions)
		}
		return n.cl.ensureTopic(spec)
	}
	damaged, err := n.ensureTopic(spec)
	for _, p := range damaged { // reported with no lock held
		n.quarantine(p, p.log.Quarantined())
	}
	return err
}

func (n *Node) ensureTopic(spec engine.TopicSpec) (damaged []*partition, err error) {
	if spec.Partitions < 1 {
		return nil, fmt.Errorf("engine: topic %q: %d partitions: need at least 1", spec.Name, spec.Partitions)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.topics[spec.Name]; ok {
		if t.spec.Partitions != spec.Partitions {
			return nil, &engine.TopicConflictError{Topic: spec.Name, Stored: t.spec.Partitions, Declared: spec.Partitions}
		}
		for _, p := range t.parts {
			if err := p.log.SetRetention(spec.RetentionAge, spec.RetentionBytes); err != nil {
				return nil, fmt.Errorf("engine: topic %q: %w", spec.Name, err)
			}
		}
		t.spec = spec
		return nil, nil
	}
	if stored := n.storedPartitions(spec.Name); stored > spec.Partitions {
		return nil, &engine.TopicConflictError{Topic: spec.Name, Stored: stored, Declared: spec.Partitions}
	}
	t := &topic{name: spec.Name, spec: spec, changed: make(chan struct{})}
	for p := range spec.Partitions {
		lp, err := n.store.Partition(engine.PartitionName(spec.Name, p))
		if err != nil {
			return nil, fmt.Errorf("engine: topic %q partition %d: %w", spec.Name, p, err)
		}
		if err := lp.SetRetention(spec.RetentionAge, spec.RetentionBytes); err != nil {
			return nil, fmt.Errorf("engine: topic %q: %w", spec.Name, err)
		}
		part := &partition{topic: t, num: p, log: lp}
		part.limit.Store(noLimit)
		if ce := lp.Quarantined(); ce != nil {
			part.limit.Store(ce.Offset) // the log opened only what precedes the damage
			damaged = append(damaged, part)
		}
		// Single node: what is durable here is committed.
		lp.SetOnDurable(part.setCommitted)
		part.committed.Store(min(lp.DurableOffset(), part.limit.Load()))
		t.parts = append(t.parts, part)
	}
	n.topics[spec.Name] = t
	return damaged, nil
}

// Topics returns the declared topics, sorted by name (not the engine's
// internal ones).
func (n *Node) Topics() []engine.TopicSpec {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]engine.TopicSpec, 0, len(n.topics))
	for _, t := range n.topics {
		if !strings.HasPrefix(t.name, "__") { // internal topics (meta.GroupsTopic) are not the user's
			out = append(out, t.spec)
		}
	}
	slices.SortFunc(out, func(a, b engine.TopicSpec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Partitions returns the number of partitions of a topic.
func (n *Node) Partitions(topicName string) (int32, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	t, ok := n.topics[topicName]
	if !ok {
		return 0, fmt.Errorf("%w %q: declare it under topics in the sidecar's config", engine.ErrUnknownTopic, topicName)
	}
	return t.spec.Partitions, nil
}

func (n *Node) partition(topicName string, p int32) (*partition, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	t, ok := n.topics[topicName]
	if !ok {
		return nil, fmt.Errorf("%w %q: declare it under topics in the sidecar's config", engine.ErrUnknownTopic, topicName)
	}
	if p < 0 || int(p) >= len(t.parts) {
		return nil, fmt.Errorf("%w %d of topic %q: it has partitions 0..%d", engine.ErrUnknownPartition, p, topicName, len(t.parts)-1)
	}
	return t.parts[p], nil
}

// Produce appends recs to one partition and calls done once they are durable
// (or failed) with the offset of the first record. Produce blocks only while
// the append queue is full (the disk is behind).
//
// done is never called on the caller's goroutine nor under an engine lock:
// callbacks of one partition run in append order on a goroutine of that
// partition. With FsyncAlways they run after the records are committed (a
// Fetch from done sees them); with FsyncInterval they run once the records
// are written, and the records are committed by the next timer fsync.
// done should not block for long: a blocked done delays the later
// completions of the same partition (only those). An append refused before
// it is queued (too large, quarantined partition, closed node) may complete
// before earlier appends of the partition do.
//
// In a cluster, done runs once the records are committed (a majority of
// the partition's replicas has them on disk); recs (and the bytes they
// point to) must not change until done is called, since records for a
// leader on another node are encoded when they are sent.
func (n *Node) Produce(topicName string, p int32, recs []log.Record, done func(base int64, err error)) {
	n.ProduceWith(topicName, p, recs, engine.ProduceOptions{}, done)
}

// ProduceWith is Produce with options. With opts.Acks AcksLeader, in a
// cluster, done runs once the records are durable on the partition's
// leader (this node or the one they are forwarded to), with the offset
// they were given there; they become visible to Fetch only once committed,
// and may be lost before (AcksLeader). On a single node it is Produce.
func (n *Node) ProduceWith(topicName string, p int32, recs []log.Record, opts engine.ProduceOptions, done func(base int64, err error)) {
	part, err := n.partition(topicName, p)
	if err != nil {
		go done(0, err) // not on the caller's goroutine, as promised
		return
	}
	if n.cl != nil {
		n.cl.produce(part, recs, opts.Acks, done)
		return
	}
	if ce := part.log.Quarantined(); ce != nil {
		part.compl.add(done, -1, part.quarantinedError(ce))
		return
	}
	part.log.AppendAsync(recs, func(base int64, err error) {
		switch {
		case err == nil:
		case errors.Is(err, log.ErrClosed):
			err = fmt.Errorf("%w: %w", engine.ErrClosed, err)
		case errors.Is(err, log.ErrQuarantined):
			err = fmt.Errorf("%w: %w", engine.ErrQuarantined, err)
		}
		part.compl.add(done, base, err)
	})
}

func (t *topic) notify() {
	t.mu.Lock()
	close(t.changed)
	t.changed = make(chan struct{})
	for w := range t.watchers {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
	t.mu.Unlock()
}

// Fetch reads committed records of one partition from offset on, at most about
// maxBytes (at least one record when any is there). It returns no records
// and no error at the end of the log. Below the log start it returns a
// *log.OffsetOutOfRangeError: the records expired (retention).
func (n *Node) Fetch(topicName string, p int32, offset int64, maxBytes int, dst []log.Record) ([]log.Record, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return dst, err
	}
	if part.log == nil {
		return n.cl.fetchRemote(part, offset, maxBytes, dst)
	}
	end := part.committed.Load()
	if offset >= end {
		return dst, nil
	}
	recs, err := part.log.Read(offset, maxBytes, end, dst)
	var ce *log.CorruptionError
	if errors.As(err, &ce) {
		// Damage: quarantine (reported once) and serve what precedes it. The
		// caller sees the end of what is served, not an error per poll.
		n.quarantine(part, ce)
		lim := part.committed.Load()
		for len(recs) > 0 && recs[len(recs)-1].Offset >= lim {
			recs = recs[:len(recs)-1]
		}
		return recs, nil
	}
	return recs, err
}

// Changed returns a channel that is closed when the committed end of any
// partition of the topic moves after the call. Take it before fetching, and
// wait on it when the fetch found nothing new.
func (n *Node) Changed(topicName string) (<-chan struct{}, error) {
	n.mu.RLock()
	t, ok := n.topics[topicName]
	n.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q: declare it under topics in the sidecar's config", engine.ErrUnknownTopic, topicName)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed, nil
}

// Offsets returns a partition's log start and committed end.
func (n *Node) Offsets(topicName string, p int32) (start, end int64, err error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, 0, err
	}
	if part.log == nil {
		return n.cl.offsetsRemote(part)
	}
	return part.log.StartOffset(), part.committed.Load(), nil
}

// OffsetForTime returns the first offset of the partition whose record was
// appended at or after ts.
func (n *Node) OffsetForTime(topicName string, p int32, ts time.Time) (int64, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, err
	}
	if part.log == nil {
		return 0, fmt.Errorf("engine: %s/%d: this node holds no replica of it; an offset by time is found on a node that does", topicName, p)
	}
	off, err := part.log.OffsetForTime(ts.UnixMilli())
	var ce *log.CorruptionError
	if errors.As(err, &ce) {
		n.quarantine(part, ce)
	}
	return min(off, part.committed.Load()), err
}

// LoadPositions returns a group's committed positions on a topic.
func (n *Node) LoadPositions(group, topicName string) (map[int32]groups.Position, error) {
	return n.groups.Load(group, topicName)
}

// CommitPositions durably records a group's positions on a topic.
func (n *Node) CommitPositions(group, topicName string, pos map[int32]groups.Position) error {
	return n.groups.Commit(group, topicName, pos)
}

// The embedded log implements every part of the seam.
var (
	_ engine.Backend          = (*Node)(nil)
	_ engine.ClusterAdmin     = (*Node)(nil)
	_ engine.GroupCoordinator = (*Node)(nil)
	_ engine.Quarantiner      = (*Node)(nil)
)
