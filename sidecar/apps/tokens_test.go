package apps

import (
	"strings"
	"testing"

	"github.com/spoolmq/spool/sidecar/authn"
)

const (
	tokA = "0123456789abcdef0123456789abcdef-a"
	tokB = "0123456789abcdef0123456789abcdef-b"
)

// apps.tokens_file: "<token> <identity>" lines, identities as the scopes
// name them, tokens of 32 bytes or more, at most MaxTokens.
func TestTokensFormat(t *testing.T) {
	tk, err := authn.Parse([]byte("# apps\n\n"+tokA+" shop\n "+tokB+"   billing \n"), TokensFormat)
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{tokA: "shop", tokB: "billing"} {
		if e, ok := tk.Lookup(tok); !ok || e.Name != want {
			t.Errorf("Lookup(%s) = %q, %v; want %q", tok, e.Name, ok, want)
		}
	}
	for _, c := range []struct{ file, want string }{
		{tokA, "line 1: want 2 fields"},
		{"short shop", "line 1: the token must be at least 32 bytes"},
		{tokA + " sh#op!", "line 1: identity"},
		{tokA + " shop extra", "line 1: want 2 fields"},
	} {
		_, err := authn.Parse([]byte(c.file), TokensFormat)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.file, err, c.want)
		}
	}
	var many strings.Builder
	for i := range MaxTokens + 1 {
		many.WriteString(strings.Repeat("t", MinTokenBytes) + strings.Repeat("x", i%50) + strings.Repeat("y", i/50) + " app\n")
	}
	if _, err := authn.Parse([]byte(many.String()), TokensFormat); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d tokens: %v, want refused", MaxTokens+1, err)
	}
}
