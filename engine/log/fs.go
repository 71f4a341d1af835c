package log

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/spoolmq/spool/internal/atomicfile"
)

// File is the part of an open file the log uses.
type File interface {
	io.ReaderAt
	io.WriterAt
	// WriteAtv writes bufs back to back at off, as WriteAt would their
	// concatenation: with one pwritev(2) on the OS. On failure it returns
	// how many bytes it wrote.
	WriteAtv(bufs [][]byte, off int64) (int, error)
	// Sync makes the file's data durable (fdatasync on the OS).
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

// FS is the file-system layer. OSFS is the real one; MemFS is an in-memory
// twin for fault injection (crashes, ENOSPC, EIO).
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	ReadDir(name string) ([]os.DirEntry, error)
	MkdirAll(name string, perm os.FileMode) error
	// SyncDir makes creations, renames and removals in directory name durable.
	SyncDir(name string) error
	// Lock takes an exclusive advisory lock on file name (created if needed),
	// failing at once with ErrLocked if someone else holds it.
	Lock(name string) (io.Closer, error)
}

// WriteFileAtomic replaces the file at path with data so that a crash
// leaves either the old file or the new one, never a mix: it writes
// path+".tmp", fsyncs it, renames it over path and fsyncs the directory.
// On failure the temporary file is removed (best effort).
//
// The sequence is internal/atomicfile's, Spool's one implementation (the
// sidecar uses it too, on the OS); this runs it through fsys, so MemFS's
// crashes and faults reach it.
func WriteFileAtomic(fsys FS, path string, data []byte) error {
	return atomicfile.Write(atomicFS{fsys}, path, data)
}

// atomicFS is an FS as internal/atomicfile takes it (its OpenFile returns
// the smaller atomicfile.File).
type atomicFS struct{ FS }

func (a atomicFS) OpenFile(name string, flag int, perm os.FileMode) (atomicfile.File, error) {
	f, err := a.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// FileMode and DirMode are the modes of everything the log creates: the
// owner only. Segments hold every message, and the data dir also holds
// the node's identity (with its join token): no other user of the host
// may read them, whatever the umask.
const (
	FileMode os.FileMode = 0o600
	DirMode  os.FileMode = 0o700
)

// MkdirAllSynced creates dir and any missing parents, and makes each new
// directory durable by syncing its parent (a directory entry, like a file's,
// is lost on power loss until its parent is fsynced).
func MkdirAllSynced(fsys FS, dir string) error {
	dir = filepath.Clean(dir)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		_, err := fsys.ReadDir(d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir, DirMode); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(missing[i])); err != nil {
			return fmt.Errorf("sync directory %s after creating %s: %w", filepath.Dir(missing[i]), missing[i], err)
		}
	}
	return nil
}

// OSFS is the real file system. Sync is fdatasync(2); Lock is flock(2).
type OSFS struct{}

type osFile struct {
	*os.File
	fd int
}

func (f osFile) Sync() error {
	for {
		err := unix.Fdatasync(f.fd)
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// maxIovecs is IOV_MAX on Linux: the most buffers one pwritev takes.
const maxIovecs = 1024

func (f osFile) WriteAtv(bufs [][]byte, off int64) (int, error) {
	if len(bufs) == 1 {
		return f.WriteAt(bufs[0], off) // pwrite, without pwritev's iovec array
	}
	total := 0
	for len(bufs) > 0 {
		iovs, want := bufs[:min(len(bufs), maxIovecs)], 0
		for _, b := range iovs {
			want += len(b)
		}
		n, err := unix.Pwritev(f.fd, iovs, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
		}
		total, off = total+n, off+int64(n)
		short := n < want
		for len(bufs) > 0 && n >= len(bufs[0]) {
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		if short {
			// The write ended inside bufs[0] (a full disk, a signal): finish
			// that buffer as WriteAt does, which says why it cannot.
			m, err := f.WriteAt(bufs[0][n:], off)
			total, off = total+m, off+int64(m)
			if err != nil {
				return total, err
			}
			bufs = bufs[1:]
		}
	}
	return total, nil
}

func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{File: f, fd: int(f.Fd())}, nil
}

func (OSFS) Remove(name string) error                     { return os.Remove(name) }
func (OSFS) Rename(o, n string) error                     { return os.Rename(o, n) }
func (OSFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (OSFS) MkdirAll(name string, perm os.FileMode) error { return os.MkdirAll(name, perm) }

func (OSFS) SyncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// FSSyncer is an FS that can make durable, in one call, everything written
// on the file system holding a directory (Options.SyncFileSystem). OSFS is
// one (syncfs(2)); an FS that is not makes the store sync file by file.
type FSSyncer interface {
	// OpenFSSync opens dir for such syncs. The syncer reports the
	// write-back errors of the whole file system that happened since it was
	// opened (Linux ≥ 5.8: earlier kernels do not, and are refused), so the
	// store keeps one open for its life.
	OpenFSSync(dir string) (FSSync, error)
}

// FSSync makes everything written on a file system durable.
type FSSync interface {
	Sync() error
	Close() error
}

// OpenFSSync opens dir for syncfs(2), refusing kernels before 5.8, whose
// syncfs does not report write-back errors (a failed write would then be
// taken for durable).
func (OSFS) OpenFSSync(dir string) (FSSync, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return nil, err
	}
	if !kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 8) {
		return nil, fmt.Errorf("spool log: storage.sync filesystem needs Linux 5.8 or later (syncfs reports write-back errors from 5.8 on); this kernel is %s: use storage.sync files", unix.ByteSliceToString(u.Release[:]))
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return osFSSync{d}, nil
}

type osFSSync struct{ d *os.File }

func (s osFSSync) Sync() error {
	for {
		err := unix.Syncfs(int(s.d.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "syncfs", Path: s.d.Name(), Err: err}
			}
			return nil
		}
	}
}

func (s osFSSync) Close() error { return s.d.Close() }

// kernelAtLeast reports whether a kernel release string ("6.18.44-fc")
// is at least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if n, _ := fmt.Sscanf(release, "%d.%d", &ma, &mi); n != 2 {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func (OSFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, name)
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return f, nil // closing the file releases the lock
}
