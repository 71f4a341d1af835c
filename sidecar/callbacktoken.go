package sidecar

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/grpc/credentials"

	"github.com/spoolmq/spool/sidecar/apps"
	"github.com/spoolmq/spool/sidecar/authn"
)

// callbackToken is what spoold sends to an app's HandlerService as
// "authorization: Bearer <token>" (subscriptions[*].app_token_file). It
// never prints itself.
type callbackToken string

var _ credentials.PerRPCCredentials = callbackToken("")

func (callbackToken) String() string { return "[redacted]" }

func (t callbackToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false: app_address is a Unix socket or an
// address the operator chose (docs/security.md, "SDK callback servers").
func (callbackToken) RequireTransportSecurity() bool { return false }

// loadCallbackToken reads a token file: one token of apps.MinTokenBytes to
// authn.MaxTokenBytes visible ASCII characters, a trailing newline allowed.
// Its errors name the file, never its content.
func loadCallbackToken(path string) (callbackToken, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("app_token_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, authn.MaxTokenBytes+2))
	if err != nil {
		return "", fmt.Errorf("app_token_file %s: %w", path, err)
	}
	tok := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	ok := len(tok) >= apps.MinTokenBytes && len(tok) <= authn.MaxTokenBytes
	for i := 0; ok && i < len(tok); i++ {
		ok = tok[i] > ' ' && tok[i] <= '~'
	}
	if !ok {
		return "", fmt.Errorf("app_token_file %s: must hold one token of %d to %d visible ASCII characters (openssl rand -hex 32 makes one)", path, apps.MinTokenBytes, authn.MaxTokenBytes)
	}
	return callbackToken(tok), nil
}
