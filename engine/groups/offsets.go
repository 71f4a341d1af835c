package groups

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/spoolmq/spool/engine/log"
)

// Position is a group's committed progress on one partition.
type Position struct {
	// Next is the lowest offset not yet finished: everything below it is done.
	Next int64
	// Done lists finished offsets above Next, ascending.
	Done []int64
}

// Equal reports whether two positions are the same.
func (p Position) Equal(o Position) bool {
	return p.Next == o.Next && slices.Equal(p.Done, o.Done)
}

// Limits on what stored bytes may hold, so that a hostile or corrupt file
// cannot make the node allocate without bound. They are far above what
// Spool writes, so only damaged bytes are refused.
const (
	// maxPositionsPerFile is the most positions one file (a group on a
	// topic) holds, and bounds the partition numbers in it: 16 times the
	// most partitions of a topic (engine.MaxPartitions).
	maxPositionsPerFile = 1 << 16
	// MaxDecodedDone is the most finished offsets of one position a
	// decoder accepts from stored bytes (an offsets file, a broker's
	// commit metadata, engine/kafka). It is 256 times what a sidecar
	// commits (coord.MaxDonePerPosition, 4096), so it refuses only damage.
	MaxDecodedDone = 1 << 20
	// maxFileBytes bounds what one offsets file may make the node read
	// into memory (a done list is bounded by the group's window in practice).
	maxFileBytes = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt reports an offsets file that fails its checks.
var ErrCorrupt = errors.New("offsets file is corrupt")

// Store keeps committed positions under a directory.
type Store struct {
	fsys  log.FS
	dir   string
	mu    sync.Mutex      // serializes writers of the same file; see engine/embedded/LOCKS.md
	known map[string]bool // group directories known to exist durably (under mu)
}

// Open returns a store rooted at dir on fsys (nil: the OS), creating dir
// durably (it and any new parent are fsynced in their parent).
func Open(fsys log.FS, dir string) (*Store, error) {
	if fsys == nil {
		fsys = log.OSFS{}
	}
	if err := log.MkdirAllSynced(fsys, dir); err != nil {
		return nil, fmt.Errorf("offsets: create %s: %w (check that the data dir is writable)", dir, err)
	}
	return &Store{fsys: fsys, dir: dir, known: map[string]bool{}}, nil
}

func (s *Store) path(group, topic string) string {
	return filepath.Join(s.dir, group, topic+".offsets")
}

// Load returns the committed positions of group on topic by partition. A
// group that never committed has none (an empty map, no error).
func (s *Store) Load(group, topic string) (map[int32]Position, error) {
	path := s.path(group, topic)
	b, err := s.readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[int32]Position{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("offsets: read %s: %w", path, err)
	}
	m, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("offsets: %s: %w (restore it from a peer or delete it to restart the group from the log start)", path, err)
	}
	return m, nil
}

func (s *Store) readFile(path string) ([]byte, error) {
	f, err := s.fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxFileBytes {
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrCorrupt, fi.Size(), maxFileBytes)
	}
	b := make([]byte, fi.Size())
	if n, err := f.ReadAt(b, 0); n < len(b) {
		return nil, err
	}
	return b, nil
}

// Commit durably replaces the committed positions of group on topic. It
// returns only after the new file and its directory entry (and the group's
// directory, the first time) are on disk.
func (s *Store) Commit(group, topic string, positions map[int32]Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.path(group, topic)
	dir := filepath.Dir(path)
	if !s.known[dir] {
		if err := log.MkdirAllSynced(s.fsys, dir); err != nil {
			return fmt.Errorf("offsets: create %s: %w", dir, err)
		}
		s.known[dir] = true
	}
	if err := log.WriteFileAtomic(s.fsys, path, Encode(nil, positions)); err != nil {
		return fmt.Errorf("offsets: write %s: %w", path, err)
	}
	return nil
}

// Forget deletes every group's committed positions on topic (a deleted
// topic: a topic created again under its name starts at offset 0, and old
// positions would skip its first messages).
func (s *Store) Forget(topic string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	groups, err := s.fsys.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("offsets: list %s: %w", s.dir, err)
	}
	for _, g := range groups {
		if !g.IsDir() {
			continue
		}
		path := s.path(g.Name(), topic)
		if err := s.fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("offsets: delete %s: %w", path, err)
		} else if err == nil {
			if err := s.fsys.SyncDir(filepath.Dir(path)); err != nil {
				return fmt.Errorf("offsets: sync %s: %w", filepath.Dir(path), err)
			}
		}
	}
	return nil
}

// File format (little endian):
//
//	magic "SPOF" | version u8 (1) | crc32c u32 of everything after it |
//	count uvarint | count × (partition varint | next varint | ndone uvarint | ndone × delta uvarint)
//
// Done offsets are stored as deltas from the previous one (the first from Next).
const (
	magic = "SPOF"
	// OffsetsVersion is the format of a group's offsets file;
	// internal/buildinfo reports it.
	OffsetsVersion = 1
	hdrLen         = len(magic) + 1 + 4
)

// Encode appends the file form of positions to dst, partitions ascending.
func Encode(dst []byte, positions map[int32]Position) []byte {
	start := len(dst)
	dst = append(dst, magic...)
	dst = append(dst, OffsetsVersion, 0, 0, 0, 0)
	parts := make([]int32, 0, len(positions))
	for p := range positions {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	dst = binary.AppendUvarint(dst, uint64(len(parts)))
	for _, p := range parts {
		pos := positions[p]
		dst = binary.AppendVarint(dst, int64(p))
		dst = binary.AppendVarint(dst, pos.Next)
		dst = binary.AppendUvarint(dst, uint64(len(pos.Done)))
		prev := pos.Next
		for _, o := range pos.Done {
			dst = binary.AppendUvarint(dst, uint64(o-prev))
			prev = o
		}
	}
	body := dst[start+hdrLen:]
	binary.LittleEndian.PutUint32(dst[start+len(magic)+1:], crc32.Checksum(body, castagnoli))
	return dst
}

// Decode parses the file form. Hostile bytes give ErrCorrupt, never a panic.
func Decode(b []byte) (map[int32]Position, error) {
	if len(b) < hdrLen || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	if b[len(magic)] != OffsetsVersion {
		return nil, fmt.Errorf("%w: unknown version %d (written by a newer spoold?)", ErrCorrupt, b[len(magic)])
	}
	want := binary.LittleEndian.Uint32(b[len(magic)+1:])
	body := b[hdrLen:]
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	r := reader{b: body}
	n := r.uvarint()
	if n > maxPositionsPerFile {
		return nil, fmt.Errorf("%w: %d partitions (limit %d)", ErrCorrupt, n, maxPositionsPerFile)
	}
	out := make(map[int32]Position, n)
	for range n {
		p := r.varint()
		next := r.varint()
		nd := r.uvarint()
		if r.err != nil {
			break
		}
		if p < 0 || p >= maxPositionsPerFile || next < 0 || nd > MaxDecodedDone || nd > uint64(len(r.b)) {
			return nil, fmt.Errorf("%w: bad entry (partition %d, next %d, %d done)", ErrCorrupt, p, next, nd)
		}
		pos := Position{Next: next}
		if nd > 0 {
			pos.Done = make([]int64, 0, nd)
		}
		prev := next
		for range nd {
			d := r.uvarint()
			if d == 0 || d > 1<<62 || prev > (1<<62)-int64(d) {
				r.err = ErrCorrupt
				break
			}
			prev += int64(d)
			pos.Done = append(pos.Done, prev)
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("%w: partition %d twice", ErrCorrupt, p)
		}
		out[int32(p)] = pos
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: truncated or malformed entry", ErrCorrupt)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.b))
	}
	return out, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = ErrCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = ErrCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}
