package apps

import (
	"fmt"
	"log/slog"

	"github.com/spoolmq/spool/sidecar/authn"
	"github.com/spoolmq/spool/sidecar/config"
)

// Bounds of apps.tokens_file.
const (
	// MinTokenBytes: a shorter token could be guessed; 32 random hex digits
	// (openssl rand -hex 16) are 128 bits.
	MinTokenBytes = 32
	// MaxTokens bounds the file: every call (every unary call, every
	// stream once) compares its token's digest with each entry
	// (BenchmarkAuthenticate: ~5.7 µs a call with 100 on the test VM,
	// ~28 µs with 1,000). A sidecar serves the apps of one pod: a few
	// identities.
	MaxTokens = 100
	// maxTokensFileBytes bounds what is read of the file.
	maxTokensFileBytes = 4 << 20
)

// TokensFormat is apps.tokens_file's: "<token> <identity>" a line.
var TokensFormat = authn.Format{
	Setting: "apps.tokens_file", Usage: "<token> <identity>",
	MinTokenBytes: MinTokenBytes, MaxTokens: MaxTokens, MaxFileBytes: maxTokensFileBytes,
	CheckName: func(id string) error {
		if !config.ValidAppIdentity(id) {
			return fmt.Errorf("identity %q: must be 1 to %d bytes of a-z A-Z 0-9 . _ - @ : /", id, config.MaxAppIdentityBytes)
		}
		return nil
	},
}

// OpenTokens opens apps.tokens_file (read again when it changes).
func OpenTokens(path string, logger *slog.Logger) (*authn.File, error) {
	return authn.Open(path, TokensFormat, logger, nil)
}
