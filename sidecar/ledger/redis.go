package ledger

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions locate the Redis ledger. One address: a single server;
// several: a Cluster (seed list); MasterName: Sentinel (Addrs are the
// sentinels). Zero durations take the defaults below.
type RedisOptions struct {
	Addrs      []string
	MasterName string
	Username   string // ACL user; empty: the default user
	Password   string
	TLS        *tls.Config // nil: plaintext
	DB         int         // single server and Sentinel only
	// DialTimeout (default 1 s), ReadTimeout and WriteTimeout (default 1 s)
	// bound each socket operation; a context deadline (the Breaker's
	// per-call Timeout) bounds the call as a whole.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	PoolSize                               int // 0: go-redis's default (10 per GOMAXPROCS)
	// KeyPrefix is put before every key (empty: DefaultKeyPrefix). One
	// prefix per installation sharing a Redis; the ACL user's key pattern
	// is KeyPrefix + "*". At most MaxKeyPrefixBytes, no whitespace, control
	// characters or braces (a brace would change the Cluster hash tag).
	KeyPrefix string
	// OnMalformed, if set, is called for every entry under the prefix that
	// is not in the ledger's format (docs/ledger.md, "Malformed entries"),
	// with the operation that met it. The sidecar counts them and warns.
	// It runs on the caller's goroutine and must not block.
	OnMalformed func(op, group, key string)
	// MaxReplyBytes bounds one reply of Redis (0: DefaultMaxReplyBytes):
	// what its headers declare is checked before the client allocates it;
	// a reply over it fails its call with ErrReplyTooLarge and closes the
	// connection. OnReplyRefused, if set, is called for each (metrics).
	MaxReplyBytes  int64
	OnReplyRefused func()
}

const (
	defaultDialTimeout = time.Second
	defaultIOTimeout   = time.Second
)

func (o *RedisOptions) validate() error {
	if len(o.Addrs) == 0 {
		return fmt.Errorf("%w: redis ledger needs at least one address", ErrInvalid)
	}
	for _, a := range o.Addrs {
		if a == "" {
			return fmt.Errorf("%w: empty redis address", ErrInvalid)
		}
	}
	if o.MaxReplyBytes < 0 {
		return fmt.Errorf("%w: negative redis max reply bytes", ErrInvalid)
	}
	if o.MaxReplyBytes == 0 {
		o.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if o.DB < 0 || o.PoolSize < 0 || o.DialTimeout < 0 || o.ReadTimeout < 0 || o.WriteTimeout < 0 {
		return fmt.Errorf("%w: negative redis db, pool size or timeout", ErrInvalid)
	}
	if o.DB != 0 && o.MasterName == "" && len(o.Addrs) > 1 {
		return fmt.Errorf("%w: redis db %d: a Cluster has only db 0", ErrInvalid, o.DB)
	}
	if err := CheckKeyPrefix(o.KeyPrefix); err != nil {
		return err
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = defaultIOTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = defaultIOTimeout
	}
	return nil
}

// Redis is the production ledger. Each call is one script invocation per
// MaxBatch keys (EVALSHA, falling back to EVAL when the server lost its
// script cache). Safe for concurrent use.
type Redis struct {
	c           redis.UniversalClient
	prefix      string
	onMalformed func(op, group, key string)
	closed      atomic.Bool
}

var _ Ledger = (*Redis)(nil)

// NewRedis builds the client. It does not contact Redis: a server that is
// down at start-up shows as failed calls (and an open Breaker), not as a
// failed start.
func NewRedis(opts RedisOptions) (*Redis, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:      opts.Addrs,
		MasterName: opts.MasterName,
		Username:   opts.Username,
		Password:   opts.Password,
		TLSConfig:  opts.TLS,
		// The dialer does TLS itself, so that the reply cap sits above it.
		Dialer:       cappedDialer(opts.DialTimeout, opts.TLS, opts.MaxReplyBytes, opts.OnReplyRefused),
		DB:           opts.DB,
		DialTimeout:  opts.DialTimeout,
		ReadTimeout:  opts.ReadTimeout,
		WriteTimeout: opts.WriteTimeout,
		PoolSize:     opts.PoolSize,
		// The caller's deadline (the Breaker's Timeout) bounds socket I/O.
		ContextTimeoutEnabled: true,
		// No transparent retries: a Claim whose reply was lost has already
		// granted (token+1, attempts+1); replaying it would grant again.
		// The caller sees the error and decides (same-owner reclaim is safe).
		MaxRetries: -1,
		// One dial attempt per call: a refused connection is an answer.
		DialerRetries:   1,
		ClientName:      "spool-ledger",
		DisableIdentity: true,
	})
	return &Redis{c: c, prefix: opts.KeyPrefix, onMalformed: opts.OnMalformed}, nil
}

// Close releases the connections. Calls after Close fail with ErrClosed.
func (r *Redis) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	return r.c.Close()
}

// Ping checks that the server answers (health checks; the ledger itself
// never needs it).
func (r *Redis) Ping(ctx context.Context) error {
	if r.closed.Load() {
		return ErrClosed
	}
	return r.c.Ping(ctx).Err()
}

// malformedOf returns the decoders' callback for a batch of keys: it
// reports keys[i] through OnMalformed (nil when there is no hook).
func (r *Redis) malformedOf(op, group string, keys []string) func(i int) {
	if r.onMalformed == nil {
		return nil
	}
	return func(i int) { r.onMalformed(op, group, keys[i]) }
}

func (r *Redis) run(ctx context.Context, op string, s *redis.Script, keys []string, args []any) ([]any, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	v, err := s.Run(ctx, r.c, keys, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger %s (%d keys): %w", op, len(keys), err)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("ledger %s: %w: reply is %T, want an array", op, ErrBadReply, v)
	}
	return arr, nil
}

// Claim implements Ledger.
func (r *Redis) Claim(ctx context.Context, group, owner string, now time.Time, ttl time.Duration, claims []Claim) ([]ClaimResult, error) {
	ttl, err := checkClaimArgs(group, owner, ttl, claims)
	if err != nil {
		return nil, err
	}
	out := make([]ClaimResult, 0, len(claims))
	nowMs := strconv.FormatInt(unixMs(now), 10)
	ttlMs := strconv.FormatInt(ttl.Milliseconds(), 10)
	for start := 0; start < len(claims); start += MaxBatch {
		chunk := claims[start:min(start+MaxBatch, len(claims))]
		keys := make([]string, len(chunk))
		args := make([]any, 3, 3+2*len(chunk))
		args[0], args[1], args[2] = owner, nowMs, ttlMs
		for i, c := range chunk {
			keys[i] = keyOf(r.prefix, group, c.ID)
			args = append(args, strconv.FormatInt(unixMs(c.Lease), 10), strconv.FormatUint(c.Generation, 10))
		}
		arr, err := r.run(ctx, "claim", claimScript, keys, args)
		if err != nil {
			return nil, err
		}
		if out, err = decodeClaims(out, arr, len(chunk), r.malformedOf("claim", group, keys)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Complete implements Ledger. Each item also passes the attempts its
// claim answered (completeScript's one-command path).
func (r *Redis) Complete(ctx context.Context, group string, ttl time.Duration, items []Finish) error {
	return r.finish(ctx, "complete", completeScript, group, ttl, items, func(args []any, it Finish) []any {
		return append(args, strconv.FormatUint(it.Token, 10), strconv.Itoa(max(it.Attempts, 0)))
	})
}

// Dead implements Ledger.
func (r *Redis) Dead(ctx context.Context, group string, ttl time.Duration, items []Finish) error {
	return r.finish(ctx, "dead", deadScript, group, ttl, items, func(args []any, it Finish) []any {
		return append(args, strconv.FormatUint(it.Token, 10))
	})
}

// finish runs s over items in batches of MaxBatch: ARGV is the ttl, then
// what argsOf appends for each item.
func (r *Redis) finish(ctx context.Context, op string, s *redis.Script, group string, ttl time.Duration, items []Finish, argsOf func([]any, Finish) []any) error {
	ttl, err := checkFinishArgs(group, ttl, items)
	if err != nil {
		return err
	}
	ttlMs := strconv.FormatInt(ttl.Milliseconds(), 10)
	for start := 0; start < len(items); start += MaxBatch {
		chunk := items[start:min(start+MaxBatch, len(items))]
		keys := make([]string, len(chunk))
		args := make([]any, 1, 1+2*len(chunk))
		args[0] = ttlMs
		for i, it := range chunk {
			keys[i] = keyOf(r.prefix, group, it.ID)
			args = argsOf(args, it)
		}
		arr, err := r.run(ctx, op, s, keys, args)
		if err != nil {
			return err
		}
		if _, err := decodeFlags(arr, len(chunk), r.malformedOf(op, group, keys)); err != nil {
			return fmt.Errorf("ledger %s: %w", op, err)
		}
	}
	return nil
}

// Release implements Ledger.
func (r *Redis) Release(ctx context.Context, group string, ttl time.Duration, items []Release) error {
	ttl, err := checkReleaseArgs(group, ttl, items)
	if err != nil {
		return err
	}
	ttlMs := strconv.FormatInt(ttl.Milliseconds(), 10)
	for start := 0; start < len(items); start += MaxBatch {
		chunk := items[start:min(start+MaxBatch, len(items))]
		keys := make([]string, len(chunk))
		args := make([]any, 1, 1+3*len(chunk))
		args[0] = ttlMs
		for i, it := range chunk {
			keys[i] = keyOf(r.prefix, group, it.ID)
			uncount := "0"
			if it.Uncount {
				uncount = "1"
			}
			args = append(args, strconv.FormatUint(it.Token, 10), capError(it.Error), uncount)
		}
		arr, err := r.run(ctx, "release", releaseScript, keys, args)
		if err != nil {
			return err
		}
		if _, err := decodeFlags(arr, len(chunk), r.malformedOf("release", group, keys)); err != nil {
			return fmt.Errorf("ledger release: %w", err)
		}
	}
	return nil
}

// Reset implements Ledger.
func (r *Redis) Reset(ctx context.Context, group string, ids []string) ([]ResetResult, error) {
	if err := checkResetArgs(group, ids); err != nil {
		return nil, err
	}
	out := make([]ResetResult, 0, len(ids))
	for start := 0; start < len(ids); start += MaxBatch {
		chunk := ids[start:min(start+MaxBatch, len(ids))]
		keys := make([]string, len(chunk))
		for i, id := range chunk {
			keys[i] = keyOf(r.prefix, group, id)
		}
		arr, err := r.run(ctx, "reset", resetScript, keys, nil)
		if err != nil {
			return nil, err
		}
		if out, err = decodeResets(out, arr, len(chunk), r.malformedOf("reset", group, keys)); err != nil {
			return nil, fmt.Errorf("ledger reset: %w", err)
		}
	}
	return out, nil
}

// isDataError reports a Redis error reply that concerns the data of one
// batch (a key of another type under the ledger's prefix), not Redis's
// health.
func isDataError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "WRONGTYPE")
}
