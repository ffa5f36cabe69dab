-- lua/permit-release.lua: give a permit back (or leave the queue) and hand freed permits on.
-- KEYS  H Q W M P F (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] token  ARGV[3] permits  ARGV[4] 1 = reentrant token (may hold re-entries)
-- Returns {code, grants}: code 1 when the token's permit was freed, 2 when only a reentry count was
--         dropped, 3 when the token was waiting and left the queue, 0 when the token had nothing
--         (already released or expired: never another owner's permit, G3); grants = the message
--         published for the permits handed on ('' for none), so the releasing process can wake its own
--         waiters without waiting for the pub/sub round trip.
local token = ARGV[2]

local result = 0
local held = redis.call('ZSCORE', H, token)
if held and tonumber(held) > NOW then
  if ARGV[4] == '1' then
    local count = tonumber(redis.call('HGET', M, 'c:' .. token) or '1')
    if count > 1 then
      redis.call('HSET', M, 'c:' .. token, count - 1)
      return { 2, '' }
    end
  end
  redis.call('ZREM', H, token)
  result = 1
elseif redis.call('ZSCORE', Q, token) then
  local extra = tonumber(redis.call('HGET', M, 'k:' .. token) or '0')
  if extra > 0 then
    -- One of several same-owner acquires gives up; the token keeps its place for the others.
    redis.call('HSET', M, 'k:' .. token, extra - 1)
    return { 3, '' }
  end
  redis.call('ZREM', Q, token)
  redis.call('ZREM', W, token)
  redis.call('HDEL', M, 't:' .. token)
  result = 3
end
local freed = result == 1 and token or nil
local has_q, has_m, has_h = presence()
if has_q then
  if freed then redis.call('HDEL', M, 'g:' .. token, 'c:' .. token) end
  purge_waiters()
  local permits = limit(ARGV[3])
  local count = redis.call('ZCARD', H)
  if count >= permits then count = count - purge_holders() end
  local message = admit(permits, count)
  -- While waiters remain, their heartbeats keep every key alive: settling only matters once none do.
  if redis.call('EXISTS', Q) == 1 then return { result, message } end
  settle(nil)
  return { result, message }
end
settle(freed, has_m, has_h)
return { result, '' }
