package ledger

import (
	"fmt"
	"math"
)

// Decoding of script replies. Replies are untrusted input: every shape or
// range violation is an ErrBadReply, never a panic.

func replyInt(v any, what string) (int64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: %s is %T, want an integer", ErrBadReply, what, v)
	}
	return n, nil
}

func replyString(v any, what string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s is %T, want a string", ErrBadReply, what, v)
	}
	return s, nil
}

// decodeClaims appends n ClaimResults decoded from a claimScript reply and
// calls malformed (if not nil) with the index of each item granted over a
// malformed entry.
func decodeClaims(out []ClaimResult, arr []any, n int, malformed func(i int)) ([]ClaimResult, error) {
	const per = 5
	if len(arr) != per*n {
		return out, fmt.Errorf("%w: claim reply has %d values for %d keys, want %d", ErrBadReply, len(arr), n, per*n)
	}
	for i := 0; i < n; i++ {
		v := arr[per*i : per*i+per]
		code, err := replyInt(v[0], "claim status")
		if err != nil {
			return out, err
		}
		token, err := replyInt(v[1], "claim token")
		if err != nil {
			return out, err
		}
		attempts, err := replyInt(v[2], "claim attempts")
		if err != nil {
			return out, err
		}
		busy, err := replyInt(v[3], "claim busy_until")
		if err != nil {
			return out, err
		}
		lastErr, err := replyString(v[4], "claim last error")
		if err != nil {
			return out, err
		}
		if token < 0 || attempts < 0 || attempts > math.MaxInt32 || busy < 0 {
			return out, fmt.Errorf("%w: claim values out of range (token %d, attempts %d, busy_until %d)", ErrBadReply, token, attempts, busy)
		}
		if len(lastErr) > MaxErrorBytes {
			return out, fmt.Errorf("%w: claim last error of %d bytes, over %d", ErrBadReply, len(lastErr), MaxErrorBytes)
		}
		r := ClaimResult{Token: uint64(token), Attempts: int(attempts), LastError: lastErr}
		switch code {
		case codeGranted, codeGrantedMalformed:
			r.Status = Granted
			if token == 0 || attempts == 0 {
				return out, fmt.Errorf("%w: grant with token %d, attempts %d", ErrBadReply, token, attempts)
			}
			if code == codeGrantedMalformed && malformed != nil {
				malformed(i)
			}
		case codeDone:
			r.Status = Done
		case codeDead:
			r.Status = Dead
		case codeBusy:
			r.Status = Busy
			r.BusyUntil = fromUnixMs(busy)
		default:
			return out, fmt.Errorf("%w: claim status %d", ErrBadReply, code)
		}
		out = append(out, r)
	}
	return out, nil
}

// decodeFlags decodes the per-key flags of the complete, release and dead
// scripts, returns how many applied and calls malformed (if not nil) with
// the index of each item whose entry was malformed (left alone).
func decodeFlags(arr []any, n int, malformed func(i int)) (applied int, err error) {
	if len(arr) != n {
		return 0, fmt.Errorf("%w: reply has %d values for %d keys", ErrBadReply, len(arr), n)
	}
	for i, v := range arr {
		f, err := replyInt(v, "applied flag")
		if err != nil {
			return 0, err
		}
		switch f {
		case flagIgnored:
		case flagMalformed:
			if malformed != nil {
				malformed(i)
			}
		case flagApplied:
			applied++
		default:
			return 0, fmt.Errorf("%w: applied flag %d", ErrBadReply, f)
		}
	}
	return applied, nil
}

// decodeResets appends n ResetResults decoded from a resetScript reply and
// calls malformed (if not nil) with the index of each item whose entry was
// malformed (answered Absent, left alone).
func decodeResets(out []ResetResult, arr []any, n int, malformed func(i int)) ([]ResetResult, error) {
	if len(arr) != n {
		return out, fmt.Errorf("%w: reset reply has %d values for %d keys", ErrBadReply, len(arr), n)
	}
	for i, v := range arr {
		c, err := replyInt(v, "reset result")
		if err != nil {
			return out, err
		}
		switch c {
		case codeReset:
			out = append(out, Reset)
		case codeAlreadyDone:
			out = append(out, AlreadyDone)
		case codeAbsent:
			out = append(out, Absent)
		case codeAbsentMalformed:
			out = append(out, Absent)
			if malformed != nil {
				malformed(i)
			}
		default:
			return out, fmt.Errorf("%w: reset result %d", ErrBadReply, c)
		}
	}
	return out, nil
}
