-- lua/permit-acquire.lua: take a permit now, or join the FIFO queue.
-- KEYS  H Q W M P (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] token  ARGV[3] lease ttl ms  ARGV[4] permits
-- ARGV[5] mode: 0 = try (never queue), 1 = queue when no permit is free
-- ARGV[6] waiter heartbeat ttl ms  ARGV[7] 1 = remember the fencing token for re-entry
-- Returns {1, fence, expiresAt, holders, now} when the caller holds a permit (re-entry adds one to its
--         count; holders = live holders of the name right after, for RateLimit headers and metrics),
--         {0, position, nextExpiry, lastFence, now} when queued (position is 0-based; lastFence: every
--         grant to this waiter will carry a larger fence, so older grant messages are told apart),
--         {0, -1, nextExpiry, now} when not queued (try mode).
local token, ttl, permits = ARGV[2], tonumber(ARGV[3]), limit(ARGV[4])
local mode, waiter_ttl, keep_fence = ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1'

if keep_fence then
  local held = redis.call('ZSCORE', H, token)
  if held and tonumber(held) > NOW then
    -- Re-entry by the same owner: one more count, lease pushed out to now + ttl.
    local count = tonumber(redis.call('HGET', M, 'c:' .. token) or '1')
    redis.call('HSET', M, 'c:' .. token, count + 1)
    local exp = math.max(tonumber(held), NOW + ttl)
    redis.call('ZADD', H, exp, token)
    expire_at_least(H, exp)
    expire_at_least(M, exp)
    return { 1, tonumber(redis.call('HGET', M, 'g:' .. token) or '0'), exp, redis.call('ZCARD', H), NOW }
  end
end

local queued = redis.call('EXISTS', Q) == 1
local count = redis.call('ZCARD', H)
if queued or count >= permits then
  -- Slow path only when it can matter: drop the dead, hand free permits to the head of the queue.
  -- (With nobody queued and room left, expired holders cannot change the answer: they only make
  -- `count` larger than the live count.)
  purge()
  local mine = admit(permits)[token]
  if mine then
    return { 1, mine[1], mine[2], redis.call('ZCARD', H), NOW }
  end
  queued = redis.call('EXISTS', Q) == 1
  count = redis.call('ZCARD', H)
end

local rank = false
if queued then rank = redis.call('ZRANK', Q, token) end
if not queued and count < permits then
  local exp = NOW + ttl
  local fence = next_fence()
  redis.call('ZADD', H, exp, token)
  if keep_fence then
    redis.call('HSET', M, 'g:' .. token, int(fence))
    redis.call('HDEL', M, 'c:' .. token) -- a count left by an expired lease of this owner
  end
  if count == 0 then
    redis.call('PEXPIREAT', H, int(exp))
  else
    expire_at_least(H, exp)
  end
  expire_at_least(M, exp)
  return { 1, fence, exp, count + 1, NOW }
end

if rank == false then
  if mode ~= '1' then
    return { 0, -1, next_expiry(), NOW }
  end
  local ticket = redis.call('HINCRBY', M, 'n', 1)
  redis.call('ZADD', Q, ticket, token)
  rank = redis.call('ZCARD', Q) - 1
else
  -- The same owner asks again while its token waits (a reentrant owner's concurrent acquires): the
  -- grant will count for both, so each caller's release has a count to give back.
  redis.call('HINCRBY', M, 'k:' .. token, 1)
end
local beat = NOW + waiter_ttl
redis.call('ZADD', W, beat, token)
-- A permit handed to this waiter later starts with at most its heartbeat ttl: a live waiter renews it
-- to the full ttl; a waiter that died in the queue gives it back within waiter_ttl, not ttl.
redis.call('HSET', M, 't:' .. token, math.min(ttl, waiter_ttl))
expire_at_least(Q, beat)
expire_at_least(W, beat)
expire_at_least(M, beat)
return { 0, rank, next_expiry(), tonumber(redis.call('HGET', M, 'f') or '0'), NOW }
