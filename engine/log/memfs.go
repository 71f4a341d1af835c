package log

import (
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory FS for fault injection. It remembers, per file, the
// content as of the last Sync and, per directory, the entries as of the last
// SyncDir, so that Crash can drop everything that was not made durable.
// Directories themselves are durable as soon as they are created.
type MemFS struct {
	mu       sync.Mutex
	files    map[string]*memNode // current namespace
	durable  map[string]*memNode // namespace as of the last SyncDir of each dir
	dirs     map[string]bool
	dDirs    map[string]bool // directories whose entry in their parent is durable
	locks    map[string]bool
	capacity int64 // total bytes allowed across files; 0 = unlimited
	fault    func(op, name string) error
	nsyncs   int // file syncs that succeeded
}

type memNode struct {
	data   []byte
	synced []byte
}

// NewMemFS returns an empty in-memory file system.
func NewMemFS() *MemFS {
	return &MemFS{files: map[string]*memNode{}, durable: map[string]*memNode{}, dirs: map[string]bool{"/": true, ".": true}, dDirs: map[string]bool{"/": true, ".": true}, locks: map[string]bool{}}
}

// SetCapacity limits the total bytes of all files (0 = unlimited). A write
// that does not fit writes what fits and fails with ENOSPC.
func (m *MemFS) SetCapacity(n int64) { m.mu.Lock(); m.capacity = n; m.mu.Unlock() }

// SetFault installs f, called before every operation with op one of open,
// write (a WriteAt or a WriteAtv), sync, truncate, remove, rename, readdir,
// mkdir, syncdir, lock. A non-nil result fails the operation with that error.
func (m *MemFS) SetFault(f func(op, name string) error) { m.mu.Lock(); m.fault = f; m.mu.Unlock() }

// Crash simulates power loss: every byte not fsynced and every directory
// change not followed by SyncDir is lost, and all locks are released. Files
// opened before the crash must not be used afterwards.
func (m *MemFS) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirs = map[string]bool{}
	for d := range m.dDirs {
		if m.survives(d) {
			m.dirs[d] = true
		}
	}
	m.dDirs = maps.Clone(m.dirs)
	m.files = map[string]*memNode{}
	for name, n := range m.durable {
		if !m.dirs[filepath.Dir(name)] {
			delete(m.durable, name) // its directory was lost
			continue
		}
		nn := &memNode{data: slices.Clone(n.synced), synced: slices.Clone(n.synced)}
		m.files[name] = nn
		m.durable[name] = nn
	}
	m.locks = map[string]bool{}
}

// survives reports whether directory d and all its ancestors are durable.
func (m *MemFS) survives(d string) bool {
	for ; ; d = filepath.Dir(d) {
		if !m.dDirs[d] {
			return false
		}
		if d == "/" || d == "." {
			return true
		}
	}
}

// Used returns the total bytes held by all files.
func (m *MemFS) Used() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.usedLocked()
}

func (m *MemFS) usedLocked() int64 {
	var n int64
	for _, f := range m.files {
		n += int64(len(f.data))
	}
	return n
}

// Corrupt applies f to the content of name, current and durable alike.
func (m *MemFS) Corrupt(name string, f func([]byte) []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.files[filepath.Clean(name)]
	if !ok {
		return &os.PathError{Op: "corrupt", Path: name, Err: fs.ErrNotExist}
	}
	n.data = f(n.data)
	n.synced = slices.Clone(n.data)
	return nil
}

func (m *MemFS) check(op, name string) error {
	if m.fault != nil {
		if err := m.fault(op, name); err != nil {
			return &os.PathError{Op: op, Path: name, Err: err}
		}
	}
	return nil
}

func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("open", name); err != nil {
		return nil, err
	}
	if !m.dirs[filepath.Dir(name)] {
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	n, ok := m.files[name]
	switch {
	case !ok && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case !ok:
		n = &memNode{}
		m.files[name] = n
	}
	if flag&os.O_TRUNC != 0 {
		n.data = n.data[:0]
	}
	return &memFile{fs: m, n: n, name: name}, nil
}

func (m *MemFS) Remove(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("remove", name); err != nil {
		return err
	}
	if _, ok := m.files[name]; !ok {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.files, name)
	return nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("rename", newname); err != nil {
		return err
	}
	n, ok := m.files[oldname]
	if !ok {
		return &os.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	delete(m.files, oldname)
	m.files[newname] = n
	return nil
}

func (m *MemFS) ReadDir(name string) ([]os.DirEntry, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("readdir", name); err != nil {
		return nil, err
	}
	if !m.dirs[name] {
		return nil, &os.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	var out []os.DirEntry
	for f, n := range m.files {
		if filepath.Dir(f) == name {
			out = append(out, fs.FileInfoToDirEntry(memInfo{name: filepath.Base(f), size: int64(len(n.data))}))
		}
	}
	for d := range m.dirs {
		if d != name && filepath.Dir(d) == name {
			out = append(out, fs.FileInfoToDirEntry(memInfo{name: filepath.Base(d), dir: true}))
		}
	}
	slices.SortFunc(out, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

func (m *MemFS) MkdirAll(name string, perm os.FileMode) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("mkdir", name); err != nil {
		return err
	}
	for d := name; !m.dirs[d]; d = filepath.Dir(d) {
		m.dirs[d] = true
	}
	return nil
}

func (m *MemFS) SyncDir(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("syncdir", name); err != nil {
		return err
	}
	for f := range m.durable {
		if filepath.Dir(f) == name {
			delete(m.durable, f)
		}
	}
	for f, n := range m.files {
		if filepath.Dir(f) == name {
			m.durable[f] = n
		}
	}
	for d := range m.dirs {
		if d != name && filepath.Dir(d) == name {
			m.dDirs[d] = true
		}
	}
	return nil
}

func (m *MemFS) Lock(name string) (io.Closer, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("lock", name); err != nil {
		return nil, err
	}
	if !m.dirs[filepath.Dir(name)] {
		return nil, &os.PathError{Op: "lock", Path: name, Err: fs.ErrNotExist}
	}
	if m.locks[name] {
		return nil, fmt.Errorf("%w: %s", ErrLocked, name)
	}
	m.locks[name] = true
	locks := m.locks
	return closerFunc(func() error {
		m.mu.Lock()
		delete(locks, name) // a crash replaces the table; the old one is dropped
		m.mu.Unlock()
		return nil
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

type memFile struct {
	fs     *MemFS
	n      *memNode
	name   string
	closed bool
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, os.ErrClosed
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.writeLocked(p, off)
}

// WriteAtv is one write (one "write" for SetFault) of the buffers' concatenation.
func (f *memFile) WriteAtv(bufs [][]byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.writeLocked(slices.Concat(bufs...), off)
}

func (f *memFile) writeLocked(p []byte, off int64) (int, error) {
	m := f.fs
	if f.closed {
		return 0, os.ErrClosed
	}
	if err := m.check("write", f.name); err != nil {
		return 0, err
	}
	want := p
	var err error
	if m.capacity > 0 {
		grow := off + int64(len(p)) - int64(len(f.n.data))
		if free := m.capacity - m.usedLocked(); grow > free {
			keep := max(int64(len(p))-(grow-free), 0)
			want = p[:keep]
			err = &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
		}
	}
	if end := off + int64(len(want)); end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[off:], want)
	return len(want), err
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	if err := f.fs.check("sync", f.name); err != nil {
		return err
	}
	f.n.synced = append(f.n.synced[:0], f.n.data...)
	f.fs.nsyncs++
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	if err := f.fs.check("truncate", f.name); err != nil {
		return err
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return memInfo{name: filepath.Base(f.name), size: int64(len(f.n.data))}, nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	f.closed = true
	return nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
