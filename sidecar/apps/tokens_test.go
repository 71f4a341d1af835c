package apps

import (
	"strings"
	"testing"
)

const (
	tokA = "0123456789abcdef0123456789abcdef-a"
	tokB = "0123456789abcdef0123456789abcdef-b"
)

func TestParseTokens(t *testing.T) {
	tk, err := ParseTokens([]byte("# apps\n\n" + tokA + ",shop\n " + tokB + " , billing \n"))
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{tokA: "shop", tokB: "billing"} {
		if id, ok := tk.Identity(tok); !ok || id != want {
			t.Errorf("Identity(%s) = %q, %v; want %q", tok, id, ok, want)
		}
	}
	for _, bad := range []string{"", tokA[:len(tokA)-1], tokA + "x", strings.ToUpper(tokA)} {
		if id, ok := tk.Identity(bad); ok {
			t.Errorf("Identity(%q) = %q, want not found", bad, id)
		}
	}
	for _, c := range []struct{ file, want string }{
		{tokA, "line 1: want token,identity"},
		{"short,shop", "line 1: the token must be"},
		{tokA + ",", "line 1: identity"},
		{tokA + ",sh op", "line 1: identity"},
		{"x\x01" + tokA + ",shop", "line 1: the token must be"},
		{tokA + ",shop\n" + tokA + ",billing", "line 2: the same token as line 1"},
	} {
		_, err := ParseTokens([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTokens(%q) = %v, want %q", c.file, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), tokA) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
	var many strings.Builder
	for i := range MaxTokens + 1 {
		many.WriteString(strings.Repeat("t", MinTokenBytes) + strings.Repeat("x", i%50) + strings.Repeat("y", i/50) + ",app\n")
	}
	if _, err := ParseTokens([]byte(many.String())); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d tokens: %v, want refused", MaxTokens+1, err)
	}
}
