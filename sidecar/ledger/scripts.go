package ledger

import "github.com/redis/go-redis/v9"

// The ledger's Lua scripts. Each runs over every key of a batch (all of one
// group, so one Cluster slot) and is atomic. Every write refreshes the key's
// TTL; reads (Busy, Done, Dead answers) do not, so a done entry dedupes for
// TTL after its completion.
//
// Numbers written go through string.format('%d') because Lua would turn a
// large number into "%.14g" text (1e+14 style).
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

// An entry is one string (a hash took three commands per message and
// operation where a string takes two: GET, then SET with PX; a first
// claim takes one, SET NX GET), six fields separated by "\n":
//
//	state \n token \n lease (unix ms) \n owner \n attempts \n last error
//
// The error comes last and may itself hold "\n"; owners may not (the Go
// side refuses them). A value that does not parse is answered with a
// WRONGTYPE error, as Redis answers a key of another type.
const entryLua = `
local PATTERN = '^([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$'
local function parse(key, v)
  local st, tok, lease, own, att, err = string.match(v, PATTERN)
  if not st then
    error(redis.error_reply('WRONGTYPE spool ledger entry ' .. key .. ' is not in the ledger format'))
  end
  return {state = st, token = tok, lease = lease, owner = own, attempts = att, err = err}
end
local function load(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  return parse(key, v)
end
local function pack(e)
  return e.state .. '\n' .. e.token .. '\n' .. e.lease .. '\n' .. e.owner .. '\n' .. e.attempts .. '\n' .. e.err
end
`

// claimScript: ARGV[1] owner, ARGV[2] now (unix ms), ARGV[3] ttl (ms),
// ARGV[3+i] lease deadline for KEYS[i] (unix ms).
// Reply: 5 values per key: status, token, attempts, busy_until (unix ms,
// 0 unless busy), last error.
var claimScript = redis.NewScript(entryLua + `
local owner = ARGV[1]
local now = tonumber(ARGV[2])
local ttl = ARGV[3]
-- claim answers status, token, attempts, busy_until, last error for the
-- entry e found at key (written by SET NX, which wrote nothing).
local function claim(key, e, lease)
  local token = tonumber(e.token) or 0
  local attempts = tonumber(e.attempts) or 0
  if e.state == 'done' then
    return 2, token, attempts, 0, e.err
  elseif e.state == 'dead' then
    return 3, token, attempts, 0, e.err
  end
  local until_ms = tonumber(e.lease) or 0
  if e.state == 'in_progress' and e.owner ~= owner and until_ms > now then
    return 4, token, attempts, until_ms, e.err
  end
  token, attempts = token + 1, attempts + 1
  e.state, e.token, e.lease, e.owner, e.attempts = 'in_progress', string.format('%d', token), lease, owner, string.format('%d', attempts)
  redis.call('SET', key, pack(e), 'PX', ttl)
  return 1, token, attempts, 0, e.err
end
local out = {}
local n = 0
for i = 1, #KEYS do
  local key, lease = KEYS[i], ARGV[3 + i]
  -- A message seen for the first time (the common case) is one command:
  -- SET NX writes its first attempt, GET says there was no entry.
  local old = redis.call('SET', key, 'in_progress\n1\n' .. lease .. '\n' .. owner .. '\n1\n', 'NX', 'PX', ttl, 'GET')
  if old then
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = claim(key, parse(key, old), lease)
  else
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = 1, 1, 1, 0, ''
  end
  n = n + 5
end
return out
`)

// completeScript: ARGV[1] ttl (ms), then per KEYS[i] two values at
// ARGV[2i], ARGV[2i+1]: token, attempts the claim answered ("0": unknown).
// in_progress with that token → done. Reply: 1 applied / 0 not, per key.
//
// The common case is one command: SET XX GET writes the done entry the
// caller expects (its token and attempts, no last error), and the old
// value it answers confirms it (in_progress, that token, those attempts,
// no error). Otherwise the entry is put right with a second SET: the done
// entry made from the old one, or the old one itself when it was not held
// under that token (its TTL then restarts from now).
var completeScript = redis.NewScript(entryLua + `
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local key, tok, att = KEYS[i], ARGV[2 * i], ARGV[2 * i + 1]
  local old = redis.call('SET', key, 'done\n' .. tok .. '\n0\n\n' .. att .. '\n', 'XX', 'PX', ttl, 'GET')
  out[i] = 0
  if old then
    local head = 'in_progress\n' .. tok .. '\n'
    if string.sub(old, 1, #head) == head then
      out[i] = 1
      -- lease \n owner \n attempts \n err follow the head
      local a = string.find(old, '\n', #head + 1, true)
      local b = a and string.find(old, '\n', a + 1, true)
      local c = b and string.find(old, '\n', b + 1, true)
      if not c then -- not in the ledger's format: put it back, then fail
        redis.call('SET', key, old, 'KEEPTTL')
        parse(key, old)
      end
      local attempts, err = string.sub(old, b + 1, c - 1), string.sub(old, c + 1)
      if attempts ~= att or err ~= '' then
        redis.call('SET', key, 'done\n' .. tok .. '\n0\n\n' .. attempts .. '\n' .. err, 'KEEPTTL')
      end
    else
      redis.call('SET', key, old, 'KEEPTTL')
      parse(key, old) -- a value not in the ledger's format is an error
    end
  end
end
return out
`)

// releaseScript: ARGV[1] ttl (ms), then per KEYS[i] three values at
// ARGV[3i-1..3i+1]: token, error text (empty: keep the previous one),
// uncount ("1": attempts -= 1, not below 0).
// in_progress with that token → released. Reply: 1 applied / 0 not.
var releaseScript = redis.NewScript(entryLua + `
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local j = 3 * i - 1
  local e = load(key)
  if e and e.state == 'in_progress' and e.token == ARGV[j] then
    e.state = 'released'
    if ARGV[j + 1] ~= '' then
      e.err = ARGV[j + 1]
    end
    if ARGV[j + 2] == '1' then
      local a = (tonumber(e.attempts) or 0) - 1
      if a < 0 then a = 0 end
      e.attempts = string.format('%d', a)
    end
    redis.call('SET', key, pack(e), 'PX', ttl)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// deadScript: ARGV[1] ttl (ms), ARGV[1+i] token for KEYS[i].
// in_progress or released with that token → dead. Reply: 1 applied / 0 not.
var deadScript = redis.NewScript(entryLua + `
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local e = load(key)
  if e and (e.state == 'in_progress' or e.state == 'released') and e.token == ARGV[1 + i] then
    e.state = 'dead'
    redis.call('SET', key, pack(e), 'PX', ttl)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// resetScript: no ARGV. done → untouched (2); no state → absent (3);
// anything else → every field but the token cleared (1): the next Claim
// starts at attempt 1 with token+1, so a fencing token is never handed out
// twice. The key keeps its TTL.
var resetScript = redis.NewScript(entryLua + `
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local e = load(key)
  if e and e.state == 'done' then
    out[i] = 2
  elseif not e or e.state == '' then
    out[i] = 3
  else
    redis.call('SET', key, '\n' .. e.token .. '\n0\n\n0\n', 'KEEPTTL')
    out[i] = 1
  end
end
return out
`)
