package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spoolmq/spool/internal/wallclock"
)

// Status is the answer to one claimed message. The zero value is not a
// status: a ClaimResult that was never filled in is never mistaken for a
// grant.
type Status int

const (
	// Granted: the caller may deliver the message under Token.
	Granted Status = iota + 1
	// Done: the message was completed (dedupe hit); do not deliver.
	Done
	// Dead: the message was given to the dead-letter topic; do not deliver.
	Dead
	// Busy: another owner holds a live lease until BusyUntil.
	Busy
)

func (s Status) String() string {
	switch s {
	case Granted:
		return "granted"
	case Done:
		return "done"
	case Dead:
		return "dead"
	case Busy:
		return "busy"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Claim asks for one message.
type Claim struct {
	ID    string
	Lease time.Time // deadline of this delivery
	// Generation is the claimer's ownership generation of the message's
	// partition (the group coordinator's generation the member holds it
	// in; 0: none, as on a single node). A live lease of another owner is
	// taken over when it was granted under a lower generation: its holder
	// was fenced (expired, or it gave the partition up) and the partition
	// reassigned since. At most MaxGeneration.
	Generation uint64
}

// ClaimResult answers one Claim.
type ClaimResult struct {
	Status Status
	// Token is the new fencing token when Granted: the previous token + 1
	// (1 for a new entry). Done/Dead: the last token granted.
	Token uint64
	// Attempts: when Granted, attempts including this one (so attempt
	// numbers survive failover); Done/Dead: attempts made.
	Attempts int
	// LastError is the error text of the previous attempt, if any.
	LastError string
	// BusyUntil: when Busy, the lease deadline of the live holder.
	BusyUntil time.Time
}

// Release hands a message back for a retry. Uncount: the attempt does not
// count (the breaker was open, or the app handed it back unstarted), so
// attempts -= 1.
type Release struct {
	ID      string
	Token   uint64
	Error   string // recorded as the last error; empty keeps the previous one
	Uncount bool
}

// Finish completes or dead-letters a message held under Token.
type Finish struct {
	ID    string
	Token uint64
	// Attempts is what the Claim that granted Token answered (Complete
	// only; 0: not known). With it, and no last error recorded, a
	// completion is one Redis command instead of two; the entry is the
	// same either way.
	Attempts int
}

// ResetResult answers one id of a Reset (redrive).
type ResetResult int

const (
	// Reset: the entry was dead, released or in progress and starts afresh.
	Reset ResetResult = iota + 1
	// AlreadyDone: the message was completed; the entry is untouched.
	AlreadyDone
	// Absent: the ledger has no entry for the id (never seen, expired, or
	// already reset).
	Absent
)

func (r ResetResult) String() string {
	switch r {
	case Reset:
		return "reset"
	case AlreadyDone:
		return "already_done"
	case Absent:
		return "absent"
	}
	return fmt.Sprintf("ResetResult(%d)", int(r))
}

// Ledger is the idempotency ledger. Every call takes a batch of one group's
// messages and applies it atomically (per MaxBatch chunk; see Redis).
// Results come back in the order of the items.
type Ledger interface {
	// Claim grants each message to owner unless it is done or dead, or held
	// by ANOTHER owner under a lease that has not expired and a generation
	// not below the claim's (Busy). An expired lease, one held by the same
	// owner, or one granted under a lower generation than the claim's
	// (Claim.Generation: its holder was fenced) is taken over with
	// token+1. An owner string that differs in any way is another owner.
	// spoold passes its node id.
	Claim(ctx context.Context, group, owner string, now time.Time, ttl time.Duration, claims []Claim) ([]ClaimResult, error)
	// Complete: in_progress with this token → done. A stale token, or any
	// other state, changes nothing.
	Complete(ctx context.Context, group string, ttl time.Duration, items []Finish) error
	// Release: in_progress with this token → released; the attempt stays
	// counted unless Uncount; Error recorded as the last error.
	Release(ctx context.Context, group string, ttl time.Duration, items []Release) error
	// Dead: in_progress or released with this token → dead (the message was
	// given to the dead-letter topic). A stale token changes nothing.
	Dead(ctx context.Context, group string, ttl time.Duration, items []Finish) error
	// Reset (redrive): dead, released or in_progress → a fresh start
	// (attempts 0, no error, no state; only the fencing token is kept so
	// that tokens never repeat): Reset. Done → untouched: AlreadyDone.
	// Missing → Absent.
	Reset(ctx context.Context, group string, ids []string) ([]ResetResult, error)
	Close() error
}

// Limits and defaults.
const (
	// MaxBatch bounds the keys of one script call; larger batches are split
	// into calls of at most MaxBatch keys (each atomic on its own).
	MaxBatch = 1000
	// MaxErrorBytes caps the recorded error text (cut on a UTF-8 boundary).
	MaxErrorBytes = 1024
	// DefaultTTL is the dedupe TTL when a call passes ttl == 0.
	DefaultTTL = 7 * 24 * time.Hour
	// DefaultKeyPrefix: keys are prefix + "{" + group + "}:" + id.
	DefaultKeyPrefix = "spool:l:"
	// MaxKeyPrefixBytes bounds RedisOptions.KeyPrefix (redis.key_prefix).
	MaxKeyPrefixBytes = 64
	// MaxGeneration bounds Claim.Generation: it is stored as at most 15
	// decimal digits, exact in Lua's numbers (doubles).
	MaxGeneration = 999_999_999_999_999
	// GenerationSep separates the owner from its generation in the
	// entry's owner field ("node-1@7"); owners may not contain it.
	GenerationSep = "@"
)

var (
	// ErrUnavailable: the ledger could not be reached in time, or its
	// breaker is open. The delivery loop applies the subscription's
	// redis_unavailable policy. Returned by Breaker, always wrapped.
	ErrUnavailable = errors.New("redis ledger unavailable")
	// ErrInvalid: a call's arguments break the ledger's contract (empty
	// group, owner or id; braces in a group; negative TTL). A caller bug:
	// never retried, never counted against Redis.
	ErrInvalid = errors.New("invalid ledger request")
	// ErrBadReply: Redis answered something the scripts never return.
	// Replies are untrusted input: decoding fails with this error, never
	// panics.
	ErrBadReply = errors.New("unexpected reply from redis ledger")
	// ErrClosed: the ledger was closed.
	ErrClosed = errors.New("ledger closed")
)

// Key returns the Redis key of (group, id). The hash tag {group} keeps a
// group's keys on one Cluster slot, so a whole batch is one script call.
func Key(group, id string) string {
	return keyOf(DefaultKeyPrefix, group, id)
}

func keyOf(prefix, group, id string) string {
	return prefix + "{" + group + "}:" + id
}

// CheckKeyPrefix refuses a key prefix that is too long (keys are sent
// with every message), holds whitespace or control characters (they make
// the ACL rule and redis-cli output ambiguous), or braces (Redis Cluster
// takes the first {...} of a key as its hash tag: a brace in the prefix
// would put a group's keys on several slots, or all groups on one).
func CheckKeyPrefix(p string) error {
	if len(p) > MaxKeyPrefixBytes {
		return fmt.Errorf("%w: redis key prefix of %d bytes, over %d", ErrInvalid, len(p), MaxKeyPrefixBytes)
	}
	for _, c := range p {
		if unicode.IsSpace(c) || unicode.IsControl(c) || c == '{' || c == '}' || c == utf8.RuneError {
			return fmt.Errorf("%w: redis key prefix %q: no whitespace, control characters, braces or invalid UTF-8", ErrInvalid, p)
		}
	}
	return nil
}

// checkGroup rejects groups that would break the hash tag: empty (the tag
// "{}" hashes the whole key) or containing braces.
func checkGroup(group string) error {
	if group == "" {
		return fmt.Errorf("%w: empty group", ErrInvalid)
	}
	if strings.ContainsAny(group, "{}") {
		return fmt.Errorf("%w: group %q contains a brace (it is the Redis Cluster hash tag)", ErrInvalid, group)
	}
	return nil
}

func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty message id", ErrInvalid)
	}
	return nil
}

// ttlOrDefault: 0 means DefaultTTL; negative is invalid; below 1 ms is
// rounded up to 1 ms (PEXPIRE's unit).
func ttlOrDefault(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return DefaultTTL, nil
	case ttl < 0:
		return 0, fmt.Errorf("%w: negative ttl %v", ErrInvalid, ttl)
	case ttl < time.Millisecond:
		return time.Millisecond, nil
	}
	return ttl, nil
}

// capError cuts s to MaxErrorBytes on a rune boundary.
func capError(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	cut := MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// checkClaimArgs validates a Claim call once for both implementations.
func checkClaimArgs(group, owner string, ttl time.Duration, claims []Claim) (time.Duration, error) {
	if err := checkGroup(group); err != nil {
		return 0, err
	}
	if owner == "" || strings.ContainsRune(owner, '\n') || strings.Contains(owner, GenerationSep) {
		return 0, fmt.Errorf("%w: owner %q: must be non-empty, without newlines or %q", ErrInvalid, owner, GenerationSep)
	}
	for i := range claims {
		if err := checkID(claims[i].ID); err != nil {
			return 0, err
		}
		if claims[i].Generation > MaxGeneration {
			return 0, fmt.Errorf("%w: generation %d over %d", ErrInvalid, claims[i].Generation, uint64(MaxGeneration))
		}
	}
	return ttlOrDefault(ttl)
}

func checkFinishArgs(group string, ttl time.Duration, items []Finish) (time.Duration, error) {
	if err := checkGroup(group); err != nil {
		return 0, err
	}
	for i := range items {
		if err := checkID(items[i].ID); err != nil {
			return 0, err
		}
	}
	return ttlOrDefault(ttl)
}

func checkReleaseArgs(group string, ttl time.Duration, items []Release) (time.Duration, error) {
	if err := checkGroup(group); err != nil {
		return 0, err
	}
	for i := range items {
		if err := checkID(items[i].ID); err != nil {
			return 0, err
		}
	}
	return ttlOrDefault(ttl)
}

func checkResetArgs(group string, ids []string) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	for _, id := range ids {
		if err := checkID(id); err != nil {
			return err
		}
	}
	return nil
}

// unixMs is the lease encoding in both implementations (Redis stores it as
// decimal milliseconds): the time as this sidecar's clock tells it to the
// others (internal/wallclock), and fromUnixMs its inverse.
func unixMs(t time.Time) int64 { return wallclock.UnixMilli(t) }

func fromUnixMs(ms int64) time.Time { return wallclock.FromUnixMilli(ms) }
