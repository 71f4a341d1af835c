package sidecar

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
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Limits of admin.tokens_file. A file over them is refused whole (at
// start: spoold does not start; on a reload: the previous tokens stay).
const (
	// MaxTokensFileBytes bounds the file read.
	MaxTokensFileBytes = 1 << 20
	// MaxTokens bounds its entries: each call compares against all.
	MaxTokens = 10_000
	// MinTokenBytes: a shorter token could be guessed.
	MinTokenBytes = 16
	// MaxTokenBytes bounds a token, in the file and presented.
	MaxTokenBytes = 4096
	// tokensRecheck is how often, at most, a call makes spoold look at the
	// file's modification time and size.
	tokensRecheck = time.Second
)

var tokenName = regexp.MustCompile(`^[A-Za-z0-9._@:/-]{1,128}$`)

// tokenEntry is one line of the tokens file: only the SHA-256 of the
// token is kept, so a heap dump or a profile shows no token.
type tokenEntry struct {
	digest [sha256.Size]byte
	name   string
	role   role
}

// tokenFile is admin.tokens_file, read again when its modification time or
// size changes (checked at most once a second, on a call). A file that
// fails to load keeps the tokens loaded before and logs why.
type tokenFile struct {
	path  string
	log   *slog.Logger
	gauge prometheus.Gauge // spool_admin_tokens

	mu      sync.Mutex
	entries []tokenEntry
	checked time.Time
	mtime   time.Time
	size    int64
}

func openTokenFile(path string, gauge prometheus.Gauge, logger *slog.Logger) (*tokenFile, error) {
	f := &tokenFile{path: path, log: logger, gauge: gauge}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("admin.tokens_file: %w", err)
	}
	entries, err := readTokens(path)
	if err != nil {
		return nil, err
	}
	f.entries, f.mtime, f.size, f.checked = entries, fi.ModTime(), fi.Size(), time.Now()
	gauge.Set(float64(len(entries)))
	logger.Info("admin tokens loaded", "tokens_file", path, "tokens", len(entries))
	return f, nil
}

// current returns the entries, reloading the file first when it changed.
func (f *tokenFile) current() []tokenEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.checked) < tokensRecheck {
		return f.entries
	}
	f.checked = time.Now()
	fi, err := os.Stat(f.path)
	if err != nil {
		f.log.Error("admin.tokens_file unreadable: keeping the tokens loaded before", "tokens_file", f.path, "err", err)
		return f.entries
	}
	if fi.ModTime().Equal(f.mtime) && fi.Size() == f.size {
		return f.entries
	}
	entries, err := readTokens(f.path)
	if err != nil {
		f.log.Error("admin.tokens_file changed but does not load: keeping the tokens loaded before", "err", err)
		return f.entries
	}
	f.entries, f.mtime, f.size = entries, fi.ModTime(), fi.Size()
	f.gauge.Set(float64(len(entries)))
	f.log.Info("admin tokens reloaded", "tokens_file", f.path, "tokens", len(entries))
	return f.entries
}

// lookup finds the entry of token. It compares the token's digest with
// every entry's in constant time and does not stop at a match, so the
// time taken says nothing about which entry, or how much of one, matched.
func (f *tokenFile) lookup(token string) (principal, bool) {
	if len(token) < MinTokenBytes || len(token) > MaxTokenBytes {
		return principal{}, false
	}
	d := sha256.Sum256([]byte(token))
	entries := f.current()
	found := -1
	for i := range entries {
		if subtle.ConstantTimeCompare(d[:], entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return principal{}, false
	}
	e := entries[found]
	return principal{name: e.name, via: "token", role: e.role}, true
}

// readTokens parses a tokens file: one "<token> <name> <role>" a line,
// blank lines and lines starting with # ignored. A token written
// "sha256:<64 hex digits>" is its digest (the file then holds no token).
// Errors name the line, never the token.
func readTokens(path string) ([]tokenEntry, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("admin.tokens_file: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxTokensFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("admin.tokens_file: %w", err)
	}
	if len(data) > MaxTokensFileBytes {
		return nil, fmt.Errorf("admin.tokens_file %s: larger than %d bytes", path, MaxTokensFileBytes)
	}
	var out []tokenEntry
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxTokensFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := parseTokenLine(line)
		if err != nil {
			return nil, fmt.Errorf("admin.tokens_file %s: line %d: %w", path, n, err)
		}
		if first, dup := seen[e.digest]; dup {
			return nil, fmt.Errorf("admin.tokens_file %s: line %d: the same token as line %d", path, n, first)
		}
		seen[e.digest] = n
		if out = append(out, e); len(out) > MaxTokens {
			return nil, fmt.Errorf("admin.tokens_file %s: more than %d tokens", path, MaxTokens)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("admin.tokens_file %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("admin.tokens_file %s: no tokens (one a line: <token> <name> <read|operate>)", path)
	}
	return out, nil
}

func parseTokenLine(line string) (tokenEntry, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return tokenEntry{}, fmt.Errorf("want three fields, <token> <name> <read|operate>, got %d", len(f))
	}
	var e tokenEntry
	if h, ok := strings.CutPrefix(f[0], "sha256:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return tokenEntry{}, fmt.Errorf("a sha256: token must be 64 hex digits")
		}
		copy(e.digest[:], b)
	} else {
		if len(f[0]) < MinTokenBytes || len(f[0]) > MaxTokenBytes {
			return tokenEntry{}, fmt.Errorf("a token must be at least %d bytes (and at most %d): use a random one, like openssl rand -hex 32", MinTokenBytes, MaxTokenBytes)
		}
		e.digest = sha256.Sum256([]byte(f[0]))
	}
	if !tokenName.MatchString(f[1]) {
		return tokenEntry{}, fmt.Errorf("name %q: 1 to 128 of A-Z a-z 0-9 . _ @ : / -", f[1])
	}
	e.name = f[1]
	r, ok := parseRole(f[2])
	if !ok {
		return tokenEntry{}, fmt.Errorf("role %q: read or operate", f[2])
	}
	e.role = r
	return e, nil
}

// Bounds of what an audit line repeats of a request.
const (
	maxAuditString = 256
	maxAuditList   = 32
)

// auditArgs are the key arguments of an admin request for its audit line:
// its scalar fields that are set (topic, group, node, partitions, dry run,
// the reset's target...), strings cut to 256 bytes and lists to 32 items.
// Bytes and nested messages (payloads, filters) are left out. Admin
// requests carry no secret.
func auditArgs(req any) []slog.Attr {
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return nil
	}
	var out []slog.Attr
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.BytesKind || fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind || fd.IsMap():
		case fd.IsList():
			l := v.List()
			items := make([]any, 0, min(l.Len(), maxAuditList))
			for i := 0; i < l.Len() && i < maxAuditList; i++ {
				items = append(items, auditValue(fd, l.Get(i)))
			}
			out = append(out, slog.Any(string(fd.Name()), items))
		default:
			out = append(out, slog.Any(string(fd.Name()), auditValue(fd, v)))
		}
		return true
	})
	return out
}

func auditValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.StringKind:
		s := v.String()
		if len(s) > maxAuditString {
			s = strings.ToValidUTF8(s[:maxAuditString], "") + "…"
		}
		return s
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int64(v.Enum())
	}
	return v.Interface()
}
