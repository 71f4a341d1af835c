package ledger

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The ledger's Lua scripts. Each runs over every key of a batch (all of one
// group, so one Cluster slot) and is atomic. Every write refreshes the key's
// TTL; reads (Busy, Done, Dead answers) do not, so a done entry dedupes for
// TTL after its completion.
//
// Numbers written go through string.format('%d') because Lua would turn a
// large number into "%.14g" text (1e+14 style).
// Contracts in docs/ledger.md; the Memory twin in memory.go mirrors them.

// Reply status codes (claimScript), flags (completeScript, releaseScript,
// deadScript) and reset codes (resetScript). The *Malformed codes say that
// the entry was malformed (see entryLua).
const (
	codeGranted          = 1
	codeDone             = 2
	codeDead             = 3
	codeBusy             = 4
	codeGrantedMalformed = 5

	flagIgnored   = 0
	flagApplied   = 1
	flagMalformed = 2

	codeReset           = 1
	codeAlreadyDone     = 2
	codeAbsent          = 3
	codeAbsentMalformed = 4
)

// An entry is one string (a hash took three commands per message and
// operation where a string takes two: GET, then SET with PX; a first
// claim takes one, SET NX GET), six fields separated by "\n":
//
//	state \n token \n lease (unix ms) \n owner \n attempts \n last error
//
// The error comes last and may itself hold "\n"; owners may not (the Go
// side refuses them).
//
// Anything else under the prefix is malformed: a value in no such format,
// a state the ledger never writes, a number that is not 1–15 decimal
// digits (attempts: 1–9, so it fits an int32), an error longer than
// MaxErrorBytes, or a key of another Redis type. Each script treats a
// malformed entry as affecting only its own message (docs/ledger.md,
// "Malformed entries"): Claim overwrites it with a first attempt (status
// codeGrantedMalformed), the settlements leave it alone (flag
// flagMalformed), Reset answers absent (codeAbsentMalformed). No script
// fails on one: a script that failed halfway would keep the writes it had
// made to the keys before it, and each retry of the batch would count
// another attempt of those messages.
var entryLua = `
local MAXERR = ` + strconv.Itoa(MaxErrorBytes) + `
local PATTERN = '^([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$'
local STATES = {in_progress = true, released = true, done = true, dead = true, [''] = true}
local function num(s, digits)
  return #s > 0 and #s <= digits and not string.find(s, '%D')
end
-- parse returns the entry in v (a GET reply), or nil when v is malformed:
-- not a string (an error reply for a key of another type), or not in the
-- format above.
local function parse(v)
  if type(v) ~= 'string' then return nil end
  local st, tok, lease, own, att, err = string.match(v, PATTERN)
  if not st or not STATES[st] or not num(tok, 15) or not num(lease, 15) or not num(att, 9) or #err > MAXERR then
    return nil
  end
  -- The owner field is "owner@generation" when the lease was granted
  -- under an ownership generation, the owner alone otherwise (generation
  -- 0; every entry of the previous release).
  local name, gen = string.match(own, '^(.*)@(%d+)$')
  if not name or #gen > 15 then name, gen = own, '0' end
  return {state = st, token = tok, lease = lease, owner = own, name = name, gen = tonumber(gen), attempts = att, err = err}
end
-- wrongtype re-raises an error reply other than WRONGTYPE (a real failure:
-- OOM, NOPERM, ...) and tells whether v is a WRONGTYPE error reply.
local function wrongtype(v)
  if type(v) ~= 'table' then return false end
  if v.err and string.find(v.err, 'WRONGTYPE', 1, true) then return true end
  error(v)
end
-- load returns the entry at key, nil when there is none, false when it is
-- malformed.
local function load(key)
  local v = redis.pcall('GET', key)
  if not v then return nil end
  wrongtype(v)
  return parse(v) or false
end
local function pack(e)
  return e.state .. '\n' .. e.token .. '\n' .. e.lease .. '\n' .. e.owner .. '\n' .. e.attempts .. '\n' .. e.err
end
`

// claimScript: ARGV[1] owner, ARGV[2] now (unix ms), ARGV[3] ttl (ms),
// then per KEYS[i] two values at ARGV[2+2i], ARGV[3+2i]: lease deadline
// (unix ms), ownership generation (0: none).
// A live lease of another owner is taken over when it was granted under a
// lower generation than the claim's (its holder was fenced).
// Reply: 5 values per key: status (codeGranted..codeGrantedMalformed),
// token, attempts, busy_until (unix ms, 0 unless busy), last error.
var claimScript = redis.NewScript(entryLua + `
local owner = ARGV[1]
local now = tonumber(ARGV[2])
local ttl = ARGV[3]
-- claim answers status, token, attempts, busy_until, last error for the
-- entry e found at key (written by SET NX, which wrote nothing).
local function claim(key, e, lease, gen, field)
  local token = tonumber(e.token)
  local attempts = tonumber(e.attempts)
  if e.state == 'done' then
    return 2, token, attempts, 0, e.err
  elseif e.state == 'dead' then
    return 3, token, attempts, 0, e.err
  end
  local until_ms = tonumber(e.lease)
  if e.state == 'in_progress' and e.name ~= owner and until_ms > now and tonumber(gen) <= e.gen then
    return 4, token, attempts, until_ms, e.err
  end
  token, attempts = token + 1, attempts + 1
  e.state, e.token, e.lease, e.owner, e.attempts = 'in_progress', string.format('%d', token), lease, field, string.format('%d', attempts)
  redis.call('SET', key, pack(e), 'PX', ttl)
  return 1, token, attempts, 0, e.err
end
local out = {}
local n = 0
for i = 1, #KEYS do
  local key, lease, gen = KEYS[i], ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local field = owner
  if gen ~= '0' then field = owner .. '@' .. gen end
  -- A message seen for the first time (the common case) is one command:
  -- SET NX writes its first attempt, GET says there was no entry.
  local first = 'in_progress\n1\n' .. lease .. '\n' .. field .. '\n1\n'
  local old = redis.pcall('SET', key, first, 'NX', 'PX', ttl, 'GET')
  if not old then
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = 1, 1, 1, 0, ''
  else
    wrongtype(old)
    local e = parse(old)
    if e then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = claim(key, e, lease, gen, field)
    else
      -- Malformed: an unknown entry. SET replaces a key of any type.
      redis.call('SET', key, first, 'PX', ttl)
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = 5, 1, 1, 0, ''
    end
  end
  n = n + 5
end
return out
`)

// completeScript: ARGV[1] ttl (ms), then per KEYS[i] two values at
// ARGV[2i], ARGV[2i+1]: token, attempts the claim answered ("0": unknown).
// in_progress with that token → done. Reply per key: flagApplied,
// flagIgnored or flagMalformed.
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
  local old = redis.pcall('SET', key, 'done\n' .. tok .. '\n0\n\n' .. att .. '\n', 'XX', 'PX', ttl, 'GET')
  out[i] = 0
  if wrongtype(old) then
    out[i] = 2 -- SET ... GET wrote nothing to a key of another type
  elseif old then
    -- The common case without a full parse: held under tok (the head),
    -- a lease in range, the attempts the caller passed (digits: the Go
    -- side formats them) and no last error; the owner may be any text
    -- without a newline, which the field split ensures.
    local head = 'in_progress\n' .. tok .. '\n'
    if string.sub(old, 1, #head) == head then
      local a = string.find(old, '\n', #head + 1, true)
      local b = a and string.find(old, '\n', a + 1, true)
      local c = b and string.find(old, '\n', b + 1, true)
      if c == #old and string.sub(old, b + 1, c - 1) == att and num(string.sub(old, #head + 1, a - 1), 15) then
        out[i] = 1
      end
    end
  end
  if out[i] == 0 and old and not wrongtype(old) then
    local e = parse(old)
    if e and e.state == 'in_progress' and e.token == tok then
      out[i] = 1
      if e.attempts ~= att or e.err ~= '' then
        redis.call('SET', key, 'done\n' .. tok .. '\n0\n\n' .. e.attempts .. '\n' .. e.err, 'KEEPTTL')
      end
    else
      redis.call('SET', key, old, 'KEEPTTL')
      if not e then out[i] = 2 end
    end
  end
end
return out
`)

// releaseScript: ARGV[1] ttl (ms), then per KEYS[i] three values at
// ARGV[3i-1..3i+1]: token, error text (empty: keep the previous one),
// uncount ("1": attempts -= 1, not below 0).
// in_progress with that token → released. Reply: a flag per key.
var releaseScript = redis.NewScript(entryLua + `
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local j = 3 * i - 1
  local e = load(key)
  if e == false then
    out[i] = 2
  elseif e and e.state == 'in_progress' and e.token == ARGV[j] then
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
// in_progress or released with that token → dead. Reply: a flag per key.
var deadScript = redis.NewScript(entryLua + `
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local e = load(key)
  if e == false then
    out[i] = 2
  elseif e and (e.state == 'in_progress' or e.state == 'released') and e.token == ARGV[1 + i] then
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
// twice. The key keeps its TTL. Malformed → untouched (4).
var resetScript = redis.NewScript(entryLua + `
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local e = load(key)
  if e == false then
    out[i] = 4
  elseif e and e.state == 'done' then
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
