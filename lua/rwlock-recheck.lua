-- lua/rwlock-recheck.lua: one process's batched heartbeat for its waiters (of either mode) on one
-- lock, and the fallback for a lost wake-up: purges the dead, admits who may enter, reports each
-- token's state. A waiting token holds nothing else on this lock (re-entry and downgrade are granted
-- at once, upgrades refused), so a hold found for it is the grant it waited for.
-- KEYS  R X Q W M (see lib/rwlock.lua)
-- ARGV[1] channel  ARGV[2] waiter heartbeat ttl ms  ARGV[3..] tokens
-- Returns {now, nextExpiry, then per token: {1, fence, expiresAt} granted | {0, position} queued
--          | {-1} unknown (evicted: the caller must queue again)}
local waiter_ttl = tonumber(ARGV[2])
purge()
admit()
local beat = NOW + waiter_ttl
local out = { NOW, 0 }
local queued = false
for i = 3, #ARGV do
  local tok = ARGV[i]
  local w = live_score(X, tok)
  local r = not w and live_score(R, tok)
  if w then
    out[#out + 1] = { 1, tonumber(redis.call('HGET', M, 'gw:' .. tok) or '0'), w }
  elseif r then
    out[#out + 1] = { 1, tonumber(redis.call('HGET', M, 'gr:' .. tok) or '0'), r }
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
