-- lua/permit-acquire.lua: take a permit now, or join the FIFO queue.
-- KEYS  H Q W M P F (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] token  ARGV[3] lease ttl ms  ARGV[4] permits
-- ARGV[5] mode: 0 = try (never queue), 1 = queue when no permit is free
-- ARGV[6] waiter heartbeat ttl ms  ARGV[7] 1 = reentrant token (re-entry counts, fence remembered)
-- Returns {1, fence, expiresAt, holders, now} when the caller holds a permit (re-entry adds one to its
--         count; holders = holders of the name right after, for RateLimit headers and metrics),
--         {0, position, nextExpiry, lastFence, now} when queued (position is 0-based; lastFence: every
--         grant to this waiter will carry a larger fence, so older grant messages are told apart),
--         {0, -1, nextExpiry, now} when not queued (try mode).
local token, ttl = ARGV[2], tonumber(ARGV[3])
local mode, waiter_ttl, reentrant = ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1'

if reentrant then
  local held = redis.call('ZSCORE', H, token)
  if held and tonumber(held) > NOW then
    -- Re-entry by the same owner: one more count, lease pushed out to now + ttl.
    local count = tonumber(redis.call('HGET', M, 'c:' .. token) or '1')
    redis.call('HSET', M, 'c:' .. token, count + 1)
    local exp = math.max(tonumber(held), NOW + ttl)
    redis.call('ZADD', H, exp, token)
    redis.call('PEXPIREAT', H, int(exp), 'GT')
    expire_at_least(M, exp)
    return { 1, tonumber(redis.call('HGET', M, 'g:' .. token) or '0'), exp, redis.call('ZCARD', H), NOW }
  end
end

-- Take a permit now. `count` = ZCARD H before, so H is new exactly when it is 0.
local function take(count)
  local exp = NOW + ttl
  local fence = take_fence(exp)
  redis.call('ZADD', H, exp, token)
  if count == 0 then
    redis.call('PEXPIREAT', H, int(exp))
  else
    redis.call('PEXPIREAT', H, int(exp), 'GT')
  end
  if reentrant then
    redis.call('HSET', M, 'g:' .. token, int(fence))
    redis.call('HDEL', M, 'c:' .. token) -- a count left by an expired lease of this owner
    expire_at_least(M, exp)
  end
  return { 1, fence, exp, count + 1, NOW }
end

-- Fast path: nobody waits and nobody holds, so any limit (always >= 1) has room: no need to read P.
local state = redis.call('EXISTS', Q, Q, H)
if state == 0 then return take(0) end
local queued = state >= 2
local count = state % 2 == 1 and redis.call('ZCARD', H) or 0

local permits = limit(ARGV[4])
if count >= permits then count = count - purge_holders() end
if queued then
  -- Drop the dead, hand free permits to the head of the queue (this token may be among them).
  purge_waiters()
  local _, granted, n = admit(permits, count)
  count = count + n
  local mine = granted[token]
  if mine then return { 1, mine[1], mine[2], count, NOW } end
  queued = redis.call('EXISTS', Q) == 1
end
if not queued and count < permits then return take(count) end

if mode ~= '1' then return { 0, -1, next_expiry(), NOW } end
local rank = false
if reentrant and queued then rank = redis.call('ZRANK', Q, token) end
if rank then
  -- The same owner asks again while its token waits (a reentrant owner's concurrent acquires): the
  -- grant will count for both, so each caller's release has a count to give back.
  redis.call('HINCRBY', M, 'k:' .. token, 1)
else
  local ticket = redis.call('HINCRBY', M, 'n', 1)
  redis.call('ZADD', Q, ticket, token)
  rank = redis.call('ZCARD', Q) - 1
end
local beat = NOW + waiter_ttl
redis.call('ZADD', W, beat, token)
-- A permit handed to this waiter later starts with at most its heartbeat ttl: a live waiter renews it
-- to the full ttl; a waiter that died in the queue gives it back within waiter_ttl, not ttl.
local handed = math.min(ttl, waiter_ttl)
redis.call('HSET', M, 't:' .. token, reentrant and -handed or handed)
if queued then
  redis.call('PEXPIREAT', Q, int(beat), 'GT')
  redis.call('PEXPIREAT', W, int(beat), 'GT')
  redis.call('PEXPIREAT', M, int(beat), 'GT')
else
  redis.call('PEXPIREAT', Q, int(beat))
  redis.call('PEXPIREAT', W, int(beat))
  expire_at_least(M, beat)
end
return { 0, rank, next_expiry(), last_fence(), NOW }
