-- lua/permit-recheck.lua: one process's batched heartbeat for its waiters on one name, and the
-- fallback for a lost wake-up: purges the dead, hands out free permits, reports each token's state.
-- KEYS  H Q W M P (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] permits  ARGV[3] waiter heartbeat ttl ms  ARGV[4..] tokens
-- Returns {now, nextExpiry, then per token: {1, fence, expiresAt} granted | {0, position} queued
--          | {-1} unknown (evicted: the caller must queue again)}
local permits, waiter_ttl = limit(ARGV[2]), tonumber(ARGV[3])
purge()
admit(permits)
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
  expire_at_least(Q, beat)
  expire_at_least(W, beat)
  expire_at_least(M, beat)
end
out[2] = next_expiry()
settle()
return out
