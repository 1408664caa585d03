package redis

import "github.com/redis/go-redis/v9"

// Every script gets KEYS[1] = <prefix>revision (so a cluster client routes it
// to the slot of the prefix's hash tag) and ARGV[1] = <prefix>; the other keys
// are built from the prefix inside the script:
//
//	<p>revision            global revision counter (INCR), no TTL
//	<p>floor               fence floor, decimal uint64, no TTL
//	<p>fence:<resource>    per-resource fence counter (INCR), no TTL
//	<p>cur:<resource>      ID of the resource's last acquired lease, no TTL
//	<p>live:<resource>     ID of the live lease, PEXPIRE = lease TTL (mirror)
//	<p>lease:<id>          lease record (hash), PEXPIRE = TTL + retention,
//	                       set when acquire or renew sets its expiry
//	<p>req:<n>:<owner>:<r> lease ID of (owner, request ID), same PEXPIRE
//	<p>expiry              sorted set of lease IDs by expiry (ms), no TTL
//	<p>incarnation         the incarnation marker, no TTL ("" or absent: none)
//	<p>since               revision at which the marker was written, no TTL
//	<p>maxfence            highest fence handed out on any resource, no TTL
//
// Numbers that may exceed 2^53 (fences, floor, revision) never pass through
// Lua arithmetic: they are compared as decimal strings and moved by INCR on
// the server. Times are zero-padded 20-digit Unix nanoseconds, so string
// order is time order. A script's reply is {status, field, value, ...}.

// luaCommon holds the helpers every script starts with.
const luaCommon = `
local P = ARGV[1]
local CAP = '9223372036854775807'
-- gt compares two canonical non-negative decimals.
local function gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
-- bump moves a counter by INCR and returns its exact decimal text, or nil at the cap.
local function bump(key)
  local v = redis.call('GET', key)
  if v == CAP then return nil end
  redis.call('INCR', key)
  return redis.call('GET', key)
end
local function reqkey(owner, rid)
  return P .. 'req:' .. #owner .. ':' .. owner .. ':' .. rid
end
-- guard is a mutation's guard (fencegate.Guard): nil when it holds (or
-- expects no marker), else the reply that refuses the mutation.
local function guard(inc, minrev)
  if inc == '' then return nil end
  local cur = redis.call('GET', P .. 'incarnation') or ''
  if cur ~= inc then return {'STATE_LOST', cur} end
  local rev = redis.call('GET', KEYS[1]) or '0'
  if gt(minrev, rev) then return {'ROLLED_BACK', rev} end
  return nil
end
-- reply answers the lease record lk with status (default 'OK').
local function reply(lk, status)
  local r = redis.call('HGETALL', lk)
  table.insert(r, 1, status or 'OK')
  return r
end
-- prune deletes up to n lease records past retention (leaserule.Forgotten:
-- expiring at or before cutoff, cutoffms in the index's ms), earliest expiry
-- first, with their request keys (if they still name them) and index
-- entries, drops index entries of records already gone, and returns how
-- many records it deleted. It moves no revision.
local function prune(cutoff, cutoffms, n)
  local XK = P .. 'expiry'
  local gone = 0
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', XK, '-inf', cutoffms, 'LIMIT', 0, n)) do
    local ok = P .. 'lease:' .. old
    local f = redis.call('HMGET', ok, 'exp', 'owner', 'req')
    if not f[1] then
      redis.call('ZREM', XK, old)
    elseif not (cutoff < f[1]) then
      redis.call('DEL', ok)
      redis.call('ZREM', XK, old)
      local ork = reqkey(f[2], f[3])
      if redis.call('GET', ork) == old then redis.call('DEL', ork) end
      gone = gone + 1
    end
  end
  return gone
end
-- keep refreshes the retention of a lease record and its request key.
local function keep(lk, ms)
  if ms == '0' then return end
  local f = redis.call('HMGET', lk, 'owner', 'req')
  redis.call('PEXPIRE', lk, ms)
  redis.call('PEXPIRE', reqkey(f[1], f[2]), ms)
end
`

// acquireScript: ARGV 2 lease ID, 3 resource, 4 owner, 5 request ID,
// 6 operation ID, 7 root, 8 category, 9 TTL ns, 10 now, 11 expires,
// 12 TTL ms (live key), 13 record retention ms (0: none), 14 retention
// cutoff (records expiring at or before it are forgotten; "" for none),
// 15 the cutoff in ms, 16 expiry in ms, 17 most records to prune
// (leaserule.PruneBatch), 18 expected incarnation ("" checks nothing),
// 19 minimum revision.
var acquireScript = redis.NewScript(luaCommon + `
local id, res, owner, rid, now, cutoff = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[10], ARGV[14]
local refused = guard(ARGV[18], ARGV[19])
if refused then return refused end
local XK = P .. 'expiry'
local rk = reqkey(owner, rid)
local prev = redis.call('GET', rk)
if prev then
  local lk = P .. 'lease:' .. prev
  local pf = redis.call('HMGET', lk, 'resource', 'exp')
  if not pf[1] then return {'LOST'} end
  if cutoff ~= '' and not (cutoff < pf[2]) then
    -- past retention (leaserule.Forgotten): a new acquisition
    redis.call('DEL', lk)
    redis.call('ZREM', XK, prev)
  else
    if pf[1] ~= res then return {'OTHER_RESOURCE'} end
    return reply(lk)
  end
end
local ck = P .. 'cur:' .. res
local cur = redis.call('GET', ck)
local superseded = nil
if cur then
  local st = redis.call('HMGET', P .. 'lease:' .. cur, 'state', 'exp')
  if st[1] == 'HELD' then
    if now < st[2] then return {'HELD'} end
    superseded = P .. 'lease:' .. cur
  end
end
local lk = P .. 'lease:' .. id
if redis.call('EXISTS', lk) == 1 then return {'ID_EXISTS'} end
local fk = P .. 'fence:' .. res
local last = redis.call('GET', fk) or '0'
local floor = redis.call('GET', P .. 'floor') or '0'
if gt(floor, last) then last = floor end
if not gt(CAP, last) then return {'EXHAUSTED'} end
local rev = bump(KEYS[1])
if not rev then return {'EXHAUSTED'} end
if superseded then redis.call('HSET', superseded, 'state', 'EXPIRED') end
redis.call('SET', fk, last)
redis.call('INCR', fk)
local fence = redis.call('GET', fk)
if gt(fence, redis.call('GET', P .. 'maxfence') or '0') then redis.call('SET', P .. 'maxfence', fence) end
redis.call('HSET', lk, 'id', id, 'resource', res, 'owner', owner, 'req', rid, 'fence', fence,
  'rev', rev, 'op', ARGV[6], 'root', ARGV[7], 'cat', ARGV[8], 'state', 'HELD', 'ttl', ARGV[9],
  'acq', now, 'exp', ARGV[11])
redis.call('SET', rk, id)
keep(lk, ARGV[13])
redis.call('ZADD', XK, ARGV[16], id)
if cutoff ~= '' then prune(cutoff, ARGV[15], tonumber(ARGV[17])) end
redis.call('SET', ck, id)
redis.call('SET', P .. 'live:' .. res, id, 'PX', ARGV[12])
return reply(lk)
`)

// renewScript: ARGV 2 lease ID, 3 owner, 4 now, 5 new expiry, 6 TTL ms,
// 7 retention ms, 8 new expiry in ms, 9 expected incarnation ("" checks
// nothing), 10 minimum revision.
var renewScript = redis.NewScript(luaCommon + `
local refused = guard(ARGV[9], ARGV[10])
if refused then return refused end
local lk = P .. 'lease:' .. ARGV[2]
local f = redis.call('HMGET', lk, 'owner', 'state', 'exp', 'resource')
if not f[1] then return {'NOT_FOUND'} end
if f[1] ~= ARGV[3] then return {'OWNER'} end
if f[2] ~= 'HELD' or not (ARGV[4] < f[3]) then return {'NOT_HELD'} end
if not bump(KEYS[1]) then return {'EXHAUSTED'} end
redis.call('HSET', lk, 'exp', ARGV[5])
keep(lk, ARGV[7])
redis.call('ZADD', P .. 'expiry', ARGV[8], ARGV[2])
redis.call('SET', P .. 'live:' .. f[4], ARGV[2], 'PX', ARGV[6])
return reply(lk)
`)

// releaseScript: ARGV 2 lease ID, 3 owner, 4 now, 5 expected incarnation
// ("" checks nothing), 6 minimum revision. A lease no longer held is
// returned unchanged, with status KEPT (OK: this call released it). Release
// leaves the expiry, and so the PEXPIRE of expiry + retention that acquire or
// renew set on the record and its request key, as they are: refreshing it
// here would move it to release time + retention, before expiry + retention.
var releaseScript = redis.NewScript(luaCommon + `
local refused = guard(ARGV[5], ARGV[6])
if refused then return refused end
local id = ARGV[2]
local lk = P .. 'lease:' .. id
local f = redis.call('HMGET', lk, 'owner', 'state', 'exp', 'resource')
if not f[1] then return {'NOT_FOUND'} end
if f[1] ~= ARGV[3] then return {'OWNER'} end
if f[2] ~= 'HELD' or not (ARGV[4] < f[3]) then return reply(lk, 'KEPT') end
if not bump(KEYS[1]) then return {'EXHAUSTED'} end
redis.call('HSET', lk, 'state', 'RELEASED')
for _, k in ipairs({P .. 'cur:' .. f[4], P .. 'live:' .. f[4]}) do
  if redis.call('GET', k) == id then redis.call('DEL', k) end
end
return reply(lk)
`)

// floorScript: ARGV 2 floor, 3 expected incarnation ("" checks nothing), 4
// minimum revision. The floor only rises; a lower one moves nothing.
var floorScript = redis.NewScript(luaCommon + `
local refused = guard(ARGV[3], ARGV[4])
if refused then return refused end
local fk = P .. 'floor'
if not gt(ARGV[2], redis.call('GET', fk) or '0') then return {'OK'} end
if not bump(KEYS[1]) then return {'EXHAUSTED'} end
redis.call('SET', fk, ARGV[2])
return {'OK'}
`)

// pruneScript: ARGV 2 retention cutoff, 3 the cutoff in ms, 4 most records
// to prune (leaserule.PruneBatch; 0 when nothing is forgotten), 5 expected
// incarnation ("" checks nothing), 6 minimum revision. It answers {'OK',
// records deleted} and moves no revision.
var pruneScript = redis.NewScript(luaCommon + `
local refused = guard(ARGV[5], ARGV[6])
if refused then return refused end
if ARGV[4] == '0' then return {'OK', '0'} end
return {'OK', tostring(prune(ARGV[2], ARGV[3], tonumber(ARGV[4])))}
`)

// incarnationScript reads the marker, its revision, the revision and the
// highest fence (the floor when higher) at one instant.
var incarnationScript = redis.NewScript(luaCommon + `
local top = redis.call('GET', P .. 'maxfence') or '0'
local floor = redis.call('GET', P .. 'floor') or '0'
if gt(floor, top) then top = floor end
return {'OK', redis.call('GET', P .. 'incarnation') or '', redis.call('GET', P .. 'since') or '0',
  redis.call('GET', KEYS[1]) or '0', top}
`)

// claimScript: ARGV 2 expected previous marker, 3 new marker, 4 floor. The
// floor only rises.
var claimScript = redis.NewScript(luaCommon + `
local cur = redis.call('GET', P .. 'incarnation') or ''
if cur ~= ARGV[2] then return {'CLAIMED', cur} end
local rev = bump(KEYS[1])
if not rev then return {'EXHAUSTED'} end
if gt(ARGV[4], redis.call('GET', P .. 'floor') or '0') then redis.call('SET', P .. 'floor', ARGV[4]) end
redis.call('SET', P .. 'incarnation', ARGV[3])
redis.call('SET', P .. 'since', rev)
return {'OK'}
`)
