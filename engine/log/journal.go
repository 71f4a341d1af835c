package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"
)

// The node's journal (Options.Journal): with FsyncAlways, a round writes
// every partition's frames to their segments as without it, but does not
// sync the segments: it appends the same frames, each run with its
// partition, segment and file position, to one journal file of the data
// dir and fdatasyncs that file once. A batch is acknowledged only after
// that sync, so nothing acknowledged is missing from the disk; a round
// costs one fdatasync however many partitions it wrote.
//
// Segments are synced behind, by a checkpoint: every segment with bytes
// durable only in the journal is fdatasynced, then the journal is cut to
// nothing (and that cut synced). A checkpoint runs when the journal passes
// JournalBytes, every JournalCheckpointInterval, on Close, when a round's
// journal write fails, and first thing in every operation that cuts or
// deletes segment files (TruncateAfter, retention, CompactTo, ResetTo,
// Drop): so the journal never spans one, and replaying it can neither
// resurrect a truncated entry nor recreate a deleted segment.
//
// Opening the store replays a journal left by a crash before any partition
// is recovered: each record's frames are written again at their position in
// their segment (idempotent: the same bytes at the same place), up to the
// first record that is short or fails its CRC (a torn tail: that round was
// never acknowledged); a record for a segment file that no longer exists is
// skipped. The replayed segments are synced and the journal cut.
//
// Record format (little endian):
//
//	u32 length     whole record, header included
//	u32 crc        CRC32C (Castagnoli) of everything after this field
//	u16 name len   then the partition name
//	i64 segment    base offset of the segment file
//	i64 position   byte position of the frames in that file
//	name, frames
//
// Rollback: while a journal may hold anything, the data dir's FORMAT file
// says format 3 (JournalFormatVersion), which releases without the journal
// refuse; a clean Close checkpoints, removes the journal and writes format
// 2 back, so the segments alone are complete again.

// JournalFormatVersion is the FORMAT of a data dir whose journal may hold
// entries that are not yet in their segments.
const JournalFormatVersion = 3

const (
	journalFile   = "journal"
	journalHeader = 4 + 4 + 2 + 8 + 8
)

// journal is the store's journal file. Owned by Store.roundMu's holder.
type journal struct {
	f    File
	path string
	size int64  // bytes written and synced
	buf  []byte // records of this round not written yet
	// behind are the segments whose bytes past their last fdatasync are
	// durable in the journal only.
	behind []dirtySeg
	last   time.Time // the last checkpoint
	// failed is set when the journal can no longer vouch for anything (a
	// checkpoint failed): every later append fails with it.
	failed error
}

type journalCounts struct {
	syncs, bytes, checkpoints, replayed, lag atomic.Uint64
}

// openJournal replays a journal a crash left and, with Options.Journal,
// opens a fresh one, stamping the data dir's format 3 first; without it,
// it removes the journal and stamps format 2. Called by OpenStore before
// any partition is opened.
func (s *Store) openJournal() error {
	fsys := s.opts.FS
	path := filepath.Join(s.dir, journalFile)
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return notWritable(s.dir, err)
	default:
		err := s.replay(f, path)
		f.Close()
		if err != nil {
			return err
		}
	}
	if !s.opts.Journal || s.opts.Fsync != FsyncAlways {
		if f == nil {
			return nil
		}
		if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return notWritable(s.dir, err)
		}
		if err := fsys.SyncDir(s.dir); err != nil {
			return notWritable(s.dir, err)
		}
		return stampFormat(fsys, s.dir, FormatVersion)
	}
	if err := stampFormat(fsys, s.dir, JournalFormatVersion); err != nil {
		return err
	}
	if f, err = fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode); err != nil {
		return notWritable(s.dir, err)
	}
	if err = f.Truncate(0); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = fsys.SyncDir(s.dir)
	}
	if err != nil {
		f.Close()
		return notWritable(s.dir, err)
	}
	s.j = &journal{f: f, path: path, last: s.opts.Now()}
	return nil
}

// replay writes the frames of every whole record of the journal f at their
// place, syncs the segments it wrote, and cuts the journal.
func (s *Store) replay(f File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	fsys := s.opts.FS
	w := newWindowReader(f, fi.Size())
	open := map[string]File{}
	defer func() {
		for _, sf := range open {
			sf.Close()
		}
	}()
	var pos int64
	n, skipped := 0, 0
	for pos+journalHeader <= fi.Size() {
		hb, err := w.get(pos, journalHeader)
		if err != nil {
			return fmt.Errorf("spool log: read journal %s: %w", path, err)
		}
		le := binary.LittleEndian
		length := int64(le.Uint32(hb))
		// A record holds a whole run, which no batch limit bounds: its
		// length is bounded by the file (what is read is never more).
		if length < journalHeader || pos+length > fi.Size() {
			break // torn tail
		}
		rec, err := w.get(pos, int(length))
		if err != nil {
			return fmt.Errorf("spool log: read journal %s: %w", path, err)
		}
		if crc32.Checksum(rec[8:], castagnoli) != le.Uint32(rec[4:]) {
			break // torn tail
		}
		nameLen := int(le.Uint16(rec[8:]))
		base, at := int64(le.Uint64(rec[10:])), int64(le.Uint64(rec[18:]))
		if journalHeader+nameLen > int(length) || base < 0 || at < 0 {
			break // a record no round writes: a torn tail's leftover
		}
		name := string(rec[journalHeader : journalHeader+nameLen])
		frames := rec[journalHeader+nameLen:]
		pos += length
		if checkName(name) != nil {
			break
		}
		seg := filepath.Join(s.dir, name, segmentName(base, ".log"))
		sf, ok := open[seg]
		if !ok {
			sf, err = fsys.OpenFile(seg, os.O_RDWR, 0)
			if errors.Is(err, fs.ErrNotExist) {
				skipped++ // deleted since: a record from before a checkpoint that was cut short
				continue
			}
			if err != nil {
				return fmt.Errorf("spool log: replay journal into %s: %w", seg, err)
			}
			open[seg] = sf
		}
		if _, err := sf.WriteAt(frames, at); err != nil {
			return ioError("journal replay write", seg, err)
		}
		n++
	}
	for seg, sf := range open {
		if err := sf.Sync(); err != nil {
			return ioError("fdatasync", seg, err)
		}
	}
	if err := f.Truncate(0); err != nil {
		return ioError("truncate", path, err)
	}
	if err := f.Sync(); err != nil {
		return ioError("fdatasync", path, err)
	}
	s.jstats.replayed.Add(uint64(n))
	if n > 0 || pos < fi.Size() {
		s.opts.Logger.Info("spool log: replayed the journal", "dir", s.dir, "records", n, "skipped", skipped,
			"bytes", pos, "torn_tail_bytes", fi.Size()-pos)
	}
	return nil
}

// journalRun adds a record of the run just written to its segment (at
// position at) to the round's journal buffer. Caller holds roundMu.
func (s *Store) journalRun(p *Partition, rn *run, at int64) {
	j := s.j
	start := len(j.buf)
	var hb [journalHeader]byte
	j.buf = append(j.buf, hb[:]...)
	j.buf = append(j.buf, p.name...)
	for _, b := range rn.bufs {
		j.buf = append(j.buf, b...)
	}
	le := binary.LittleEndian
	rec := j.buf[start:]
	le.PutUint32(rec, uint32(len(rec)))
	le.PutUint16(rec[8:], uint16(len(p.name)))
	le.PutUint64(rec[10:], uint64(rn.seg.base))
	le.PutUint64(rec[18:], uint64(at))
	le.PutUint32(rec[4:], crc32.Checksum(rec[8:], castagnoli))
}

// journalRound makes the round's dirty segments durable through the
// journal: one write and one fdatasync of it. If that fails, a checkpoint
// syncs the segments themselves; a segment still dirty after that gets the
// error (its appends fail). Caller holds roundMu.
func (s *Store) journalRound(dirty []dirtySeg) {
	j := s.j
	err := j.failed
	if err == nil && len(j.buf) > 0 {
		if err = j.write(); err == nil {
			s.jstats.syncs.Add(1)
			s.jstats.bytes.Add(uint64(len(j.buf)))
			s.jstats.lag.Store(uint64(j.size))
			j.buf = j.buf[:0]
			for i := range dirty {
				if d := dirty[i]; d.seg.dirty && !d.seg.removed {
					d.seg.dirty = false
					if !d.seg.behind {
						d.seg.behind = true
						j.behind = append(j.behind, d)
					}
				}
			}
			if j.size >= s.opts.JournalBytes {
				_ = s.checkpoint() // a failure fails the later rounds (j.failed)
			}
			return
		}
		s.opts.Logger.Warn("spool log: journal write failed; syncing the segments instead", "file", j.path, "err", err)
		err = s.checkpoint()
	}
	if err == nil {
		s.syncRound(dirty) // anything the journal did not take
		return
	}
	for i := range dirty {
		if d := &dirty[i]; d.seg.dirty && !d.seg.removed {
			d.seg.dirty = false
			d.err = err
		}
	}
}

// write appends the round's records to the journal file and fdatasyncs it.
// On failure the file is cut back to its synced size.
func (j *journal) write() error {
	if _, err := j.f.WriteAt(j.buf, j.size); err != nil {
		_ = j.f.Truncate(j.size) // the checkpoint that follows cuts it to nothing anyway
		return ioError("write", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return ioError("fdatasync", j.path, err)
	}
	j.size += int64(len(j.buf))
	return nil
}

// checkpoint syncs every segment whose bytes are durable in the journal
// only, and the segments of this round written and not yet synced, then
// cuts the journal to nothing. If a segment's sync fails the journal is
// kept (it still holds what that segment lost) and the store refuses
// appends from then on: reopening it replays the journal. A no-op without
// a journal. Caller holds roundMu.
func (s *Store) checkpoint() error {
	j := s.j
	if j == nil {
		return nil
	}
	if j.failed != nil {
		return j.failed
	}
	todo := slices.Clone(j.behind)
	for _, d := range s.dirty {
		if d.seg.dirty && !d.seg.removed {
			todo = append(todo, d)
		}
	}
	if len(todo) == 0 && j.size == 0 && len(j.buf) == 0 {
		j.last = s.opts.Now()
		return nil
	}
	live := todo[:0]
	for _, d := range todo {
		if (d.seg.behind || d.seg.dirty) && !d.seg.removed {
			d.err = nil
			live = append(live, d)
		}
	}
	s.syncs.files.Add(uint64(syncEach(live)))
	var err error
	for _, d := range live {
		if d.err != nil {
			err = ioError("fdatasync", d.seg.path, d.err)
			break
		}
		d.seg.dirty, d.seg.behind = false, false
		d.p.synced(d.seg)
	}
	if err == nil {
		if err = j.f.Truncate(0); err == nil {
			err = j.f.Sync()
		}
		if err != nil {
			err = ioError("journal cut", j.path, err)
		}
	}
	if err != nil {
		j.failed = fmt.Errorf("spool log: data dir %s: a journal checkpoint failed; the journal keeps what the segments may lack and this store takes no more appends: close and reopen it, which replays the journal (check the disk): %w", s.dir, err)
		s.opts.Logger.Error("spool log: journal checkpoint failed", "dir", s.dir, "err", err)
		return j.failed
	}
	clear(j.behind)
	j.behind, j.buf, j.size, j.last = j.behind[:0], j.buf[:0], 0, s.opts.Now()
	s.jstats.checkpoints.Add(1)
	s.jstats.lag.Store(0)
	return nil
}

// closeJournal checkpoints, removes the journal and stamps format 2: the
// segments alone are complete, for any release. Caller holds roundMu.
func (s *Store) closeJournal() error {
	j := s.j
	if j == nil {
		return nil
	}
	if err := s.checkpoint(); err != nil {
		j.f.Close()
		return err
	}
	j.f.Close()
	fsys := s.opts.FS
	if err := fsys.Remove(j.path); err != nil {
		return ioError("remove", j.path, err)
	}
	if err := fsys.SyncDir(s.dir); err != nil {
		return ioError("directory sync", s.dir, err)
	}
	return stampFormat(fsys, s.dir, FormatVersion)
}
