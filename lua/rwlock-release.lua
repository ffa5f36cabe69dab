-- lua/rwlock-release.lua: give a read or write hold back (or leave the queue) and admit who may enter.
-- KEYS  R X Q W M (see lib/rwlock.lua)
-- ARGV[1] channel  ARGV[2] token  ARGV[3] mode 'r' | 'w'
-- Returns 1 when the token's hold of that mode was freed, 2 when only a reentry count was dropped,
--         3 when the token was waiting and left the queue, 0 when the token had nothing (already
--         released or expired: never another owner's hold, and never the token's hold of the other
--         mode, G3).
local token, mode = ARGV[2], ARGV[3]
local key = HOLDS[mode]

purge()
local result = 0
if redis.call('ZSCORE', key, token) then
  local count = tonumber(redis.call('HGET', M, 'c' .. mode .. ':' .. token) or '1')
  if count > 1 then
    redis.call('HSET', M, 'c' .. mode .. ':' .. token, count - 1)
    return 2
  end
  redis.call('ZREM', key, token)
  redis.call('HDEL', M, 'g' .. mode .. ':' .. token, 'c' .. mode .. ':' .. token)
  result = 1
elseif redis.call('ZREM', Q, token) == 1 then
  redis.call('ZREM', W, token)
  redis.call('HDEL', M, 'q:' .. token)
  result = 3
end
admit()
settle()
return result
