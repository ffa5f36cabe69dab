-- lua/lib/common.lua: first prelude of every script (lib/permits.lua or lib/rwlock.lua follows it).
-- The server clock (G9) and the key helpers both families of scripts share.
--
-- The preludes run once, when their library is loaded (FUNCTION LOAD, src/core/redis/scripts.ts):
-- helpers are made once, not at every call (a prelude's closures cost ~2.4 us a call when each
-- script was an EVAL of its own). So nothing here reads KEYS, ARGV or the clock at load time: every
-- script starts with its family's begin(KEYS, ARGV), which sets the call's keys, channel and clock
-- and resets the per-call state the helpers share (upvalues of the library: scripts run one at a
-- time, so one call's state is never seen by another).

-- The server clock of this call (G9), in ms and µs, and TIME's reply (seconds, microseconds).
local NOW, NOW_US, CLOCK

local function read_clock()
  CLOCK = redis.call('TIME')
  NOW = tonumber(CLOCK[1]) * 1000 + math.floor(tonumber(CLOCK[2]) / 1000)
  NOW_US = tonumber(CLOCK[1]) * 1000000 + tonumber(CLOCK[2])
end

-- NOW_US as a string, made from TIME's reply: Lua writes a 16-digit number with 14 significant
-- digits when it joins it to a string (string.format('%.0f') costs ~0.4 us a call).
local function now_us_string()
  local us = CLOCK[2]
  return CLOCK[1] .. string.rep('0', 6 - #us) .. us
end

local function int(n)
  return string.format('%.0f', n)
end

-- Strictly increasing per name (G7): one more than the last token kept in field `f` of `meta` while
-- the name has keys, and never below the server's microsecond clock, so a name whose keys were
-- deleted while idle still moves on.
local function bump_fence(meta)
  local last = tonumber(redis.call('HGET', meta, 'f') or '0')
  local fence = math.max(last + 1, NOW_US)
  redis.call('HSET', meta, 'f', fence)
  return fence
end

-- Push a key's expiry out to `at` (never pulls it in).
local function expire_at_least(key, at)
  if redis.call('PEXPIREAT', key, at, 'GT') == 0 then
    redis.call('PEXPIREAT', key, at, 'NX')
  end
end

-- Acquisition lists (G12): the acquisitions of one reentrant owner waiting together on its token, as
-- operation ids separated by spaces (a hold keeps its acquisitions in A instead: see the family
-- preludes). Every acquire call of a reentrant owner has its own id, so an id is added and dropped at
-- most once: a resent call finds its id already there (or already gone) and changes nothing, where a
-- count would count it twice.
local function has_op(list, op)
  if not list then return false end
  return string.find(' ' .. list .. ' ', ' ' .. op .. ' ', 1, true) ~= nil
end

-- The list without `op` ('' when nothing is left).
local function drop_op(list, op)
  local kept = {}
  for id in string.gmatch(list, '%S+') do
    if id ~= op then kept[#kept + 1] = id end
  end
  return table.concat(kept, ' ')
end
