package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/groups"
	"github.com/spoolmq/spool/engine/internal/table"
	"github.com/spoolmq/spool/engine/log"
	"github.com/spoolmq/spool/engine/meta"
	"github.com/spoolmq/spool/engine/transport"
)

// Config configures a cluster Node.
type Config struct {
	// DataDir holds the log (DataDir/log), group positions (DataDir/groups),
	// the node's identity (DataDir/cluster) and its replicas' raft state
	// (DataDir/raft).
	DataDir string
	// Log configures the partition log of this node.
	Log log.Options
	// Hooks report events operators need (quarantined partitions).
	Hooks table.Hooks
	// Logger receives operational events; nil means slog.Default().
	Logger *slog.Logger
	// Cluster makes the node a member of a replicated cluster
	// (docs/replication.md), or a storage-off node of one.
	Cluster ClusterConfig
}

// part is what a cluster node keeps of a partition beside the shared
// table's: where its replicas are and this node's part in them.
type part struct {
	// raftGroup places the partition in the cluster: the raft group of its
	// replicas (0 while the topic waits for enough nodes); placing a topic
	// replaces its partition values. mem is its replica set, which replica
	// moves change (nil with raft group 0).
	raftGroup uint64
	mem       atomic.Pointer[replicaSet]
	// replica is the raft id of this node's replica (transport.ReplicaID;
	// 0 when the partition has no log here).
	replica   uint64
	fwdMu     sync.Mutex    // a leaf: guards fwd
	fwd       forwarder     // records on their way to the leader (cluster_forward.go)
	producers producerTable // the last batch of each producer (cluster_dedupe.go)
	// remoteEnd is the highest committed end the other replicas reported
	// while this node's replica was stopped, or before this copy served
	// here (keepReportedEnd: the partition was read from the others, or
	// from a learner's copy): reads go to them until the local replica has
	// caught up past it (readsRemote).
	remoteEnd atomic.Int64
}

type (
	partition = table.Partition[part]
	topic     = table.Topic[part]
)

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

// replicas are the nodes holding the partition (nil while unplaced).
func (x *part) replicas() []uint64 {
	if m := x.mem.Load(); m != nil {
		return m.replicas
	}
	return nil
}

// holders are the nodes holding a replica or getting one: the replicas,
// then the move's target nodes not among them. Any of them can name the
// leader.
func (x *part) holders() []uint64 {
	m := x.mem.Load()
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

// Open opens (or creates) the node's data dir and its identity (a node
// with none joins at Run). Call Run, and Close when done.
func Open(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	st, gs, opts, err := table.OpenStorage(cfg.DataDir, cfg.Log, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Log = opts
	n := &Node{conf: cfg, store: st, groups: gs}
	n.tab = table.New[part](cfg.DataDir, cfg.Logger, func(q engine.Quarantine) {
		n.quarantines.Add(1)
		if cfg.Hooks.PartitionQuarantined != nil {
			cfg.Hooks.PartitionQuarantined(q)
		}
	})
	if err := n.init(cfg.Cluster); err != nil {
		_ = st.Close()
		return nil, err
	}
	return n, nil
}

// Run drives the log's appender, the replicas, the transport and the
// controller until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	storeErr := make(chan error, 1)
	storeCtx, stopStore := context.WithCancel(context.Background())
	go func() { storeErr <- n.store.Run(storeCtx) }() // owned: stopped after the replicas
	err := n.role.run(ctx)
	stopStore()
	return errors.Join(err, <-storeErr)
}

// Close flushes and closes the log. Produce after Close fails with ErrClosed.
func (n *Node) Close() error { return n.store.Close() }

// SyncStats counts the syncs the log's append rounds made.
func (n *Node) SyncStats() engine.SyncStats { return n.store.SyncStats() }

// OpenFiles returns the files the node keeps open: its log's
// (log.Store.OpenFiles: the replicas it holds and the controller's log)
// and the raft state file of each replica, the controller's included.
// Nothing here refuses a replica placed past a budget: the controller
// places them, bounded by meta.MaxTotalPartitions (docs/security.md).
func (n *Node) OpenFiles() int {
	open := n.store.OpenFiles()
	if m, ok := n.role.(*member); ok && m.started.Load() {
		open += m.host.Stats().Groups // one raft.StateStore each
	}
	return open
}

// DeleteTopic deletes the topic on every node (cluster_delete.go): refused
// with ErrTopicInUse while a consumer group's member subscribes to it, with
// ErrDeleteUnsupported for internal topics and on a storage-off node. It
// returns once this node has applied the deletion; the other nodes apply it
// as they apply the controller's log.
func (n *Node) DeleteTopic(name string) error { return n.role.deleteTopic(name) }

// EnsureTopic records a topic in the controller (idempotent) and waits
// until this node knows it. Declaring fewer partitions than the topic has
// is refused (keys would lose their order).
func (n *Node) EnsureTopic(spec engine.TopicSpec) error {
	if strings.HasPrefix(spec.Name, "__") {
		// The engine's internal topics (meta.GroupsTopic) are its own.
		return fmt.Errorf("engine: topic %q: names starting with __ are reserved for internal topics; choose another name", spec.Name)
	}
	if spec.Partitions < 1 {
		return fmt.Errorf("engine: topic %q: %d partitions: need at least 1", spec.Name, spec.Partitions)
	}
	return n.ensureTopic(spec)
}

// Topics returns the declared topics, sorted by name (not the internal ones).
func (n *Node) Topics() []engine.TopicSpec { return n.tab.Specs() }

// Partitions returns the number of partitions of a topic.
func (n *Node) Partitions(topicName string) (int32, error) { return n.tab.Partitions(topicName) }

func (n *Node) partition(topicName string, p int32) (*partition, error) {
	return n.tab.Partition(topicName, p)
}

// Produce appends recs to one partition and calls done once they are
// committed (a majority of the partition's replicas has them on disk), or
// failed, with the offset of the first record. It follows engine.Backend's
// contract; recs (and the bytes they point to) must not change until done
// is called, since records for a leader on another node are encoded when
// they are sent.
func (n *Node) Produce(topicName string, p int32, recs []log.Record, done func(base int64, err error)) {
	n.ProduceWith(topicName, p, recs, engine.ProduceOptions{}, done)
}

// ProduceWith is Produce with options. With opts.Acks AcksLeader, done
// runs once the records are durable on the partition's leader (this node or
// the one they are forwarded to), with the offset they were given there;
// they become visible to Fetch only once committed, and may be lost before.
func (n *Node) ProduceWith(topicName string, p int32, recs []log.Record, opts engine.ProduceOptions, done func(base int64, err error)) {
	part, err := n.partition(topicName, p)
	if err != nil {
		go done(0, err) // not on the caller's goroutine, as promised
		return
	}
	n.produce(part, recs, opts, done)
}

// Fetch reads committed records of one partition from offset on, at most
// about maxBytes: from this node's replica, or from one that has it.
func (n *Node) Fetch(topicName string, p int32, offset int64, maxBytes int, dst []log.Record) ([]log.Record, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return dst, err
	}
	if n.readsRemote(part) {
		return n.fetchRemote(part, offset, maxBytes, dst)
	}
	return n.tab.Read(part, offset, maxBytes, dst)
}

// readsRemote: part is read from the other replicas, not from this node's
// log — it holds none, or its replica stopped (a full disk) and has not
// caught up past what the others served since. Committed records are the
// same on every replica, so a consumer here goes on from where it was.
func (n *Node) readsRemote(part *partition) bool {
	if part.Log == nil {
		return true
	}
	if part.X.raftGroup == 0 {
		return false
	}
	return n.role.replicaStopped(part.X.raftGroup) || part.Committed.Load() < part.X.remoteEnd.Load()
}

// noteRemoteEnd takes a committed end another replica reported: the
// committed end of a partition without a log here (its watchers are
// signalled); for a local replica read remotely, the end reads go to,
// which never moves the local committed end (the local log may not hold
// it yet), and its watchers are signalled when it moves.
func noteRemoteEnd(part *partition, end int64) {
	if part.Log == nil {
		part.SetCommitted(end)
		return
	}
	for {
		cur := part.X.remoteEnd.Load()
		if end <= cur {
			return
		}
		if part.X.remoteEnd.CompareAndSwap(cur, end) {
			part.Topic.Notify()
			return
		}
	}
}

// Changed returns a channel that is closed when the committed end of any
// partition of the topic moves after the call.
func (n *Node) Changed(topicName string) (<-chan struct{}, error) { return n.tab.Changed(topicName) }

// Watch registers ch to be signalled, without blocking, whenever the
// committed end of any partition of the given topics moves.
func (n *Node) Watch(topics []string, ch chan<- struct{}) (cancel func(), err error) {
	return n.tab.Watch(topics, ch)
}

// Offsets returns a partition's log start and committed end. Without a
// replica here they come from one that has it, and the committed end is
// never less than one reported before: the replica that answers may lag
// (just restarted, or cut off from its leader), and what was committed
// stays committed.
func (n *Node) Offsets(topicName string, p int32) (start, end int64, err error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, 0, err
	}
	if part.Log == nil {
		start, end, err := n.offsetsRemote(part)
		return start, max(end, part.Committed.Load()), err
	}
	return part.Log.StartOffset(), max(part.Committed.Load(), part.X.remoteEnd.Load()), nil
}

// OffsetForTime returns the first offset of the partition whose record was
// appended at or after ts.
func (n *Node) OffsetForTime(topicName string, p int32, ts time.Time) (int64, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, err
	}
	if part.Log == nil {
		return 0, fmt.Errorf("engine: %s/%d: this node holds no replica of it; an offset by time is found on a node that does", topicName, p)
	}
	return n.tab.OffsetForTime(part, ts)
}

// RecordTime returns the append time, in Unix milliseconds, of the record
// at offset (for lag in seconds).
func (n *Node) RecordTime(topicName string, p int32, offset int64) (int64, error) {
	part, err := n.partition(topicName, p)
	if err != nil {
		return 0, err
	}
	if end := part.Committed.Load(); offset >= end {
		return 0, fmt.Errorf("engine: %s/%d: no record at offset %d (the committed end is %d)", topicName, p, offset, end)
	}
	if part.Log == nil {
		return 0, fmt.Errorf("engine: %s/%d: this node holds no replica of it (lag in seconds is reported by the nodes that do)", topicName, p)
	}
	return n.tab.RecordTime(part, offset)
}

// Quarantined lists the quarantined partitions of this node's replicas.
func (n *Node) Quarantined() []engine.Quarantine { return n.tab.Quarantined() }

// LoadPositions returns a group's committed positions on a topic.
func (n *Node) LoadPositions(group, topicName string) (map[int32]groups.Position, error) {
	return n.groups.Load(group, topicName)
}

// CommitPositions durably records a group's positions on a topic.
func (n *Node) CommitPositions(group, topicName string, pos map[int32]groups.Position) error {
	return n.groups.Commit(group, topicName, pos)
}

// A cluster node implements every part of the seam.
var (
	_ engine.Backend          = (*Node)(nil)
	_ engine.ClusterAdmin     = (*Node)(nil)
	_ engine.GroupCoordinator = (*Node)(nil)
	_ engine.Quarantiner      = (*Node)(nil)
)
