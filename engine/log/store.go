package log

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Store owns one data directory: its lock, its partitions and the single
// appender (Run) that writes and syncs all of them.
type Store struct {
	dir  string
	opts Options
	lock io.Closer

	// roundMu is held for every mutation of partition files: append rounds,
	// interval syncs, rolls, retention, Close. See LOCKS.md.
	roundMu sync.Mutex

	pmu   sync.Mutex // guards parts and order; held while opening a partition
	parts map[string]*Partition
	order []*Partition

	mu           sync.Mutex // guards the queue below; a leaf lock
	pending      []*request
	spare        []*request
	pendingBytes int
	space        chan struct{} // closed and replaced when pendingBytes drops
	closed       bool

	// moved lists durable ends that moved under roundMu, for the partitions'
	// OnDurable hooks; unlockRound reports them. Owned by roundMu's holder.
	moved []durableMove
	// dirty lists the segments an append round made dirty, for its syncs.
	// Owned by roundMu's holder.
	dirty []dirtySeg

	// fsSync syncs the store's file system at once (Options.SyncFileSystem);
	// nil: file by file. Used under roundMu.
	fsSync FSSync
	syncs  syncCounts
	// j is the node's journal (Options.Journal), nil without it; used
	// under roundMu (journal.go).
	j      *journal
	jstats journalCounts

	wake    chan struct{} // cap 1: there is pending work
	closing chan struct{} // closed by Close
	running atomic.Bool
}

// OpenStore locks dir (creating it if needed) and returns a Store. Partitions
// are opened lazily by Partition. Call Run to start appending.
func OpenStore(dir string, opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	fsys := opts.FS
	if err := MkdirAllSynced(fsys, dir); err != nil {
		return nil, notWritable(dir, err)
	}
	lock, err := fsys.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("spool log: data dir %s: %w", dir, err)
		}
		return nil, notWritable(dir, err)
	}
	// Probe writability now rather than on the first append.
	probe := filepath.Join(dir, "write-probe.tmp")
	f, err := fsys.OpenFile(probe, os.O_RDWR|os.O_CREATE, FileMode)
	if err == nil {
		_, err = f.WriteAt([]byte{0}, 0)
		f.Close()
		fsys.Remove(probe)
	}
	if err != nil {
		lock.Close()
		return nil, notWritable(dir, err)
	}
	if err := checkFormat(fsys, dir); err != nil {
		lock.Close()
		return nil, err
	}
	var fsSync FSSync
	if opts.SyncFileSystem && opts.Fsync == FsyncAlways {
		fss, ok := fsys.(FSSyncer)
		if !ok {
			lock.Close()
			return nil, fmt.Errorf("spool log: SyncFileSystem: the file-system layer %T cannot sync a whole file system; sync file by file", fsys)
		}
		if fsSync, err = fss.OpenFSSync(dir); err != nil {
			lock.Close()
			return nil, err
		}
	}
	s := &Store{
		dir: dir, opts: opts, lock: lock, fsSync: fsSync,
		parts: map[string]*Partition{},
		space: make(chan struct{}), wake: make(chan struct{}, 1), closing: make(chan struct{}),
	}
	if err := s.openJournal(); err != nil {
		if fsSync != nil {
			fsSync.Close()
		}
		lock.Close()
		return nil, err
	}
	return s, nil
}

func notWritable(dir string, err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("spool log: data dir %s is not writable (%w): give the spool user write access to it, or point the data dir at a writable volume", dir, err)
	}
	return fmt.Errorf("spool log: cannot use data dir %s: %w", dir, err)
}

// Partition opens the named partition, creating it if it does not exist.
// Opening recovers it: a torn tail is truncated, corruption before the tail
// is a *CorruptionError.
func (s *Store) Partition(name string) (*Partition, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if p, ok := s.parts[name]; ok {
		return p, nil
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	p, err := openPartition(s, name)
	if err != nil {
		return nil, err
	}
	p.id = len(s.order)
	s.parts[name] = p
	s.order = append(s.order, p)
	return p, nil
}

// Options returns the store's options with the defaults filled in.
func (s *Store) Options() Options { return s.opts }

// Partitions returns the names of the partitions found in the data dir.
func (s *Store) Partitions() []string {
	ents, err := s.opts.FS.ReadDir(s.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && checkName(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// FilesPerSegment is what a segment keeps open: its log, its offset index
// and its time index (closed segments are read through them too).
const FilesPerSegment = 3

// OpenFiles returns the files the store keeps open: FilesPerSegment for
// each segment of each open partition, and the data dir's lock. It is
// counted from the partitions' views when asked (a topic's admission, a
// metrics reading), never on the append or read paths; a segment being
// rolled or compacted may be missed for that moment.
func (s *Store) OpenFiles() int {
	n := 1 // LOCK
	if s.fsSync != nil {
		n++
	}
	if s.j != nil {
		n++
	}
	for _, p := range s.partitions() {
		p.mu.RLock()
		if !p.closed {
			n += FilesPerSegment * len(p.segs)
		}
		p.mu.RUnlock()
	}
	return n
}

func (s *Store) partitions() []*Partition {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return slices.Clone(s.order)
}

// Run is the one appender goroutine of the data dir. Each round it drains
// the pending appends of all partitions, writes them, fdatasyncs every dirty
// file (in parallel) and then completes every waiter. It also syncs on the
// FsyncInterval timer, rolls old segments and applies retention. It returns
// when ctx ends or the Store is closed.
func (s *Store) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer s.running.Store(false)
	var syncC <-chan time.Time
	if s.opts.Fsync == FsyncInterval {
		t := time.NewTicker(s.opts.FsyncInterval)
		defer t.Stop()
		syncC = t.C
	}
	maint := time.NewTicker(s.opts.MaintenanceInterval)
	defer maint.Stop()
	var checkpointC <-chan time.Time
	if s.j != nil {
		t := time.NewTicker(s.opts.JournalCheckpointInterval)
		defer t.Stop()
		checkpointC = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case <-s.wake:
			s.roundMu.Lock()
			s.unlockRound(s.round())
		case <-syncC:
			s.roundMu.Lock()
			for _, p := range s.partitions() {
				_ = p.syncDirty() // a failure is logged by syncFailed; the appends it drops were never promised durable
			}
			s.unlockRound(nil)
		case <-checkpointC:
			s.roundMu.Lock()
			if s.opts.Now().Sub(s.j.last) >= s.opts.JournalCheckpointInterval {
				_ = s.checkpoint() // a failure is logged, and fails the later appends
			}
			s.unlockRound(nil)
		case <-maint.C:
			if err := s.Maintain(); err != nil {
				s.opts.Logger.Error("spool log: maintenance", "dir", s.dir, "err", err)
			}
		}
	}
}

// Maintain rolls active segments older than SegmentAge and applies retention
// to every open partition. Run calls it every MaintenanceInterval.
func (s *Store) Maintain() error {
	s.roundMu.Lock()
	defer s.unlockRound(nil)
	var errs []error
	for _, p := range s.partitions() {
		errs = append(errs, p.maintain())
	}
	return errors.Join(errs...)
}

// Close stops accepting appends, writes and syncs what was already accepted,
// persists the indexes, closes every file and releases the directory lock.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	close(s.closing)
	close(s.space)
	s.mu.Unlock()

	s.roundMu.Lock()
	batch := s.round()
	errs := []error{s.closeJournal()}
	for _, p := range s.partitions() {
		errs = append(errs, p.close())
	}
	if s.fsSync != nil {
		errs = append(errs, s.fsSync.Close())
	}
	errs = append(errs, s.lock.Close())
	s.unlockRound(batch)
	return errors.Join(errs...)
}

func (p *Partition) close() error {
	var errs []error
	if p.failed == nil {
		if err := p.syncDirty(); err != nil {
			errs = append(errs, fmt.Errorf("spool log: partition %s: the last fdatasync before closing failed and the appends written since the one before are lost (check the disk; the data dir holds what was synced): %w", p.name, err))
		}
		seg := p.active()
		if err := seg.writeIndexes(p.s.opts.FS); err != nil {
			errs = append(errs, fmt.Errorf("spool log: write index of %s: %w", seg.path, err))
		}
	}
	p.mu.Lock()
	p.clearReadHints()
	p.closed = true
	for _, seg := range p.segs {
		seg.closeFiles()
	}
	p.mu.Unlock()
	return errors.Join(errs...)
}

// FormatVersion is the on-disk format this package reads and writes. It is
// recorded in the data dir's FORMAT file and in every batch (batchMagic).
const FormatVersion = batchMagic

const formatFile = "FORMAT"

// ErrFormat is returned by OpenStore for a data dir written in another
// on-disk format.
var ErrFormat = errors.New("spool log: data dir in another on-disk format")

// checkFormat refuses a data dir written in another format and records the
// format of a new one. Format 1 (before raft indexes) had no FORMAT file:
// a data dir with partition directories and no FORMAT file is format 1.
func checkFormat(fsys FS, dir string) error {
	name := filepath.Join(dir, formatFile)
	want := formatLine(FormatVersion)
	refuse := func(found string) error {
		return fmt.Errorf("%w: %s holds %s; this spoold reads format %d (the raft log format) and %d (the same with a node journal that may hold entries). "+
			"There is no converter: move the data dir aside (or delete it) and start again; docs/storage-format.md, Format versions",
			ErrFormat, dir, found, FormatVersion, JournalFormatVersion)
	}
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err == nil {
		var b [64]byte
		n, _ := f.ReadAt(b[:], 0)
		f.Close()
		if got := string(b[:n]); got != want && got != formatLine(JournalFormatVersion) {
			return refuse(fmt.Sprintf("a FORMAT file saying %q", got))
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return notWritable(dir, err)
	}
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return notWritable(dir, err)
	}
	for _, e := range ents {
		if e.IsDir() && checkName(e.Name()) == nil {
			return refuse(fmt.Sprintf("partitions (%s, ...) without a FORMAT file: format 1", e.Name()))
		}
	}
	if err := WriteFileAtomic(fsys, name, []byte(want)); err != nil {
		return notWritable(dir, err)
	}
	return nil
}

func formatLine(v int) string { return fmt.Sprintf("spool-log %d\n", v) }

// stampFormat records format v in the data dir's FORMAT file, if it says
// another.
func stampFormat(fsys FS, dir string, v int) error {
	name := filepath.Join(dir, formatFile)
	want := formatLine(v)
	if f, err := fsys.OpenFile(name, os.O_RDONLY, 0); err == nil {
		var b [64]byte
		n, _ := f.ReadAt(b[:], 0)
		f.Close()
		if string(b[:n]) == want {
			return nil
		}
	}
	if err := WriteFileAtomic(fsys, name, []byte(want)); err != nil {
		return notWritable(dir, err)
	}
	return nil
}

// Drop closes the named partition and deletes its files: the appends
// already queued (for every partition) are written first, as a round does;
// later calls on the dropped Partition fail with ErrClosed. A partition
// not open is only deleted. A crash in the middle leaves some of its files;
// calling Drop again (or deleting the directory) finishes it.
func (s *Store) Drop(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	s.pmu.Lock()
	p, ok := s.parts[name]
	if ok {
		delete(s.parts, name)
		s.order = slices.DeleteFunc(s.order, func(q *Partition) bool { return q == p })
	}
	s.pmu.Unlock()
	var err error
	if ok {
		s.roundMu.Lock()
		batch := s.round()
		// The journal must not hold frames of a partition whose files go:
		// a partition of the same name made later would get them.
		err = errors.Join(s.checkpoint(), p.close())
		s.unlockRound(batch)
	}
	dir := filepath.Join(s.dir, name)
	fsys := s.opts.FS
	ents, rerr := fsys.ReadDir(dir)
	if errors.Is(rerr, fs.ErrNotExist) {
		return err
	}
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	for _, e := range ents {
		if rerr := fsys.Remove(filepath.Join(dir, e.Name())); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return errors.Join(err, rerr)
		}
	}
	if rerr := fsys.Remove(dir); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return errors.Join(err, rerr)
	}
	return errors.Join(err, fsys.SyncDir(s.dir))
}
