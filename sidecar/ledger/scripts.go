package ledger

import "github.com/redis/go-redis/v9"

// The ledger's Lua scripts. Each runs over every key of a batch (all of one
// group, so one Cluster slot) and is atomic. Fields of an entry (a hash):
// state, token, lease (unix ms), owner, attempts, err. Every write refreshes
// the key's TTL; reads (Busy, Done, Dead answers) do not, so a done entry
// dedupes for TTL after its completion.
//
// Numbers written into the hash go through string.format('%d') because
// redis.call turns a Lua number into "%.14g" text (1e+14 style).
// Contracts in docs/ledger.md; the Memory twin in memory.go mirrors them.

// Reply status codes (claimScript) and reset codes (resetScript).
const (
	codeGranted = 1
	codeDone    = 2
	codeDead    = 3
	codeBusy    = 4

	codeReset       = 1
	codeAlreadyDone = 2
	codeAbsent      = 3
)

// claimScript: ARGV[1] owner, ARGV[2] now (unix ms), ARGV[3] ttl (ms),
// ARGV[3+i] lease deadline for KEYS[i] (unix ms).
// Reply: 5 values per key: status, token, attempts, busy_until (unix ms,
// 0 unless busy), last error.
var claimScript = redis.NewScript(`
local owner = ARGV[1]
local now = tonumber(ARGV[2])
local ttl = ARGV[3]
local out = {}
local n = 0
for i = 1, #KEYS do
  local key = KEYS[i]
  local h = redis.call('HMGET', key, 'state', 'token', 'lease', 'owner', 'attempts', 'err')
  local state = h[1]
  local token = tonumber(h[2]) or 0
  local attempts = tonumber(h[5]) or 0
  local lease = tonumber(h[3]) or 0
  local status, busy = 1, 0
  if state == 'done' then
    status = 2
  elseif state == 'dead' then
    status = 3
  elseif state == 'in_progress' and h[4] ~= owner and lease > now then
    status = 4
    busy = lease
  else
    token = token + 1
    attempts = attempts + 1
    redis.call('HSET', key, 'state', 'in_progress', 'token', string.format('%d', token),
      'lease', ARGV[3 + i], 'owner', owner, 'attempts', string.format('%d', attempts))
    redis.call('PEXPIRE', key, ttl)
  end
  out[n + 1] = status
  out[n + 2] = token
  out[n + 3] = attempts
  out[n + 4] = busy
  out[n + 5] = h[6] or ''
  n = n + 5
end
return out
`)

// completeScript: ARGV[1] ttl (ms), ARGV[1+i] token for KEYS[i].
// in_progress with that token → done. Reply: 1 applied / 0 not, per key.
var completeScript = redis.NewScript(`
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local h = redis.call('HMGET', key, 'state', 'token')
  if h[1] == 'in_progress' and h[2] == ARGV[1 + i] then
    redis.call('HSET', key, 'state', 'done')
    redis.call('PEXPIRE', key, ttl)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// releaseScript: ARGV[1] ttl (ms), then per KEYS[i] three values at
// ARGV[3i-1..3i+1]: token, error text (empty: keep the previous one),
// uncount ("1": attempts -= 1, not below 0).
// in_progress with that token → released. Reply: 1 applied / 0 not.
var releaseScript = redis.NewScript(`
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local j = 3 * i - 1
  local h = redis.call('HMGET', key, 'state', 'token', 'attempts')
  if h[1] == 'in_progress' and h[2] == ARGV[j] then
    redis.call('HSET', key, 'state', 'released')
    if ARGV[j + 1] ~= '' then
      redis.call('HSET', key, 'err', ARGV[j + 1])
    end
    if ARGV[j + 2] == '1' then
      local a = (tonumber(h[3]) or 0) - 1
      if a < 0 then a = 0 end
      redis.call('HSET', key, 'attempts', string.format('%d', a))
    end
    redis.call('PEXPIRE', key, ttl)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// deadScript: ARGV[1] ttl (ms), ARGV[1+i] token for KEYS[i].
// in_progress or released with that token → dead. Reply: 1 applied / 0 not.
var deadScript = redis.NewScript(`
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local h = redis.call('HMGET', key, 'state', 'token')
  if (h[1] == 'in_progress' or h[1] == 'released') and h[2] == ARGV[1 + i] then
    redis.call('HSET', key, 'state', 'dead')
    redis.call('PEXPIRE', key, ttl)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// resetScript: no ARGV. done → untouched (2); no state → absent (3);
// anything else → every field but token deleted (1): the next Claim starts
// at attempt 1 with token+1, so a fencing token is never handed out twice.
// The key keeps its TTL.
var resetScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local state = redis.call('HGET', key, 'state')
  if state == 'done' then
    out[i] = 2
  elseif not state then
    out[i] = 3
  else
    redis.call('HDEL', key, 'state', 'lease', 'owner', 'attempts', 'err')
    out[i] = 1
  end
end
return out
`)
