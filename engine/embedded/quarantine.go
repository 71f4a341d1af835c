package embedded

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spoolmq/spool/engine"
	"github.com/spoolmq/spool/engine/log"
)

// Hooks tell the node's owner about events operators need to see (metrics,
// readiness detail). Each runs with no engine lock held, on the goroutine
// that found the event, and must not block. Nil fields are skipped.
type Hooks struct {
	// PartitionQuarantined is called once per partition when it is
	// quarantined: at open (EnsureTopic) or when a read finds damage.
	PartitionQuarantined func(engine.Quarantine)
}

// Quarantined lists the quarantined partitions, by topic and partition.
func (n *Node) Quarantined() []engine.Quarantine {
	n.mu.RLock()
	var out []engine.Quarantine
	for _, t := range n.topics {
		for _, p := range t.parts {
			if p.log == nil {
				continue
			}
			if ce := p.log.Quarantined(); ce != nil {
				out = append(out, p.describe(ce))
			}
		}
	}
	n.mu.RUnlock()
	slices.SortFunc(out, func(a, b engine.Quarantine) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return out
}

func (p *partition) describe(ce *log.CorruptionError) engine.Quarantine {
	return engine.Quarantine{Topic: p.topic.name, Partition: p.num, File: ce.File, Position: ce.Position, Offset: p.limit.Load(), Reason: ce.Reason}
}

// quarantine stops serving the partition at the damage ce found by a read
// (or by recovery), refuses appends, and reports it once: an ERROR log line
// and the PartitionQuarantined hook. A later, lower damage only lowers how
// far the partition serves.
func (n *Node) quarantine(p *partition, ce *log.CorruptionError) {
	end := ce.Offset
	if end < 0 {
		end = p.committed.Load() // unknown: serve nothing more than today
	}
	lowerTo(&p.limit, end) // before committed: setCommitted reads limit
	lowerTo(&p.committed, end)
	p.log.Quarantine(ce) // refuses appends; keeps the first damage found
	if !p.reported.CompareAndSwap(false, true) {
		return // reported already
	}
	q := p.describe(p.log.Quarantined())
	n.cfg.Logger.Error("engine: partition quarantined: its data is damaged; it serves records below the damage and refuses publishes until repaired",
		"topic", q.Topic, "partition", q.Partition, "file", q.File, "position", q.Position, "offset", q.Offset,
		"reason", q.Reason, "repair", fmt.Sprintf("stop spoold, then: spoold repair --data-dir %s --partition %s (docs/operations.md)",
			n.cfg.DataDir, engine.PartitionName(q.Topic, q.Partition)))
	if h := n.cfg.Hooks.PartitionQuarantined; h != nil {
		h(q)
	}
}

// quarantinedError is what Produce to a quarantined partition fails with.
func (p *partition) quarantinedError(ce *log.CorruptionError) error {
	return fmt.Errorf("%w: %s/%d: %s at byte %d of %s; it refuses publishes until an operator repairs it (spoold repair --partition %s, docs/operations.md)",
		engine.ErrQuarantined, p.topic.name, p.num, ce.Reason, ce.Position, ce.File, engine.PartitionName(p.topic.name, p.num))
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

// noLimit is partition.limit while the partition is healthy.
const noLimit = math.MaxInt64

// RepairResult says what RepairPartition did.
type RepairResult struct {
	// Repaired is false when the partition was intact: nothing was done.
	Repaired bool
	// File, Position and Reason locate the damage that was cut off.
	File     string
	Position int64
	Reason   string
	// End is the partition's end after the repair: records from End on were
	// dropped, and the next publish gets offset End.
	End             int64
	BytesDropped    int64
	SegmentsRemoved int
}

// RepairPartition truncates a damaged partition ("<topic>-<n>", as named in
// the data dir) to its last good offset: the damaged segment is cut before
// its first bad batch and every later segment is deleted. It opens the data
// dir itself, so spoold must be stopped (the data dir is locked while it
// runs). Records after the damage are lost on this node; once replication
// exists a replica re-fetches them from the leader instead.
func RepairPartition(cfg Config, name string) (RepairResult, error) {
	if cfg.DataDir == "" {
		return RepairResult{}, errors.New("engine: repair: no data dir: pass the node's data_dir")
	}
	if cfg.Logger != nil && cfg.Log.Logger == nil {
		cfg.Log.Logger = cfg.Logger
	}
	st, err := log.OpenStore(filepath.Join(cfg.DataDir, "log"), cfg.Log)
	if errors.Is(err, log.ErrLocked) {
		return RepairResult{}, fmt.Errorf("engine: repair %s: %w: stop spoold first (a partition is repaired offline)", name, err)
	}
	if err != nil {
		return RepairResult{}, fmt.Errorf("engine: repair %s: %w", name, err)
	}
	res, err := st.Repair(name)
	if cerr := st.Close(); err == nil && cerr != nil && !errors.Is(cerr, log.ErrClosed) {
		err = cerr
	}
	out := RepairResult{Repaired: res.Repaired, End: res.End, BytesDropped: res.BytesDropped, SegmentsRemoved: len(res.SegmentsRemoved)}
	if d := res.Damage; d != nil {
		out.File, out.Position, out.Reason = d.File, d.Position, d.Reason
	}
	if err != nil {
		return out, fmt.Errorf("engine: repair %s: %w", name, err)
	}
	return out, nil
}
