-- lua/permit-acquire.lua: for each token, in order, take a permit now or join the FIFO queue. One
-- call carries the acquires a process made on the name in one event-loop turn (same options). It
-- ends in the state one call per token, in that order, would leave (same holders, queue order and
-- fencing order); a token may be granted at once where separate calls would queue it and admit it a
-- moment later (the batch drops expired holders before serving the queue).
-- KEYS  H Q W M P F (see lib/permits.lua)
-- ARGV[1] channel  ARGV[2] lease ttl ms  ARGV[3] permits
-- ARGV[4] mode: 0 = try (never queue), 1 = queue when no permit is free
-- ARGV[5] waiter heartbeat ttl ms  ARGV[6] 1 = reentrant token (re-entry counts, fence remembered;
-- then exactly one token)  ARGV[7..] distinct tokens
-- Returns {now, then per token: {1, fence, expiresAt, holders} when it holds a permit (re-entry adds
--         one to its count; holders = holders of the name right after, for RateLimit headers and
--         metrics) | {0, position, nextExpiry, lastFence} when queued (position is 0-based; lastFence:
--         every grant to this waiter will carry a larger fence, so older grant messages are told
--         apart) | {0, -1, nextExpiry} when not queued (try mode)}
local ttl, mode, waiter_ttl, reentrant = tonumber(ARGV[2]), ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'
local tokens = { unpack(ARGV, 7) }
local n = #tokens
local out = { NOW }

if reentrant then
  local token = tokens[1]
  local held = redis.call('ZSCORE', H, token)
  if held and tonumber(held) > NOW then
    -- Re-entry by the same owner: one more count, lease pushed out to now + ttl.
    local count = tonumber(redis.call('HGET', M, 'c:' .. token) or '1')
    redis.call('HSET', M, 'c:' .. token, count + 1)
    local exp = math.max(tonumber(held), NOW + ttl)
    redis.call('ZADD', H, exp, token)
    redis.call('PEXPIREAT', H, int(exp), 'GT')
    expire_at_least(M, exp)
    out[2] = { 1, tonumber(redis.call('HGET', M, 'g:' .. token) or '0'), exp, redis.call('ZCARD', H) }
    return out
  end
end

-- Tokens first..last take a permit each. `count` = ZCARD H before, so H is new exactly when it is 0.
local function take(first, last, count)
  local exp = NOW + ttl
  local holds = {}
  for i = first, last do
    -- One SET ... GET reads and writes the fence for a single grant; a batch reads once, writes once.
    local fence = first == last and take_fence(exp) or next_fence(exp)
    holds[#holds + 1] = exp
    holds[#holds + 1] = tokens[i]
    out[i + 1] = { 1, fence, exp, count + i - first + 1 }
  end
  save_fence()
  redis.call('ZADD', H, unpack(holds))
  if count == 0 then
    redis.call('PEXPIREAT', H, int(exp))
  else
    redis.call('PEXPIREAT', H, int(exp), 'GT')
  end
  if reentrant then
    local token = tokens[1]
    redis.call('HSET', M, 'g:' .. token, int(out[2][2]))
    redis.call('HDEL', M, 'c:' .. token) -- a count left by an expired lease of this owner
    expire_at_least(M, exp)
  end
  first_expiry = nil
end

-- Fast path: nobody waits and nobody holds, so any limit (always >= 1) has room: no need to read P.
local state = redis.call('EXISTS', Q, Q, H)
if state == 0 and n == 1 then
  take(1, 1, 0)
  return out
end
local queued = state >= 2
local count = state % 2 == 1 and redis.call('ZCARD', H) or 0

local permits = limit(ARGV[3])
-- One call per token would purge up to 100 each time the set is full; a batch may need n.
if count > 0 and count + n > permits then count = count - purge_holders(math.max(100, n)) end
if queued then
  -- Drop the dead, hand free permits to the head of the queue (a reentrant token may be among them).
  purge_waiters()
  local _, granted, admitted = admit(permits, count)
  count = count + admitted
  local mine = n == 1 and granted[tokens[1]]
  if mine then
    out[2] = { 1, mine[1], mine[2], count }
    return out
  end
  queued = redis.call('EXISTS', Q) == 1
end
local first = 1
if not queued and count < permits then
  first = math.min(n, permits - count) + 1
  take(1, first - 1, count)
  if first > n then return out end
end

-- Tokens first..n found no free permit.
if mode ~= '1' then
  for i = first, n do out[i + 1] = { 0, -1, next_expiry() } end
  return out
end
local rank = false
if reentrant and queued then rank = redis.call('ZRANK', Q, tokens[1]) end
local beat = NOW + waiter_ttl
if rank then
  -- The same owner asks again while its token waits (a reentrant owner's concurrent acquires): the
  -- grant will count for both, so each caller's release has a count to give back.
  redis.call('HINCRBY', M, 'k:' .. tokens[1], 1)
  redis.call('ZADD', W, beat, tokens[1])
  redis.call('HSET', M, 't:' .. tokens[1], -math.min(ttl, waiter_ttl))
  out[2] = { 0, rank, next_expiry(), last_fence() }
else
  local joining = n - first + 1
  local ticket = redis.call('HINCRBY', M, 'n', joining) - joining
  local ahead = queued and redis.call('ZCARD', Q) or 0
  -- A permit handed to a waiter later starts with at most its heartbeat ttl: a live waiter renews it
  -- to the full ttl; a waiter that died in the queue gives it back within waiter_ttl, not ttl.
  local handed = math.min(ttl, waiter_ttl)
  local tickets, beats, ttls = {}, {}, {}
  for i = first, n do
    local tok = tokens[i]
    tickets[#tickets + 1] = ticket + i - first + 1
    tickets[#tickets + 1] = tok
    beats[#beats + 1] = beat
    beats[#beats + 1] = tok
    ttls[#ttls + 1] = 't:' .. tok
    ttls[#ttls + 1] = reentrant and -handed or handed
    out[i + 1] = { 0, ahead + i - first, next_expiry(), last_fence() }
  end
  redis.call('ZADD', Q, unpack(tickets))
  redis.call('ZADD', W, unpack(beats))
  redis.call('HSET', M, unpack(ttls))
end
if queued then
  redis.call('PEXPIREAT', Q, int(beat), 'GT')
  redis.call('PEXPIREAT', W, int(beat), 'GT')
  redis.call('PEXPIREAT', M, int(beat), 'GT')
else
  redis.call('PEXPIREAT', Q, int(beat))
  redis.call('PEXPIREAT', W, int(beat))
  expire_at_least(M, beat)
end
return out
