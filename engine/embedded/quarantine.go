package embedded

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spoolmq/spool/engine/log"
)

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
