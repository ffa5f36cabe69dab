-- lua/permit-release.lua: give a permit back (or leave the queue) and hand freed permits on.
-- KEYS  H Q W M P (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] token  ARGV[3] permits
-- Returns 1 when the token's permit was freed, 2 when only a reentry count was dropped,
--         3 when the token was waiting and left the queue, 0 when the token had nothing (already
--         released or expired: never another owner's permit, G3).
local token, permits = ARGV[2], limit(ARGV[3])

purge()
local result = 0
if redis.call('ZSCORE', H, token) then
  local count = tonumber(redis.call('HGET', M, 'c:' .. token) or '1')
  if count > 1 then
    redis.call('HSET', M, 'c:' .. token, count - 1)
    return 2
  end
  redis.call('ZREM', H, token)
  redis.call('HDEL', M, 'g:' .. token, 'c:' .. token)
  result = 1
elseif redis.call('ZREM', Q, token) == 1 then
  redis.call('ZREM', W, token)
  redis.call('HDEL', M, 't:' .. token)
  result = 3
end
admit(permits)
settle()
return result
