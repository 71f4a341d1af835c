// Package authn reads the bearer-token files of spoold's app and admin
// ports (apps.tokens_file, admin.tokens_file) and answers which entry a
// presented token is. One implementation for both: the tokens' SHA-256
// digests are all that is kept (no token reaches memory dumps, logs or
// errors), every lookup compares with every entry in constant time, and a
// file is read again when it changes, keeping the entries it had when the
// new content does not load.
//
// A file holds one credential a line, fields separated by spaces:
// "<token> <name>" followed by the fields its Format asks for (the admin
// file's role). A token written "sha256:<64 hex digits>" is its digest, so
// the file need not hold the token itself. Blank lines and lines starting
// with # are skipped. Errors name the line, never the token.
package authn

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// MaxTokenBytes bounds a token, in a file and presented (it travels in
// every call's metadata).
const MaxTokenBytes = 4096

// Recheck is how often, at most, a lookup looks at the file's modification
// time and size.
const Recheck = time.Second

// Format is what one file's lines hold and its bounds.
type Format struct {
	// Setting names the file in errors and logs (apps.tokens_file).
	Setting string
	// Extra is how many fields follow the name (0 for apps, 1 for admin's
	// role); Usage shows a line ("<token> <identity>").
	Extra int
	Usage string
	// MinTokenBytes: a shorter token could be guessed.
	MinTokenBytes int
	// MaxTokens bounds the entries (each lookup compares with all) and
	// MaxFileBytes what is read of the file.
	MaxTokens, MaxFileBytes int
	// CheckName and CheckExtra refuse a name or the extra fields (nil:
	// any).
	CheckName  func(string) error
	CheckExtra func([]string) error
}

// Entry is what a token names.
type Entry struct {
	Name  string
	Extra []string
}

type entry struct {
	digest [sha256.Size]byte
	Entry
}

// Set is a file's entries as loaded.
type Set struct {
	entries []entry
}

// Parse reads a file's content.
func Parse(data []byte, f Format) (*Set, error) {
	s := &Set{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), max(f.MaxFileBytes, 64<<10))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := parseLine(line, f)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if first, dup := seen[e.digest]; dup {
			return nil, fmt.Errorf("line %d: the same token as line %d: each token names one entry", n, first)
		}
		seen[e.digest] = n
		if len(s.entries) == f.MaxTokens {
			return nil, fmt.Errorf("more than %d tokens", f.MaxTokens)
		}
		s.entries = append(s.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("a line too long: %v", err)
	}
	return s, nil
}

func parseLine(line string, f Format) (entry, error) {
	fields := strings.Fields(line)
	if len(fields) != 2+f.Extra {
		return entry{}, fmt.Errorf("want %d fields, %s; got %d", 2+f.Extra, f.Usage, len(fields))
	}
	var e entry
	if h, ok := strings.CutPrefix(fields[0], "sha256:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return entry{}, fmt.Errorf("a sha256: token must be 64 hex digits")
		}
		copy(e.digest[:], b)
	} else {
		if len(fields[0]) < f.MinTokenBytes || len(fields[0]) > MaxTokenBytes || !visibleASCII(fields[0]) {
			return entry{}, fmt.Errorf("the token must be at least %d bytes (and at most %d) of visible ASCII: use a random one, like openssl rand -hex 32", f.MinTokenBytes, MaxTokenBytes)
		}
		e.digest = sha256.Sum256([]byte(fields[0]))
	}
	e.Name, e.Extra = fields[1], fields[2:]
	if f.CheckName != nil {
		if err := f.CheckName(e.Name); err != nil {
			return entry{}, err
		}
	}
	if f.CheckExtra != nil {
		if err := f.CheckExtra(e.Extra); err != nil {
			return entry{}, err
		}
	}
	return e, nil
}

func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Lookup returns what token names. It compares the token's digest with
// every entry's in constant time and does not stop at a match, so the
// time taken says nothing about which entry, or how much of one, matched.
func (s *Set) Lookup(token string) (Entry, bool) {
	if len(token) == 0 || len(token) > MaxTokenBytes {
		return Entry{}, false
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range s.entries {
		if subtle.ConstantTimeCompare(d[:], s.entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Entry{}, false
	}
	return s.entries[found].Entry, true
}

// Len is the number of entries.
func (s *Set) Len() int { return len(s.entries) }

// Names lists the entries' names (with repeats).
func (s *Set) Names() []string {
	out := make([]string, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e.Name)
	}
	return out
}

// Read reads and parses the file at path.
func Read(path string, f Format) (*Set, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Setting, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, int64(f.MaxFileBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", f.Setting, path, err)
	}
	if len(data) > f.MaxFileBytes {
		return nil, fmt.Errorf("%s %s: larger than %d bytes", f.Setting, path, f.MaxFileBytes)
	}
	s, err := Parse(data, f)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", f.Setting, path, err)
	}
	if s.Len() == 0 {
		return nil, fmt.Errorf("%s %s: no tokens (one a line: %s)", f.Setting, path, f.Usage)
	}
	return s, nil
}

// File is a tokens file, read again when its modification time or size
// changes (looked at at most once per Recheck, on a lookup). A change that
// does not load keeps the entries loaded before and logs why.
type File struct {
	path   string
	format Format
	log    *slog.Logger
	onLoad func(*Set) // after each load (a gauge of entries)
	now    func() time.Time

	mu      sync.Mutex
	set     *Set
	checked time.Time
	mtime   time.Time
	size    int64
}

// Open loads the file: missing or invalid, it is an error (spoold does not
// start). onLoad, if set, is called with each set loaded.
func Open(path string, f Format, logger *slog.Logger, onLoad func(*Set)) (*File, error) {
	tf := &File{path: path, format: f, log: logger, onLoad: onLoad, now: time.Now}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Setting, err)
	}
	s, err := Read(path, f)
	if err != nil {
		return nil, err
	}
	tf.load(s, fi)
	tf.checked = tf.now()
	logger.Info("tokens loaded", "file", f.Setting, "path", path, "tokens", s.Len())
	return tf, nil
}

func (tf *File) load(s *Set, fi os.FileInfo) {
	tf.set, tf.mtime, tf.size = s, fi.ModTime(), fi.Size()
	if tf.onLoad != nil {
		tf.onLoad(s)
	}
}

// Current is the set in use, read again first when the file changed.
func (tf *File) Current() *Set {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	now := tf.now()
	if now.Sub(tf.checked) < Recheck {
		return tf.set
	}
	tf.checked = now
	fi, err := os.Stat(tf.path)
	if err != nil {
		tf.log.Error("tokens file unreadable: keeping the tokens loaded before", "file", tf.format.Setting, "path", tf.path, "err", err)
		return tf.set
	}
	if fi.ModTime().Equal(tf.mtime) && fi.Size() == tf.size {
		return tf.set
	}
	s, err := Read(tf.path, tf.format)
	if err != nil {
		tf.log.Error("tokens file changed but does not load: keeping the tokens loaded before", "file", tf.format.Setting, "err", err)
		return tf.set
	}
	tf.load(s, fi)
	tf.log.Info("tokens reloaded", "file", tf.format.Setting, "path", tf.path, "tokens", s.Len())
	return tf.set
}

// Lookup is Current().Lookup.
func (tf *File) Lookup(token string) (Entry, bool) { return tf.Current().Lookup(token) }
