// Package table is what both implementations of Spool's own log share: the
// topic table, topics and their partitions, the watchers of committed ends,
// the per-partition completion queue, the committed end with its quarantine
// limit, and the local read path with the reporting of damage. The single
// node (engine/embedded) and the cluster node (engine/cluster) each keep
// one Table; a cluster node's partitions carry its own fields in X (the
// raft group, the replica set, ...), a single node's carry nothing.
//
// Lock order: Table.Mu, then a topic's watcher lock; the completer's lock
// is a leaf. Hooks and the quarantine log run with no lock held.
package table

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// Table is a node's topics.
type Table[X any] struct {
	// Mu guards Topics, and each topic's Spec, Parts and Learning.
	Mu     sync.RWMutex
	Topics map[string]*Topic[X]

	dataDir      string
	logger       *slog.Logger
	onQuarantine func(engine.Quarantine)
}

// New returns an empty table. dataDir names the node's data dir in the
// repair hint of a quarantine; onQuarantine (may be nil) is told of each
// partition quarantined, once.
func New[X any](dataDir string, logger *slog.Logger, onQuarantine func(engine.Quarantine)) *Table[X] {
	return &Table[X]{Topics: map[string]*Topic[X]{}, dataDir: dataDir, logger: logger, onQuarantine: onQuarantine}
}

// Topic is one topic of a table.
type Topic[X any] struct {
	Name string           // immutable: read without Table.Mu
	Spec engine.TopicSpec // Table.Mu
	// Parts are the partitions by number (Table.Mu); a cluster node
	// replaces a partition's value when its placement changes.
	Parts []*Partition[X]
	// Learning are a cluster node's replicas of partitions it is getting
	// in a replica move, by partition number (Table.Mu).
	Learning map[int32]*Partition[X]

	mu       sync.Mutex            // guards changed and watchers
	changed  chan struct{}         // closed and replaced when a partition's committed end moves
	watchers map[*watcher]struct{} // signalled (without blocking) when a partition's end moves
}

// NewTopic returns a topic with no partitions.
func NewTopic[X any](name string, spec engine.TopicSpec) *Topic[X] {
	return &Topic[X]{Name: name, Spec: spec, changed: make(chan struct{}), Learning: map[int32]*Partition[X]{}}
}

// Notify signals the topic's watchers and closes its change channel: a
// committed end moved, or the topic changed (placed, deleted).
func (t *Topic[X]) Notify() {
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

// Watched reports whether someone watches the topic.
func (t *Topic[X]) Watched() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.watchers) > 0
}

type watcher struct{ ch chan<- struct{} }

// NoLimit is Partition.Limit while the partition is healthy.
const NoLimit = math.MaxInt64

// Partition is one topic partition. It keeps the two ends of the log that
// replication tells apart: the durable end (log.Partition.DurableOffset:
// fsynced on this node) and the committed end (what readers may see).
type Partition[X any] struct {
	Topic *Topic[X]
	Num   int32
	// Log is the partition's log on this node; nil on a cluster node that
	// holds no replica of it (reads and writes go to peers).
	Log *log.Partition
	// X is the implementation's own state of the partition.
	X X
	// Committed is the end Fetch, Offsets and notifications use.
	Committed atomic.Int64
	// Compl runs Produce callbacks off the appender.
	Compl Completer
	// Limit caps Committed once the partition is quarantined (NoLimit
	// until then): nothing at or past the damage is served.
	Limit    atomic.Int64
	reported atomic.Bool // the quarantine was logged and hooked
}

// NewPartition returns partition num of t, healthy, with no log.
func NewPartition[X any](t *Topic[X], num int32) *Partition[X] {
	p := &Partition[X]{Topic: t, Num: num}
	p.Limit.Store(NoLimit)
	return p
}

// SetCommitted moves the committed end up to end (never down, never past
// the quarantine limit) and signals the topic's watchers when it moved.
func (p *Partition[X]) SetCommitted(end int64) {
	for {
		cur := p.Committed.Load()
		lim := min(end, p.Limit.Load())
		if lim <= cur {
			return
		}
		if p.Committed.CompareAndSwap(cur, lim) {
			p.Topic.Notify()
			return
		}
	}
}

// Topic returns a topic by name.
func (tab *Table[X]) Topic(name string) (*Topic[X], bool) {
	tab.Mu.RLock()
	defer tab.Mu.RUnlock()
	t, ok := tab.Topics[name]
	return t, ok
}

// Partition returns partition p of a topic.
func (tab *Table[X]) Partition(topicName string, p int32) (*Partition[X], error) {
	tab.Mu.RLock()
	defer tab.Mu.RUnlock()
	t, ok := tab.Topics[topicName]
	if !ok {
		return nil, UnknownTopic(topicName)
	}
	if p < 0 || int(p) >= len(t.Parts) {
		return nil, fmt.Errorf("%w %d of topic %q: it has partitions 0..%d", engine.ErrUnknownPartition, p, topicName, len(t.Parts)-1)
	}
	return t.Parts[p], nil
}

// UnknownTopic is the error for a topic a table does not have.
func UnknownTopic(name string) error {
	return fmt.Errorf("%w %q: declare it under topics in the sidecar's config", engine.ErrUnknownTopic, name)
}

// Partitions returns the number of partitions of a topic.
func (tab *Table[X]) Partitions(topicName string) (int32, error) {
	tab.Mu.RLock()
	defer tab.Mu.RUnlock()
	t, ok := tab.Topics[topicName]
	if !ok {
		return 0, UnknownTopic(topicName)
	}
	return t.Spec.Partitions, nil
}

// Specs returns the declared topics, sorted by name (not the internal
// ones, whose names start with "__").
func (tab *Table[X]) Specs() []engine.TopicSpec {
	tab.Mu.RLock()
	defer tab.Mu.RUnlock()
	out := make([]engine.TopicSpec, 0, len(tab.Topics))
	for _, t := range tab.Topics {
		if !strings.HasPrefix(t.Name, "__") {
			out = append(out, t.Spec)
		}
	}
	slices.SortFunc(out, func(a, b engine.TopicSpec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Watch registers ch to be signalled, without blocking, whenever the
// committed end of any partition of the given topics moves. cancel
// unregisters.
func (tab *Table[X]) Watch(topics []string, ch chan<- struct{}) (cancel func(), err error) {
	ts := make([]*Topic[X], 0, len(topics))
	tab.Mu.RLock()
	for _, name := range topics {
		t, ok := tab.Topics[name]
		if !ok {
			tab.Mu.RUnlock()
			return nil, UnknownTopic(name)
		}
		ts = append(ts, t)
	}
	tab.Mu.RUnlock()
	w := &watcher{ch: ch}
	for _, t := range ts {
		t.mu.Lock()
		if t.watchers == nil {
			t.watchers = map[*watcher]struct{}{}
		}
		t.watchers[w] = struct{}{}
		t.mu.Unlock()
	}
	return func() {
		for _, t := range ts {
			t.mu.Lock()
			delete(t.watchers, w)
			t.mu.Unlock()
		}
	}, nil
}

// Changed returns a channel closed when the committed end of any partition
// of the topic moves after the call.
func (tab *Table[X]) Changed(topicName string) (<-chan struct{}, error) {
	t, ok := tab.Topic(topicName)
	if !ok {
		return nil, UnknownTopic(topicName)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed, nil
}

// Read reads committed records of a partition held here from offset on,
// at most about maxBytes. Damage quarantines the partition (reported once)
// and serves what precedes it.
func (tab *Table[X]) Read(p *Partition[X], offset int64, maxBytes int, dst []log.Record) ([]log.Record, error) {
	end := p.Committed.Load()
	if offset >= end {
		return dst, nil
	}
	recs, err := p.Log.Read(offset, maxBytes, end, dst)
	var ce *log.CorruptionError
	if errors.As(err, &ce) {
		// The caller sees the end of what is served, not an error per poll.
		tab.Quarantine(p, ce)
		lim := p.Committed.Load()
		for len(recs) > 0 && recs[len(recs)-1].Offset >= lim {
			recs = recs[:len(recs)-1]
		}
		return recs, nil
	}
	return recs, err
}

// RecordTime returns the append time (Unix ms) of the record at offset of
// a partition held here (the header of the batch holding it).
func (tab *Table[X]) RecordTime(p *Partition[X], offset int64) (int64, error) {
	ts, err := p.Log.BatchTime(offset)
	var ce *log.CorruptionError
	if errors.As(err, &ce) {
		tab.Quarantine(p, ce)
	}
	return ts, err
}

// OffsetForTime returns the first offset of a partition held here whose
// record was appended at or after ts (at most the committed end).
func (tab *Table[X]) OffsetForTime(p *Partition[X], ts time.Time) (int64, error) {
	off, err := p.Log.OffsetForTime(ts.UnixMilli())
	var ce *log.CorruptionError
	if errors.As(err, &ce) {
		tab.Quarantine(p, ce)
	}
	return min(off, p.Committed.Load()), err
}

// Quarantined lists the quarantined partitions held here, by topic and
// partition.
func (tab *Table[X]) Quarantined() []engine.Quarantine {
	tab.Mu.RLock()
	var out []engine.Quarantine
	for _, t := range tab.Topics {
		for _, p := range t.Parts {
			if p.Log == nil {
				continue
			}
			if ce := p.Log.Quarantined(); ce != nil {
				out = append(out, p.Describe(ce))
			}
		}
	}
	tab.Mu.RUnlock()
	slices.SortFunc(out, func(a, b engine.Quarantine) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return out
}

// Describe is the quarantine of p, whose damage ce is.
func (p *Partition[X]) Describe(ce *log.CorruptionError) engine.Quarantine {
	return engine.Quarantine{Topic: p.Topic.Name, Partition: p.Num, File: ce.File, Position: ce.Position, Offset: p.Limit.Load(), Reason: ce.Reason}
}

// Quarantine stops serving the partition at the damage ce found by a read
// (or by recovery), refuses appends, and reports it once: an ERROR log line
// and the hook. A later, lower damage only lowers how far it serves.
func (tab *Table[X]) Quarantine(p *Partition[X], ce *log.CorruptionError) {
	end := ce.Offset
	if end < 0 {
		end = p.Committed.Load() // unknown: serve nothing more than today
	}
	lowerTo(&p.Limit, end) // before committed: SetCommitted reads the limit
	lowerTo(&p.Committed, end)
	p.Log.Quarantine(ce) // refuses appends; keeps the first damage found
	if !p.reported.CompareAndSwap(false, true) {
		return // reported already
	}
	q := p.Describe(p.Log.Quarantined())
	tab.logger.Error("engine: partition quarantined: its data is damaged; it serves records below the damage and refuses publishes until repaired",
		"topic", q.Topic, "partition", q.Partition, "file", q.File, "position", q.Position, "offset", q.Offset,
		"reason", q.Reason, "repair", fmt.Sprintf("stop spoold, then: spoold repair --data-dir %s --partition %s (docs/operations.md)",
			tab.dataDir, engine.PartitionName(q.Topic, q.Partition)))
	if tab.onQuarantine != nil {
		tab.onQuarantine(q)
	}
}

// QuarantinedError is what Produce to a quarantined partition fails with.
func (p *Partition[X]) QuarantinedError(ce *log.CorruptionError) error {
	return fmt.Errorf("%w: %s/%d: %s at byte %d of %s; it refuses publishes until an operator repairs it (spoold repair --partition %s, docs/operations.md)",
		engine.ErrQuarantined, p.Topic.Name, p.Num, ce.Reason, ce.Position, ce.File, engine.PartitionName(p.Topic.Name, p.Num))
}

// lowerTo sets v to min(v, x).
func lowerTo(v interface {
	Load() int64
	CompareAndSwap(old, new int64) bool
}, x int64) {
	for {
		cur := v.Load()
		if x >= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// Hooks tell the node's owner about events operators need to see (metrics,
// readiness detail). Each runs with no engine lock held, on the goroutine
// that found the event, and must not block. Nil fields are skipped.
type Hooks struct {
	// PartitionQuarantined is called once per partition when it is
	// quarantined: at open (EnsureTopic) or when a read finds damage.
	PartitionQuarantined func(engine.Quarantine)
	// PartitionRepaired is called when a quarantined partition's damaged
	// data is gone and it serves again (in a cluster: the damaged replica
	// replaced by a new copy, engine/cluster/cluster_repair.go).
	PartitionRepaired func(topic string, partition int32)
}
