package ledger

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeRejectsBadReplies(t *testing.T) {
	good := []any{int64(1), int64(1), int64(1), int64(0), ""}
	if r, err := decodeClaims(nil, good, 1, nil); err != nil || r[0].Status != Granted {
		t.Fatalf("good reply: %v, %v", r, err)
	}
	for name, arr := range map[string][]any{
		"short":           good[:4],
		"long":            append(append([]any{}, good...), int64(1)),
		"status type":     {"1", int64(1), int64(1), int64(0), ""},
		"unknown status":  {int64(9), int64(1), int64(1), int64(0), ""},
		"zero status":     {int64(0), int64(1), int64(1), int64(0), ""},
		"negative token":  {int64(2), int64(-1), int64(1), int64(0), ""},
		"grant token 0":   {int64(1), int64(0), int64(1), int64(0), ""},
		"huge attempts":   {int64(2), int64(1), int64(1 << 40), int64(0), ""},
		"err type":        {int64(1), int64(1), int64(1), int64(0), int64(7)},
		"nil":             {nil, nil, nil, nil, nil},
		"nested":          {[]any{}, int64(1), int64(1), int64(0), ""},
		"busy type":       {int64(4), int64(1), int64(1), "soon", ""},
		"negative busy":   {int64(4), int64(1), int64(1), int64(-5), ""},
		"float token":     {int64(1), 1.5, int64(1), int64(0), ""},
		"attempts string": {int64(1), int64(1), "1", int64(0), ""},
		"long error":      {int64(3), int64(1), int64(1), int64(0), strings.Repeat("e", MaxErrorBytes+1)},
	} {
		if _, err := decodeClaims(nil, arr, 1, nil); !errors.Is(err, ErrBadReply) {
			t.Errorf("claims %s: err = %v, want ErrBadReply", name, err)
		}
	}
	for name, arr := range map[string][]any{
		"short": {}, "type": {"1"}, "value": {int64(3)}, "nil": {nil},
	} {
		if _, err := decodeFlags(arr, 1, nil); !errors.Is(err, ErrBadReply) {
			t.Errorf("flags %s: err = %v", name, err)
		}
		if _, err := decodeResets(nil, arr, 1, nil); !errors.Is(err, ErrBadReply) && name != "value" {
			t.Errorf("resets %s: err = %v", name, err)
		}
	}
	if _, err := decodeResets(nil, []any{int64(5)}, 1, nil); !errors.Is(err, ErrBadReply) {
		t.Errorf("reset code 5: %v", err)
	}
}

// Whatever Redis (or something posing as it) answers, decoding returns an
// error or a result, never panics.
func FuzzDecodeClaims(f *testing.F) {
	f.Add(int64(1), int64(1), int64(1), int64(0), "", 1)
	f.Add(int64(4), int64(3), int64(2), int64(1_800_000_000_000), "e", 1)
	f.Add(int64(-1), int64(-1), int64(-1), int64(-1), "", 0)
	f.Fuzz(func(t *testing.T, a, b, c, d int64, s string, n int) {
		arr := []any{a, b, c, d, s}
		res, err := decodeClaims(nil, arr, n%3, nil)
		if err == nil && len(res) != n%3 {
			t.Fatalf("%d results for %d", len(res), n%3)
		}
	})
}
