-- lua/permit-recheck.lua: one process's batched heartbeat for its waiters on one name, and the
-- fallback for a lost wake-up: purges the dead, hands out free permits, reports each token's state.
-- KEYS  H Q W M P F (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] permits  ARGV[3] waiter heartbeat ttl ms  ARGV[4..] tokens
-- Returns {now, nextExpiry, then per token: {1, fence, expiresAt} granted | {0, position} queued
--          | {-1} unknown (evicted: the caller must queue again)}
local permits, waiter_ttl = limit(ARGV[2]), tonumber(ARGV[3])
local count = redis.call('ZCARD', H)
if count >= permits then count = count - purge_holders() end
purge_waiters()
admit(permits, count)
local beat = NOW + waiter_ttl
local out = { NOW, 0 }
local queued = false
for i = 4, #ARGV do
  local tok = ARGV[i]
  local held = redis.call('ZSCORE', H, tok)
  if held then
    out[#out + 1] = { 1, tonumber(redis.call('HGET', M, 'g:' .. tok) or '0'), tonumber(held) }
  else
    local rank = redis.call('ZRANK', Q, tok)
    if rank then
      redis.call('ZADD', W, beat, tok)
      out[#out + 1] = { 0, rank }
      queued = true
    else
      out[#out + 1] = { -1 }
    end
  end
end
if queued then
  -- Q, W and M exist (with their expiry) while anybody waits.
  redis.call('PEXPIREAT', Q, int(beat), 'GT')
  redis.call('PEXPIREAT', W, int(beat), 'GT')
  redis.call('PEXPIREAT', M, int(beat), 'GT')
end
out[2] = next_expiry()
if redis.call('EXISTS', Q) == 0 then settle(nil) end
return out
