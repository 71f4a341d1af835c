package ledger

import (
	"context"
	"sync"
	"time"
)

// Entry states, as stored in Redis's "state" field.
const (
	stateInProgress = "in_progress"
	stateReleased   = "released"
	stateDone       = "done"
	stateDead       = "dead"
)

// Memory is the in-process ledger for `spoold --dev` and fault-injection
// tests: the same semantics as Redis (one conformance suite), a map under
// one mutex, TTLs expired lazily on access plus a sweep whenever the map
// has doubled since the last one (so memory stays bounded by live entries).
// It does not survive the process, so it dedupes only within one run.
type Memory struct {
	now func() time.Time // the TTL clock

	mu        sync.Mutex
	entries   map[string]*memEntry
	sweepSize int // sweep when len(entries) reaches this
	closed    bool
}

type memEntry struct {
	state    string // "" after Reset: only the token is kept
	token    uint64
	lease    int64 // unix ms
	owner    string
	gen      uint64 // ownership generation of the lease (0: none)
	attempts int
	err      string
	expires  time.Time
}

var _ Ledger = (*Memory)(nil)

const minSweepSize = 1024

// NewMemory returns an empty ledger whose TTLs run on now (nil: time.Now).
// Lease comparisons use the now passed to Claim, as with Redis.
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, entries: make(map[string]*memEntry), sweepSize: minSweepSize}
}

// Close implements Ledger. Calls after Close fail with ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.entries = nil
	return nil
}

// Len is the number of live entries (tests and --dev diagnostics).
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked(m.now())
	return len(m.entries)
}

// TTL is the remaining time to live of (group, id), 0 when absent (the
// PTTL of the Redis key).
func (m *Memory) TTL(group, id string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e := m.getLocked(Key(group, id), now); e != nil {
		return e.expires.Sub(now)
	}
	return 0
}

func (m *Memory) getLocked(key string, now time.Time) *memEntry {
	e := m.entries[key]
	if e != nil && !now.Before(e.expires) {
		delete(m.entries, key)
		return nil
	}
	return e
}

func (m *Memory) putLocked(key string, e *memEntry, now time.Time, ttl time.Duration) {
	e.expires = now.Add(ttl)
	if _, ok := m.entries[key]; !ok {
		m.entries[key] = e
		if len(m.entries) >= m.sweepSize {
			m.sweepLocked(now)
			m.sweepSize = max(minSweepSize, 2*len(m.entries))
		}
	}
}

func (m *Memory) sweepLocked(now time.Time) {
	for k, e := range m.entries {
		if !now.Before(e.expires) {
			delete(m.entries, k)
		}
	}
}

// Claim implements Ledger.
func (m *Memory) Claim(ctx context.Context, group, owner string, now time.Time, ttl time.Duration, claims []Claim) ([]ClaimResult, error) {
	ttl, err := checkClaimArgs(group, owner, ttl, claims)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	clock := m.now()
	nowMs := unixMs(now)
	out := make([]ClaimResult, len(claims))
	for i, c := range claims {
		key := Key(group, c.ID)
		e := m.getLocked(key, clock)
		if e == nil {
			e = &memEntry{}
		}
		r := ClaimResult{Token: e.token, Attempts: e.attempts, LastError: e.err}
		switch {
		case e.state == stateDone:
			r.Status = Done
		case e.state == stateDead:
			r.Status = Dead
		case e.state == stateInProgress && e.owner != owner && e.lease > nowMs && c.Generation <= e.gen:
			r.Status = Busy
			r.BusyUntil = fromUnixMs(e.lease)
		default:
			e.state, e.owner, e.gen, e.lease = stateInProgress, owner, c.Generation, unixMs(c.Lease)
			e.token++
			e.attempts++
			m.putLocked(key, e, clock, ttl)
			r.Status, r.Token, r.Attempts = Granted, e.token, e.attempts
		}
		out[i] = r
	}
	return out, nil
}

// Complete implements Ledger.
func (m *Memory) Complete(ctx context.Context, group string, ttl time.Duration, items []Finish) error {
	return m.finish(ctx, group, ttl, items, stateDone, stateInProgress, "")
}

// Dead implements Ledger.
func (m *Memory) Dead(ctx context.Context, group string, ttl time.Duration, items []Finish) error {
	return m.finish(ctx, group, ttl, items, stateDead, stateInProgress, stateReleased)
}

// finish moves entries held under the item's token from one of from to to.
func (m *Memory) finish(ctx context.Context, group string, ttl time.Duration, items []Finish, to string, from1, from2 string) error {
	ttl, err := checkFinishArgs(group, ttl, items)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	clock := m.now()
	for _, it := range items {
		key := Key(group, it.ID)
		e := m.getLocked(key, clock)
		if e == nil {
			continue
		}
		if e.token != it.Token || e.state == "" || (e.state != from1 && e.state != from2) {
			if to == stateDone {
				// As Redis's one-command completion does: an entry it
				// finds in another state is put back, its TTL restarted.
				m.putLocked(key, e, clock, ttl)
			}
			continue
		}
		e.state = to
		m.putLocked(key, e, clock, ttl)
	}
	return nil
}

// Release implements Ledger.
func (m *Memory) Release(ctx context.Context, group string, ttl time.Duration, items []Release) error {
	ttl, err := checkReleaseArgs(group, ttl, items)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	clock := m.now()
	for _, it := range items {
		key := Key(group, it.ID)
		e := m.getLocked(key, clock)
		if e == nil || e.state != stateInProgress || e.token != it.Token {
			continue
		}
		e.state = stateReleased
		if it.Error != "" {
			e.err = capError(it.Error)
		}
		if it.Uncount && e.attempts > 0 {
			e.attempts--
		}
		m.putLocked(key, e, clock, ttl)
	}
	return nil
}

// Reset implements Ledger.
func (m *Memory) Reset(ctx context.Context, group string, ids []string) ([]ResetResult, error) {
	if err := checkResetArgs(group, ids); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	clock := m.now()
	out := make([]ResetResult, len(ids))
	for i, id := range ids {
		e := m.getLocked(Key(group, id), clock)
		switch {
		case e == nil || e.state == "":
			out[i] = Absent
		case e.state == stateDone:
			out[i] = AlreadyDone
		default:
			// Keep the token (and the TTL) so that a token is never
			// handed out twice; everything else starts afresh.
			*e = memEntry{token: e.token, expires: e.expires}
			out[i] = Reset
		}
	}
	return out, nil
}
