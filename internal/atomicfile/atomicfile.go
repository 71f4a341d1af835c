// Package atomicfile replaces a small file so that a crash leaves either the
// old file or the new one, never a mix, and the new one is durable when the
// call returns: write path+".tmp", fsync it, rename it over path, fsync the
// directory.
//
// It is Spool's one implementation of that sequence. engine/log's
// WriteFileAtomic delegates to Write through its FS (so the in-memory
// MemFS, which crashes and loses unsynced bytes, still tests the engine's
// files: a partition's state, the store's format, raft snapshots' metadata,
// group positions, a node's identity); the sidecar, which must not import
// engine/log (scripts/banned.sh), calls WriteFile on the OS for its own
// files (the catalogue of topics made with spool topic create). One
// implementation, so a fix to the sequence reaches both.
//
// It imports nothing of Spool's, and must not: anything may import it.
package atomicfile

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// File is what Write needs of a file open for writing.
type File interface {
	io.WriterAt
	// Sync makes the file's data durable.
	Sync() error
	Close() error
}

// FS is what Write needs of a file system.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Rename(oldname, newname string) error
	Remove(name string) error
	// SyncDir makes renames in directory name durable.
	SyncDir(name string) error
}

// Write replaces the file at path on fsys with data: it writes path+".tmp",
// syncs it, renames it over path and syncs path's directory. On failure
// before the rename, the temporary file is removed (best effort) and the
// old file is untouched. Errors are fsys's, unwrapped.
func Write(fsys FS, path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		return err
	}
	return fsys.SyncDir(filepath.Dir(path))
}

// WriteFile is Write on the operating system's file system (fsync(2) for
// the file and the directory).
func WriteFile(path string, data []byte) error {
	return Write(osFS{}, path, data)
}

// osFS is the operating system's file system.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return os.OpenFile(name, flag, perm)
}

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) SyncDir(name string) error {
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
