package log

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"syscall"
	"time"
)

// Header is one application header of a record.
type Header struct {
	Key   string
	Value []byte
}

// Record is one message in a partition.
type Record struct {
	Offset    int64 // assigned by the log; ignored on append
	Timestamp int64 // unix milliseconds; 0 on append means "now"
	ID        []byte
	Key       []byte
	Value     []byte
	Headers   []Header
}

// FsyncMode selects when appends are acknowledged.
type FsyncMode int

const (
	// FsyncAlways acknowledges an append only after its bytes are fdatasynced
	// (group commit). This is the default.
	FsyncAlways FsyncMode = iota
	// FsyncInterval acknowledges after write(2) and fdatasyncs on a timer.
	// Acknowledged appends can be lost on power loss or kernel crash.
	FsyncInterval
)

func (m FsyncMode) String() string {
	switch m {
	case FsyncAlways:
		return "always"
	case FsyncInterval:
		return "interval"
	}
	return fmt.Sprintf("FsyncMode(%d)", int(m))
}

// Limits and defaults (docs/storage-format.md lists them all).
const (
	DefaultSegmentBytes        = 64 << 20
	DefaultSegmentAge          = 24 * time.Hour
	DefaultIndexIntervalBytes  = 4 << 10
	DefaultFsyncInterval       = 50 * time.Millisecond
	DefaultMaxBatchBytes       = 4 << 20
	DefaultMaxPendingBytes     = 32 << 20
	DefaultMaintenanceInterval = time.Second
	DefaultMaxReadBytes        = 16 << 20
	DefaultJournalBytes        = 64 << 20
	DefaultJournalCheckpoint   = 2 * time.Second

	MinSegmentBytes = 1 << 10
	MaxSegmentBytes = 1 << 30 // index positions are uint32
	MaxNameBytes    = 249
)

// Options configure a Store. The zero value is valid and means the defaults.
type Options struct {
	SegmentBytes        int64         // roll when a segment reaches this size (default 64 MiB)
	SegmentAge          time.Duration // roll an active segment older than this (default 24h)
	IndexIntervalBytes  int           // one sparse index entry per this many bytes (default 4 KiB)
	RetentionAge        time.Duration // delete closed segments whose newest record is older (0 = forever)
	RetentionBytes      int64         // keep each partition at most this big, whole closed segments (0 = unlimited)
	Fsync               FsyncMode
	FsyncInterval       time.Duration // for FsyncInterval (default 50ms)
	MaxBatchBytes       int           // largest encoded batch accepted (default 4 MiB)
	MaxPendingBytes     int           // bytes queued for the appender before Append blocks (default 32 MiB)
	MaxReadBytes        int           // cap on maxBytes of one Read (default 16 MiB)
	MaintenanceInterval time.Duration // how often Run rolls old segments and applies retention (default 1s)
	// FastOpen makes recovery scan each segment only from its last valid index
	// entry instead of checking every batch's CRC, trading detection at open
	// of corruption before that entry for a faster open. Reads still check
	// every CRC they touch, so corrupt data is never returned.
	FastOpen bool
	// QuarantineCorrupt makes a partition whose recovery finds corruption
	// (not a torn tail) open quarantined instead of failing: it serves the
	// records before the damage, refuses appends, and leaves its files
	// untouched for Store.Repair. Partition.Quarantined reports it.
	QuarantineCorrupt bool
	// SyncFileSystem: with FsyncAlways, a round that leaves two or more
	// segment files dirty makes them durable with one sync of the whole
	// file system holding the store (syncfs(2)) instead of one fdatasync
	// per file — a fraction of the CPU and the time when many partitions
	// take appends at once. It also writes back whatever else is dirty on
	// that file system: for a file system of the store's own (a volume),
	// not one shared with busy writers. Needs an FS that is an FSSyncer
	// (OSFS on Linux ≥ 5.8); a failed sync falls back to one fdatasync per
	// file, which names the file that failed.
	SyncFileSystem bool
	// Journal: with FsyncAlways, a round makes its appends durable with
	// one fdatasync of the data dir's journal instead of one per dirty
	// segment, and syncs the segments behind, at checkpoints (journal.go).
	// An append is still acknowledged only once it is on disk. Not with
	// SyncFileSystem; ignored with FsyncInterval.
	Journal bool
	// JournalBytes: a checkpoint runs when the journal passes this size
	// (default 64 MiB); JournalCheckpointInterval: at least this often
	// while the journal holds anything (default 2s).
	JournalBytes              int64
	JournalCheckpointInterval time.Duration
	FS                        FS           // file-system layer; nil = the real OS
	Logger                    *slog.Logger // nil = slog.Default()
	Now                       func() time.Time
}

// validate fills defaults and rejects nonsense once.
func (o *Options) validate() error {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.SegmentBytes < MinSegmentBytes || o.SegmentBytes > MaxSegmentBytes {
		return fmt.Errorf("spool log: SegmentBytes %d outside [%d, %d]", o.SegmentBytes, MinSegmentBytes, MaxSegmentBytes)
	}
	if o.SegmentAge == 0 {
		o.SegmentAge = DefaultSegmentAge
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.FsyncInterval == 0 {
		o.FsyncInterval = DefaultFsyncInterval
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxPendingBytes == 0 {
		o.MaxPendingBytes = max(DefaultMaxPendingBytes, o.MaxBatchBytes)
	}
	if o.MaxReadBytes == 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	if o.MaintenanceInterval == 0 {
		o.MaintenanceInterval = DefaultMaintenanceInterval
	}
	if o.JournalBytes == 0 {
		o.JournalBytes = DefaultJournalBytes
	}
	if o.JournalCheckpointInterval == 0 {
		o.JournalCheckpointInterval = DefaultJournalCheckpoint
	}
	switch {
	case o.SegmentAge < 0, o.RetentionAge < 0, o.RetentionBytes < 0, o.FsyncInterval < 0, o.MaintenanceInterval < 0,
		o.JournalBytes < 0, o.JournalCheckpointInterval < 0:
		return errors.New("spool log: negative durations or sizes in Options")
	case o.IndexIntervalBytes < 0 || int64(o.IndexIntervalBytes) > o.SegmentBytes:
		return fmt.Errorf("spool log: IndexIntervalBytes %d outside [1, SegmentBytes]", o.IndexIntervalBytes)
	case o.MaxBatchBytes < BatchHeaderSize+minRecordSize || o.MaxBatchBytes > maxBatchLength:
		return fmt.Errorf("spool log: MaxBatchBytes %d outside [%d, %d]", o.MaxBatchBytes, BatchHeaderSize+minRecordSize, maxBatchLength)
	case o.MaxPendingBytes < o.MaxBatchBytes:
		return fmt.Errorf("spool log: MaxPendingBytes %d below MaxBatchBytes %d", o.MaxPendingBytes, o.MaxBatchBytes)
	case o.MaxReadBytes < 1:
		return errors.New("spool log: MaxReadBytes must be positive")
	case o.Fsync != FsyncAlways && o.Fsync != FsyncInterval:
		return fmt.Errorf("spool log: unknown fsync mode %d", o.Fsync)
	case o.Journal && o.SyncFileSystem:
		return errors.New("spool log: Journal and SyncFileSystem are two ways of syncing a round: choose one")
	}
	if o.FS == nil {
		fsys, err := defaultFS()
		if err != nil {
			return fmt.Errorf("spool log: %w", err)
		}
		o.FS = fsys
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

func checkName(name string) error {
	if len(name) == 0 || len(name) > MaxNameBytes || !validName.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("spool log: invalid partition name %q: want [a-zA-Z0-9._-]+, at most %d bytes", name, MaxNameBytes)
	}
	return nil
}

var (
	// ErrLocked is returned by OpenStore when another Store (in this or another
	// process) holds the data directory.
	ErrLocked = errors.New("data directory is locked by another spool store")
	// ErrClosed is returned by operations on a closed Store or Partition.
	ErrClosed = errors.New("spool log: store closed")
	// ErrBatchTooLarge is returned when an encoded batch exceeds Options.MaxBatchBytes.
	ErrBatchTooLarge = errors.New("spool log: batch too large")
	// ErrEmptyBatch is returned when Append is called without records.
	ErrEmptyBatch = errors.New("spool log: empty batch")
	// ErrQuarantined is returned by appends to a quarantined partition
	// (Partition.Quarantine), wrapped with the corruption that caused it.
	ErrQuarantined = errors.New("spool log: partition quarantined")
	// ErrAlreadyRunning is returned by Run when Run is already running.
	ErrAlreadyRunning = errors.New("spool log: Run already running for this store")
)

// OffsetOutOfRangeError is returned by Read for an offset outside [Start, End].
type OffsetOutOfRangeError struct {
	Offset, Start, End int64
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("spool log: offset %d out of range [%d, %d]", e.Offset, e.Start, e.End)
}

// CorruptionError reports damaged data that is not a torn tail.
type CorruptionError struct {
	File     string
	Position int64 // byte position in File
	Offset   int64 // first offset expected at Position (-1 if unknown)
	Reason   string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("spool log: corruption in %s at byte %d (offset %d): %s", e.File, e.Position, e.Offset, e.Reason)
}

// ioError turns a write/sync failure into the error surfaced to appenders.
// ENOSPC gets a message an operator can act on; the cause stays wrapped.
func ioError(op, file string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("spool log: disk full during %s of %s; already-durable data is intact and appends resume when space returns: %w", op, file, err)
	}
	return fmt.Errorf("spool log: %s of %s: %w", op, file, err)
}
