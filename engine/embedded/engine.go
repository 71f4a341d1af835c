package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups"
	"github.com/spoolmq/spool/engine/internal/table"
	"github.com/spoolmq/spool/engine/log"
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
	// MaxPartitions is the node's partition budget: the most partitions of
	// all its topics together (0: DefaultMaxPartitions). A topic that would
	// pass it is refused with engine.ErrPartitionBudget.
	MaxPartitions int
	// MaxOpenFiles is the node's open-file budget: the most files its log
	// keeps open (log.FilesPerSegment per segment; see OpenFiles). A
	// new topic whose partitions would pass it is refused with
	// engine.ErrFileBudget (0: DefaultMaxOpenFiles of the process's
	// descriptor limit). Segments grow with data until retention deletes
	// them: the budget is checked when partitions are created, not when a
	// segment is rolled.
	MaxOpenFiles int
}

// DefaultMaxPartitions is Config.MaxPartitions's default. A partition
// holds three open files per segment (log, offset index, time index), so
// 4,096 partitions of one segment each take 12,288 descriptors.
const DefaultMaxPartitions = 4096

// Hooks tell the node's owner about events operators need to see
// (quarantined partitions); see table.Hooks.
type Hooks = table.Hooks

// Node is one node holding every partition of its topics in engine/log.
type Node struct {
	cfg    Config
	store  *log.Store
	groups *groups.Store
	tab    *table.Table[struct{}] // engine/embedded/LOCKS.md
}

type partition = table.Partition[struct{}]

// Open opens (or creates) the node's data dir. Call Run to start the
// appender, and Close when done.
func Open(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	st, gs, opts, err := table.OpenStorage(cfg.DataDir, cfg.Log, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Log = opts
	if cfg.MaxPartitions <= 0 {
		cfg.MaxPartitions = DefaultMaxPartitions
	}
	if cfg.MaxOpenFiles <= 0 {
		cfg.MaxOpenFiles = DefaultMaxOpenFiles(FileLimit())
	}
	return &Node{cfg: cfg, store: st, groups: gs, tab: table.New[struct{}](cfg.DataDir, cfg.Logger, cfg.Hooks.PartitionQuarantined)}, nil
}

// Run drives the log's appender until ctx ends.
func (n *Node) Run(ctx context.Context) error { return n.store.Run(ctx) }

// Close flushes and closes the log. Produce after Close fails with ErrClosed.
func (n *Node) Close() error { return n.store.Close() }

// SyncStats counts the syncs the log's append rounds made (LogOptions.SyncFileSystem).
func (n *Node) SyncStats() engine.SyncStats { return n.store.SyncStats() }

// DeleteTopic removes a topic: its partitions' files and every group's
// committed positions on it. Appends already queued are written first (and
// then deleted); later calls for the topic fail with ErrUnknownTopic, and a
// topic created again under the name starts empty at offset 0. The caller
// checks that nothing uses it (subscriptions). A crash in the middle leaves
// some files, which a later DeleteTopic (or the topic created again) finds;
// nothing half-deleted is served, since the topic is not reopened unless
// declared.
func (n *Node) DeleteTopic(name string) error {
	n.tab.Mu.Lock()
	t, ok := n.tab.Topics[name]
	if ok {
		delete(n.tab.Topics, name)
	}
	n.tab.Mu.Unlock()
	if !ok {
		return fmt.Errorf("%w %q", engine.ErrUnknownTopic, name)
	}
	t.Notify() // watchers look again and find it gone
	var errs []error
	for _, p := range t.Parts {
		errs = append(errs, n.store.Drop(engine.PartitionName(name, p.Num)))
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
		// Names starting with __ are the engine's internal topics.
		return fmt.Errorf("engine: topic %q: names starting with __ are reserved for internal topics; choose another name", spec.Name)
	}
	damaged, err := n.ensureTopic(spec)
	for _, p := range damaged { // reported with no lock held
		n.tab.Quarantine(p, p.Log.Quarantined())
	}
	return err
}

func (n *Node) ensureTopic(spec engine.TopicSpec) (damaged []*partition, err error) {
	if spec.Partitions < 1 {
		return nil, fmt.Errorf("engine: topic %q: %d partitions: need at least 1", spec.Name, spec.Partitions)
	}
	n.tab.Mu.Lock()
	defer n.tab.Mu.Unlock()
	if t, ok := n.tab.Topics[spec.Name]; ok {
		if t.Spec.Partitions != spec.Partitions {
			return nil, &engine.TopicConflictError{Topic: spec.Name, Stored: t.Spec.Partitions, Declared: spec.Partitions}
		}
		for _, p := range t.Parts {
			if err := p.Log.SetRetention(spec.RetentionAge, spec.RetentionBytes); err != nil {
				return nil, fmt.Errorf("engine: topic %q: %w", spec.Name, err)
			}
		}
		t.Spec = spec
		return nil, nil
	}
	if err := n.admitLocked(spec); err != nil {
		return nil, err
	}
	if stored := n.storedPartitions(spec.Name); stored > spec.Partitions {
		return nil, &engine.TopicConflictError{Topic: spec.Name, Stored: stored, Declared: spec.Partitions}
	}
	t := table.NewTopic[struct{}](spec.Name, spec)
	for p := range spec.Partitions {
		lp, err := n.store.Partition(engine.PartitionName(spec.Name, p))
		if err != nil {
			return nil, fmt.Errorf("engine: topic %q partition %d: %w", spec.Name, p, err)
		}
		if err := lp.SetRetention(spec.RetentionAge, spec.RetentionBytes); err != nil {
			return nil, fmt.Errorf("engine: topic %q: %w", spec.Name, err)
		}
		part := table.NewPartition(t, p)
		part.Log = lp
		if ce := lp.Quarantined(); ce != nil {
			part.Limit.Store(ce.Offset) // the log opened only what precedes the damage
			damaged = append(damaged, part)
		}
		// What is durable here is committed.
		lp.SetOnDurable(part.SetCommitted)
		part.Committed.Store(min(lp.DurableOffset(), part.Limit.Load()))
		t.Parts = append(t.Parts, part)
	}
	n.tab.Topics[spec.Name] = t
	return damaged, nil
}

// admitLocked refuses a new topic whose name folds to an open topic's or
// to one whose partitions are on disk, and one that would pass the
// partition budget or the open-file budget. Called with n.tab.Mu held.
func (n *Node) admitLocked(spec engine.TopicSpec) error {
	for name := range n.tab.Topics {
		if strings.EqualFold(name, spec.Name) {
			return fmt.Errorf("engine: topic %q: topic %q exists: %w would share a directory on a case-insensitive file system: choose another name", spec.Name, name, engine.ErrTopicNameCase)
		}
	}
	for _, pn := range n.store.Partitions() {
		if i := strings.LastIndexByte(pn, '-'); i > 0 && pn[:i] != spec.Name && strings.EqualFold(pn[:i], spec.Name) {
			return fmt.Errorf("engine: topic %q: topic %q is on disk: %w would share a directory on a case-insensitive file system: choose another name", spec.Name, pn[:i], engine.ErrTopicNameCase)
		}
	}
	used := n.partitionsLocked()
	if used+int(spec.Partitions) > n.cfg.MaxPartitions {
		return fmt.Errorf("engine: topic %q: %w: this node has %d partitions and the topic asks for %d more, past %d (guards.max_node_partitions): create it with fewer partitions, delete topics, or raise the budget with the file descriptor limit",
			spec.Name, engine.ErrPartitionBudget, used, spec.Partitions, n.cfg.MaxPartitions)
	}
	// Partitions already on disk reopen with the segments they grew to:
	// refusing them would hide their data; the high-water warning
	// (spool_open_files) reports what they take.
	fresh := int(spec.Partitions - min(n.storedPartitions(spec.Name), spec.Partitions))
	open, need := n.store.OpenFiles(), log.FilesPerSegment*fresh
	if fresh > 0 && open+need > n.cfg.MaxOpenFiles {
		return fmt.Errorf("engine: topic %q: %w: this node's log keeps %d files open and the topic's %d new partitions need %d more, past %d (guards.max_open_files): create it with fewer partitions, delete topics, shorten retention or grow segment_bytes, or raise the budget with the file descriptor limit",
			spec.Name, engine.ErrFileBudget, open, fresh, need, n.cfg.MaxOpenFiles)
	}
	return nil
}

func (n *Node) partitionsLocked() int {
	used := 0
	for _, t := range n.tab.Topics {
		used += len(t.Parts)
	}
	return used
}

// PartitionBudget returns the partitions of the node's topics and its
// budget (Config.MaxPartitions).
func (n *Node) PartitionBudget() (used, limit int) {
	n.tab.Mu.RLock()
	defer n.tab.Mu.RUnlock()
	return n.partitionsLocked(), n.cfg.MaxPartitions
}

// Topics returns the declared topics, sorted by name.
func (n *Node) Topics() []engine.TopicSpec { return n.tab.Specs() }

// Partitions returns the number of partitions of a topic.
func (n *Node) Partitions(topicName string) (int32, error) { return n.tab.Partitions(topicName) }

func (n *Node) partition(topicName string, p int32) (*partition, error) {
	return n.tab.Partition(topicName, p)
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
func (n *Node) Produce(topicName string, p int32, recs []log.Record, done func(base int64, err error)) {
	n.ProduceWith(topicName, p, recs, engine.ProduceOptions{}, done)
}

// ProduceWith is Produce: on one node the options change nothing (acks
// leader is acks all).
func (n *Node) ProduceWith(topicName string, p int32, recs []log.Record, _ engine.ProduceOptions, done func(base int64, err error)) {
	part, err := n.partition(topicName, p)
	if err != nil {
		go done(0, err) // not on the caller's goroutine, as promised
		return
	}
	if ce := part.Log.Quarantined(); ce != nil {
		part.Compl.Add(done, -1, part.QuarantinedError(ce))
		return
	}
	part.Log.AppendAsync(recs, func(base int64, err error) {
		switch {
		case err == nil:
		case errors.Is(err, log.ErrClosed):
			err = fmt.Errorf("%w: %w", engine.ErrClosed, err)
		case errors.Is(err, log.ErrQuarantined):
			err = fmt.Errorf("%w: %w", engine.ErrQuarantined, err)
		}
		part.Compl.Add(done, base, err)
	})
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
	return n.tab.Read(part, offset, maxBytes, dst)
}

// Changed returns a channel that is closed when the committed end of any
// partition of the topic moves after the call. Take it before fetching, and
// wait on it when the fetch found nothing new.
func (n *Node) Changed(topicName string) (<-chan struct{}, error) { return n.tab.Changed(topicName) }

// Watch registers ch to be signalled, without blocking, whenever the
// committed end of any partition of the given topics moves. ch should have
// a capacity of 1: a signal already pending is enough. cancel unregisters.
func (n *Node) Watch(topics []string, ch chan<- struct{}) (cancel func(), err error) {
	return n.tab.Watch(topics, ch)
}

// Offsets returns a partition's log start and committed end.
func (n *Node) Offsets(topicName string, p int32) (start, end int64, err error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, 0, err
	}
	return part.Log.StartOffset(), part.Committed.Load(), nil
}

// OffsetForTime returns the first offset of the partition whose record was
// appended at or after ts.
func (n *Node) OffsetForTime(topicName string, p int32, ts time.Time) (int64, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, err
	}
	return n.tab.OffsetForTime(part, ts)
}

// RecordTime returns the append time, in Unix milliseconds, of the record at
// offset (for lag in seconds). It reads the header of the batch holding the
// offset, not the batch: the records of one append share its time.
func (n *Node) RecordTime(topicName string, p int32, offset int64) (int64, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, err
	}
	if end := part.Committed.Load(); offset >= end {
		return 0, fmt.Errorf("engine: %s/%d: no record at offset %d (the committed end is %d)", topicName, p, offset, end)
	}
	return n.tab.RecordTime(part, offset)
}

// Quarantined lists the quarantined partitions, by topic and partition.
func (n *Node) Quarantined() []engine.Quarantine { return n.tab.Quarantined() }

// LoadPositions returns a group's committed positions on a topic.
func (n *Node) LoadPositions(group, topicName string) (map[int32]groups.Position, error) {
	return n.groups.Load(group, topicName)
}

// CommitPositions durably records a group's positions on a topic.
func (n *Node) CommitPositions(group, topicName string, pos map[int32]groups.Position) error {
	return n.groups.Commit(group, topicName, pos)
}

// The single node implements every part of the seam; its cluster
// administration and group coordination say it is not in a cluster
// (engine/cluster is).
var (
	_ engine.Backend          = (*Node)(nil)
	_ engine.ClusterAdmin     = (*Node)(nil)
	_ engine.GroupCoordinator = (*Node)(nil)
	_ engine.Quarantiner      = (*Node)(nil)
)
