package limits

import "testing"

func TestValidNameBytes(t *testing.T) {
	for s, want := range map[string]bool{
		"":                true, // the length is each caller's check
		"orders-v2.eu_1":  true,
		"ABC.xyz-09_":     true,
		"a b":             false,
		"a/b":             false,
		"a:b":             false,
		"caf\u00e9":       false,
		"tab\there":       false,
		"\x00":            false,
		"emoji\U0001F600": false,
	} {
		if got := ValidNameBytes(s); got != want {
			t.Errorf("ValidNameBytes(%q) = %v, want %v", s, got, want)
		}
	}
}
