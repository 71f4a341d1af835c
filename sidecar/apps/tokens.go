package apps

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spoolmq/spool/sidecar/config"
)

// Bounds of apps.tokens_file.
const (
	// MinTokenBytes: a shorter token could be guessed; 32 random hex digits
	// (openssl rand -hex 16) are 128 bits.
	MinTokenBytes = 32
	// MaxTokenBytes bounds a token (it travels in every call's metadata).
	MaxTokenBytes = 4096
	// MaxTokens bounds the file: every call (every unary call, every
	// stream once) compares its token's digest with each entry
	// (BenchmarkAuthenticate: ~5.7 µs a call with 100 on the test VM,
	// ~28 µs with 1,000). A sidecar serves the apps of one pod: a few
	// identities.
	MaxTokens = 100
	// maxTokensFileBytes bounds what is read of the file.
	maxTokensFileBytes = 4 << 20
)

// Tokens maps bearer tokens to app identities. Only the tokens' SHA-256
// digests are kept: a token never reaches a log, and memory holds no
// plaintext to leak.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest   [sha256.Size]byte
	identity string
}

// LoadTokens reads apps.tokens_file.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("apps.tokens_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokensFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("apps.tokens_file %s: %w", path, err)
	}
	if len(b) > maxTokensFileBytes {
		return nil, fmt.Errorf("apps.tokens_file %s: larger than %d bytes", path, maxTokensFileBytes)
	}
	t, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("apps.tokens_file %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens reads lines "token,identity"; blank lines and lines starting
// with # are skipped. Errors name the line, never the token.
func ParseTokens(data []byte) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), MaxTokenBytes+1024)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		tok, id, ok := strings.Cut(s, ",")
		tok, id = strings.TrimSpace(tok), strings.TrimSpace(id)
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: want token,identity", line)
		case len(tok) < MinTokenBytes || len(tok) > MaxTokenBytes || !visibleASCII(tok):
			return nil, fmt.Errorf("line %d: the token must be %d to %d visible ASCII characters other than a comma (openssl rand -hex 32 makes one)", line, MinTokenBytes, MaxTokenBytes)
		case !config.ValidAppIdentity(id):
			return nil, fmt.Errorf("line %d: identity %q: must be 1 to %d bytes of a-z A-Z 0-9 . _ - @ : /", line, id, config.MaxAppIdentityBytes)
		}
		d := sha256.Sum256([]byte(tok))
		if prev, dup := seen[d]; dup {
			return nil, fmt.Errorf("line %d: the same token as line %d: each token names one identity", line, prev)
		}
		seen[d] = line
		if len(t.entries) == MaxTokens {
			return nil, fmt.Errorf("more than %d tokens", MaxTokens)
		}
		t.entries = append(t.entries, tokenEntry{d, id})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("a line longer than %d bytes", MaxTokenBytes+1024)
	}
	return t, nil
}

func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' || s[i] == ',' {
			return false
		}
	}
	return true
}

// Identity returns the identity token names. It compares the token's
// digest with every entry's in constant time and never stops early, so the
// time taken says nothing about which entry, or which bytes, matched.
func (t *Tokens) Identity(token string) (string, bool) {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(d[:], t.entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return t.entries[found].identity, true
}

// Identities lists the identities the file names (with repeats).
func (t *Tokens) Identities() []string {
	out := make([]string, 0, len(t.entries))
	for _, e := range t.entries {
		out = append(out, e.identity)
	}
	return out
}
