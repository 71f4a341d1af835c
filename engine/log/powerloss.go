package log

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// A power loss, for the fault suite (chaos/, the powerloss kind): what a
// machine keeps of its files when the power goes is what was synced. A
// killed process loses nothing the kernel holds, so a kill -9 alone never
// shows whether Spool acknowledges only what it synced. PowerLossFS
// wraps an FS and journals, as they happen, the size of each file at each
// sync, and the removals and renames; after the process is killed,
// CutToSynced cuts every file back to its last synced size (a file never
// synced to nothing), as the power loss would have.
//
// The model is a file's tail: data written past the last sync is lost.
// An in-place overwrite below the synced size is kept (the raft state's
// two slots are written in place; their checksums are tested with MemFS's
// crashes instead), and so is a creation or rename whose directory was not
// synced.
//
// Only builds with the spoolfaults tag turn it on (fs_faults.go), from the
// environment variable PowerLossEnv; spoold built without it refuses the
// variable.

// PowerLossEnv names the journal file PowerLossFS writes, in the
// environment of a spoold built with -tags spoolfaults.
const PowerLossEnv = "SPOOL_FAULT_POWERLOSS_JOURNAL"

// PowerLossFS is an FS whose syncs, removals and renames are journaled.
type PowerLossFS struct {
	FS
	mu sync.Mutex
	j  *os.File // the journal: plain writes, the OS keeps them across a kill
}

// NewPowerLossFS journals inner's syncs to the file at journal (appended).
func NewPowerLossFS(inner FS, journal string) (*PowerLossFS, error) {
	j, err := os.OpenFile(journal, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &PowerLossFS{FS: inner, j: j}, nil
}

func (p *PowerLossFS) note(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.j, format+"\n", a...)
}

// OpenFile opens a file whose syncs are journaled; a file it creates is
// journaled as synced empty.
func (p *PowerLossFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	_, statErr := os.Lstat(name)
	f, err := p.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if flag&os.O_CREATE != 0 && os.IsNotExist(statErr) {
		p.note("create %s", strconv.Quote(name))
	}
	return &powerLossFile{File: f, fs: p, name: name}, nil
}

// Remove removes name and journals it.
func (p *PowerLossFS) Remove(name string) error {
	if err := p.FS.Remove(name); err != nil {
		return err
	}
	p.note("remove %s", strconv.Quote(name))
	return nil
}

// Rename renames and journals it.
func (p *PowerLossFS) Rename(oldname, newname string) error {
	if err := p.FS.Rename(oldname, newname); err != nil {
		return err
	}
	p.note("rename %s %s", strconv.Quote(oldname), strconv.Quote(newname))
	return nil
}

type powerLossFile struct {
	File
	fs   *PowerLossFS
	name string
}

// Sync syncs the file and journals its size.
func (f *powerLossFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	st, err := f.File.Stat()
	if err != nil {
		return err
	}
	f.fs.note("sync %d %s", st.Size(), strconv.Quote(f.name))
	return nil
}

// CutToSynced reads a PowerLossFS journal and cuts every file it names
// that still exists back to its last synced size (never synced: to
// nothing). It returns how many bytes it cut.
func CutToSynced(journal string) (int64, error) {
	f, err := os.Open(journal)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	synced, err := readPowerLossJournal(f)
	if err != nil {
		return 0, err
	}
	var cut int64
	for name, size := range synced {
		st, err := os.Stat(name)
		if err != nil || st.IsDir() || st.Size() <= size {
			continue // gone, or not past its synced size
		}
		if err := os.Truncate(name, size); err != nil {
			return cut, err
		}
		cut += st.Size() - size
	}
	return cut, nil
}

// readPowerLossJournal replays a journal: the synced size of each file
// (0 for a file renamed from one never synced: a rename carries the size).
func readPowerLossJournal(r io.Reader) (map[string]int64, error) {
	synced := map[string]int64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		op, rest, _ := strings.Cut(sc.Text(), " ")
		var err error
		switch op {
		case "sync":
			var size int64
			var name string
			sz, q, _ := strings.Cut(rest, " ")
			if size, err = strconv.ParseInt(sz, 10, 64); err == nil {
				if name, err = strconv.Unquote(q); err == nil {
					synced[name] = size
				}
			}
		case "create":
			var name string
			if name, err = strconv.Unquote(rest); err == nil {
				synced[name] = 0
			}
		case "remove":
			var name string
			if name, err = strconv.Unquote(rest); err == nil {
				delete(synced, name)
			}
		case "rename":
			var from, to string
			if from, rest, err = unquotePrefix(rest); err == nil {
				if to, err = strconv.Unquote(strings.TrimPrefix(rest, " ")); err == nil {
					synced[to] = synced[from]
					delete(synced, from)
				}
			}
		default:
			err = fmt.Errorf("unknown operation %q", op)
		}
		if err != nil {
			// A line cut short by the kill is the journal's last: stop there.
			if !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("power-loss journal, line %d: %w", n, err)
		}
	}
	return synced, sc.Err()
}

// unquotePrefix splits off the quoted string s starts with.
func unquotePrefix(s string) (string, string, error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	u, err := strconv.Unquote(q)
	return u, s[len(q):], err
}
