package log

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// RepairResult says what Store.Repair did to a partition.
type RepairResult struct {
	// Repaired is false when the partition was found intact (nothing done).
	Repaired bool
	// Damage is the corruption found (nil when intact).
	Damage *CorruptionError
	// End is the partition's end offset after the repair: the next append
	// gets this offset. Records from End on were dropped.
	End int64
	// BytesDropped counts bytes cut from the damaged segment and in the
	// segments removed after it.
	BytesDropped int64
	// SegmentsRemoved lists the segment files deleted after the damaged one.
	SegmentsRemoved []string
}

// Repair truncates a damaged partition to its last good offset: the damaged
// segment is cut just before the first bad batch, every later segment is
// deleted, indexes are rebuilt and a damaged log-start file is rewritten,
// all made durable. Every batch is verified (FastOpen is ignored). Records
// after the damage are lost on this node: take a copy of the partition's
// directory first if they matter. The partition must not be open in this
// Store (Repair is an offline tool: stop spoold, repair, start it).
func (s *Store) Repair(name string) (RepairResult, error) {
	if err := checkName(name); err != nil {
		return RepairResult{}, err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if _, ok := s.parts[name]; ok {
		return RepairResult{}, fmt.Errorf("spool log: repair %s: the partition is open; repair it before opening it", name)
	}
	fsys := s.opts.FS
	dir := filepath.Join(s.dir, name)
	if _, err := fsys.ReadDir(dir); err != nil {
		return RepairResult{}, fmt.Errorf("spool log: repair %s: %w (is the partition name topic-N, as in the data dir?)", name, err)
	}
	o := s.opts
	o.FastOpen, o.QuarantineCorrupt = false, true
	shadow := &Store{dir: s.dir, opts: o}
	p, err := openPartition(shadow, name)
	if err != nil {
		return RepairResult{}, err
	}
	defer func() {
		for _, seg := range p.segs {
			seg.closeFiles()
		}
	}()
	ce := p.Quarantined()
	if ce == nil {
		return RepairResult{End: p.NextOffset()}, nil
	}
	res := RepairResult{Repaired: true, Damage: ce, End: p.NextOffset()}
	seg := p.active()
	fi, err := seg.log.Stat()
	if err != nil {
		return res, err
	}
	res.BytesDropped += fi.Size() - seg.size
	if err := seg.log.Truncate(seg.size); err != nil {
		return res, fmt.Errorf("spool log: repair %s: truncate %s: %w", name, seg.path, err)
	}
	if err := seg.log.Sync(); err != nil {
		return res, ioError("fdatasync", seg.path, err)
	}
	if err := seg.writeIndexes(fsys); err != nil {
		return res, ioError("index write", seg.idxPath(), err)
	}
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return res, err
	}
	for _, e := range ents {
		b, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || len(b) != 20 {
			continue
		}
		if base, err := strconv.ParseInt(b, 10, 64); err == nil && base > seg.base {
			if info, err := e.Info(); err == nil {
				res.BytesDropped += info.Size()
			}
			removeSegmentFiles(fsys, dir, base)
			res.SegmentsRemoved = append(res.SegmentsRemoved, filepath.Join(dir, e.Name()))
		}
	}
	if ls, err := readLogStart(fsys, dir); err != nil || ls.offset > res.End {
		if err := writeLogStart(fsys, dir, logStart{offset: min(p.StartOffset(), res.End), index: p.prevIndex, term: p.prevTerm}); err != nil {
			return res, err
		}
	}
	if err := fsys.SyncDir(dir); err != nil {
		return res, ioError("directory sync", dir, err)
	}
	s.opts.Logger.Warn("spool log: partition repaired: truncated to its last good offset",
		"partition", name, "file", ce.File, "position", ce.Position, "end", res.End,
		"bytes_dropped", res.BytesDropped, "segments_removed", len(res.SegmentsRemoved))
	return res, nil
}
