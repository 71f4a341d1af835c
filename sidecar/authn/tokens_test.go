package authn

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	tokA = "0123456789abcdef0123456789abcdef-a"
	tokB = "0123456789abcdef0123456789abcdef-b"
)

var roleFormat = Format{
	Setting: "test.tokens_file", Extra: 1, Usage: "<token> <name> <role>", MinTokenBytes: 16, MaxTokens: 3, MaxFileBytes: 1 << 10,
	CheckExtra: func(x []string) error {
		if x[0] != "read" && x[0] != "operate" {
			return errors.New("role: read or operate")
		}
		return nil
	},
}

// Lines hold a token (or its sha256: digest), a name and the format's
// fields; a token finds its entry and nothing else does; errors name the
// line, never the token.
func TestParse(t *testing.T) {
	d := sha256.Sum256([]byte(tokB))
	s, err := Parse([]byte("# tokens\n\n"+tokA+" ops operate\n  sha256:"+hex.EncodeToString(d[:])+"  grafana read \n"), roleFormat)
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]Entry{tokA: {"ops", []string{"operate"}}, tokB: {"grafana", []string{"read"}}} {
		if e, ok := s.Lookup(tok); !ok || e.Name != want.Name || e.Extra[0] != want.Extra[0] {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v", tok, e, ok, want)
		}
	}
	for _, bad := range []string{"", tokA[:len(tokA)-1], tokA + "x", strings.ToUpper(tokA), strings.Repeat("x", MaxTokenBytes+1)} {
		if e, ok := s.Lookup(bad); ok {
			t.Errorf("Lookup(%q) = %+v, want not found", bad, e)
		}
	}
	for _, c := range []struct{ file, want string }{
		{tokA + " ops", "line 1: want 3 fields"},
		{"short ops read", "line 1: the token must be"},
		{"sha256:abcd ops read", "line 1: a sha256: token must be 64 hex digits"},
		{tokA + " ops admin", "line 1: role"},
		{"x\x01" + tokA + " ops read", "line 1: the token must be"},
		{tokA + " ops read\n" + tokA + " other read", "line 2: the same token as line 1"},
		{tokA + " a read\n" + tokB + " b read\n" + tokA + "1 c read\n" + tokB + "1 d read", "more than 3 tokens"},
	} {
		_, err := Parse([]byte(c.file), roleFormat)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.file, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), tokA) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
}

// A file is read again once it changes (at most once per Recheck); a
// change that does not load keeps the entries before; an empty or missing
// file does not open.
func TestFileReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokA + " ops operate\n")
	loads := 0
	f, err := Open(path, roleFormat, slog.New(slog.DiscardHandler), func(*Set) { loads++ })
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.now = func() time.Time { return now }
	write(tokB + " grafana read\n")
	if _, ok := f.Lookup(tokB); ok {
		t.Fatal("reloaded before Recheck passed")
	}
	now = now.Add(2 * Recheck)
	if _, ok := f.Lookup(tokB); !ok {
		t.Fatal("the changed file was not loaded")
	}
	if _, ok := f.Lookup(tokA); ok {
		t.Fatal("a token removed from the file still works")
	}
	write("garbage\n")
	now = now.Add(2 * Recheck)
	if _, ok := f.Lookup(tokB); !ok {
		t.Fatal("a file that does not load replaced the working tokens")
	}
	if loads != 2 {
		t.Fatalf("onLoad called %d times, want 2", loads)
	}
	write("# none\n")
	if _, err := Open(path, roleFormat, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), "no tokens") {
		t.Fatalf("an empty file: %v", err)
	}
	if _, err := Open(path+"-missing", roleFormat, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Fatal("a missing file opened")
	}
}
